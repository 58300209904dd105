package rlqs

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	reports     prometheus.Counter
	pushes      prometheus.Counter
	peerErrors  prometheus.Counter
	assignments *prometheus.CounterVec
	refused     *prometheus.CounterVec
	recorded    *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, s *Service) *metrics {
	m := &metrics{
		reports: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_rlqs_reports_total",
			Help: "Usage reports received from Envoys' rate limit quota filters.",
		}),
		pushes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_rlqs_pushes_total",
			Help: "Responses sent to an Envoy between its reports: its share of a limit moved as other Envoys reported.",
		}),
		peerErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_rlqs_peer_errors_total",
			Help: "Reports whose limit this replica split as if alone: the other replicas' demand could not be read from Redis.",
		}),
		assignments: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_rlqs_assignments_total",
			Help: "Bucket actions sent to Envoys, by kind: token_bucket (a share of a limit), allow_all (no limit applies to the bucket, or a shadow-mode one), deny_all (a limit of 0), abandon (a bucket reported idle for a minute).",
		}, []string{"kind"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_rlqs_refused_total",
			Help: "Streams, buckets and reports refused, by reason: a peerauth reason (the caller is not known), streams_full, buckets_full, keys_full (a share given as if alone), bad_bucket, idle (a stream that sent nothing).",
		}, []string{"reason"}),
		recorded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_rlqs_recorded_requests_total",
			Help: "Requests Envoys reported allowed, by result: ok (recorded on the limits' global state), lost (the store was away).",
		}, []string{"result"}),
	}
	for _, k := range []string{"token_bucket", "allow_all", "deny_all", "abandon"} {
		m.assignments.WithLabelValues(k)
	}
	for _, r := range []string{"ok", "lost"} {
		m.recorded.WithLabelValues(r)
	}
	for _, r := range []string{"streams_full", "buckets_full", "keys_full", "bad_bucket", "idle"} {
		m.refused.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.reports, m.pushes, m.peerErrors, m.assignments, m.refused, m.recorded,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "sluice_rlqs_streams", Help: "Envoys' rate limit quota streams open.",
			}, func() float64 { return float64(s.streams.Load()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "sluice_rlqs_buckets", Help: "Buckets the open streams have reported.",
			}, func() float64 { return float64(s.buckets.Load()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "sluice_rlqs_fleet_keys", Help: "Limit keys whose Envoys' demand is tracked for their shares.",
			}, func() float64 { return float64(s.fleet.len()) }),
		)
	}
	return m
}
