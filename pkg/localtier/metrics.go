package localtier

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/pkg/rls"
)

// metrics are the sidecar's own; decisions by tier are rls's
// sluice_tier_decisions_total, from limiter.Batch.Source.
type metrics struct {
	upstreamCalls *prometheus.CounterVec
	upstreamUp    prometheus.Gauge
	outages       prometheus.Counter
	batch         prometheus.Histogram
	flush         prometheus.Histogram
	lag           prometheus.Histogram
	dropped       prometheus.Counter
	expired       prometheus.Counter
	allowances    prometheus.Counter
	refusals      *prometheus.CounterVec
	lateCounted   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, t *Tier) *metrics {
	// A flush's latency and lag, 0.5 ms to 250 ms.
	flushBuckets := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25}
	m := &metrics{
		upstreamCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_localfilter_upstream_calls_total",
			Help: "Calls to the upstream global service by kind (sync: a decision; record: an async flush of admitted hits) and result (ok, error).",
		}, []string{"kind", "result"}),
		upstreamUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_localfilter_upstream_up",
			Help: "1 while the upstream answers, 0 while the sidecar decides locally at the fallback share.",
		}),
		outages: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_localfilter_upstream_outages_total",
			Help: "Times the upstream was marked unavailable (sluice_localfilter_upstream_up going to 0): from then the sidecar decided at the fallback share until it answered again.",
		}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_localfilter_flush_batch_size", Help: "Keys (descriptors) per async flush call.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 7),
		}),
		flush: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_localfilter_flush_duration_seconds", Help: "Latency of an async flush, all its calls.",
			Buckets: flushBuckets,
		}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_localfilter_flush_lag_seconds", Help: "How late async flushes start after their tick: a flusher short of CPU, which lengthens the overshoot cycle.",
			Buckets: flushBuckets,
		}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_localfilter_expired_hits_total",
			Help: "Admitted hits not recorded because they were held (through an upstream outage) past the time their limit remembers a hit.",
		}),
		allowances: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_localfilter_allowances_total",
			Help: "Allowances received: the upstream's answers giving this sidecar its share of a tight key (pkg/share).",
		}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_localfilter_record_refusals_total",
			Help: "Flush calls whose recorded hits the upstream did not accept because it does not know this sidecar, by its reason (not_configured, no_credentials, unknown_certificate, bad_token, token_without_tls): it decided them as an ordinary request, so hits that did not fit were dropped (counted in sluice_localfilter_dropped_hits_total). /readyz is not ready meanwhile.",
		}, []string{"reason"}),
		lateCounted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_localfilter_late_counted_total",
			Help: "Sync calls answered locally (tier slow) whose late answer said the upstream had counted their hits: not recorded again.",
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_localfilter_dropped_hits_total",
			Help: "Admitted hits never recorded upstream: the pending buffer was full (-max-pending keys or -max-pending-bytes), the upstream refused them (InvalidArgument, ResourceExhausted, FailedPrecondition, OutOfRange, Unimplemented, or a sidecar it does not know whose hits did not fit), one key's aggregate passed the most a descriptor may carry, or the upstream was away at shutdown.",
		}),
	}
	m.upstreamUp.Set(1)
	// Both kinds in both modes: a sync tier's probes are sync calls, and
	// its flushes records (the demand it reports, the hits it decided
	// while the upstream was slow or away).
	for _, kind := range []string{rls.SidecarSync, rls.SidecarRecord} {
		for _, result := range []string{"ok", "error"} { // 0 until one happens, not absent
			m.upstreamCalls.WithLabelValues(kind, result)
		}
	}
	if reg != nil {
		reg.MustRegister(m.upstreamCalls, m.upstreamUp, m.outages, m.batch, m.flush, m.lag, m.dropped, m.expired, m.allowances, m.refusals, m.lateCounted,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "sluice_localfilter_pending_keys", Help: "Keys with admitted hits waiting to be sent upstream.",
			}, func() float64 { return float64(t.pending.keys.Load()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "sluice_localfilter_local_keys", Help: "Keys held by the local token buckets.",
			}, func() float64 { return float64(t.local.Len()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "sluice_localfilter_allowance_keys",
				Help: "Keys this sidecar holds an allowance for (its share of what a tight key's limit has left, from the upstream's answers), or held one for within the last second.",
			}, func() float64 { return float64(int64(t.allow.len())) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "sluice_localfilter_held_keys",
				Help: "Keys far from their limits whose hits the last flush kept pending under the upstream's holds (-loose-hold): recorded later, several hits a record.",
			}, func() float64 { return float64(t.pending.kept.Load()) }),
		)
	}
	return m
}
