package localtier

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	decisions *prometheus.CounterVec
	upstreams *prometheus.CounterVec
	batch     prometheus.Histogram
	flush     prometheus.Histogram
	dropped   prometheus.Counter
	pending   prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_localfilter_decisions_total",
			Help: "Sidecar decisions by tier (local_bucket, global, fallback) and result; flag-cache answers are sluice_flag_cache_hits_total.",
		}, []string{"tier", "result"}),
		upstreams: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_localfilter_upstream_calls_total",
			Help: "Calls to the upstream global service by result.",
		}, []string{"result"}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_localfilter_flush_batch_size", Help: "Descriptors per async flush call.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 7),
		}),
		flush: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_localfilter_flush_duration_seconds", Help: "Latency of an async flush.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1},
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_localfilter_dropped_hits_total", Help: "Admitted hits never sent upstream because the pending buffer was full.",
		}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_localfilter_pending_keys", Help: "Keys with hits waiting to be sent upstream.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.decisions, m.upstreams, m.batch, m.flush, m.dropped, m.pending)
	}
	return m
}

func (m *metrics) decision(tier, result string) { m.decisions.WithLabelValues(tier, result).Inc() }
func (m *metrics) upstream(result string)       { m.upstreams.WithLabelValues(result).Inc() }
