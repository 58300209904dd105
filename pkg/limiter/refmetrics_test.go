package limiter

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/pkg/algorithm"
)

// TestReferenceMetrics counts as envoyproxy/ratelimit counts its stats
// (base_limiter.go) on a limit of 10: twelve single hits (within 10, near
// 2 for the 9th and 10th, over 2), then in a fresh window nine (within 9,
// near 1) and one of 3 hits that does not fit (over 2, near 1: its share
// below the limit); the labels split the key after the domain.
func TestReferenceMetrics(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	m.EnableReferenceMetrics(prometheus.NewRegistry())
	p := algorithm.Params{Kind: algorithm.FixedWindow, Limit: 10, Window: 60_000_000}
	var st algorithm.State
	decide := func(cost int64) {
		var r algorithm.Result
		st, r = algorithm.Decide(st, p, 1, cost, algorithm.Take)
		m.referenceDecision("edge", "client_a.path_b.more", p, cost, r, false)
	}
	for range 12 {
		decide(1)
	}
	// A fresh window with 9 used, then 3 hits: 2 past the limit.
	st = algorithm.State{}
	for range 9 {
		decide(1)
	}
	decide(3)
	labels := []string{"edge", "client_a", "path_b"}
	for _, c := range []struct {
		name string
		vec  *prometheus.CounterVec
		want float64
	}{
		{"total_hits", m.reference.total, 12 + 9 + 3},
		{"within_limit", m.reference.within, 10 + 9},
		{"near_limit", m.reference.near, 2 + 1 + 1},
		{"over_limit", m.reference.over, 2 + 2},
		{"shadow_mode", m.reference.shadow, 0},
	} {
		if got := testutil.ToFloat64(c.vec.WithLabelValues(labels...)); got != c.want {
			t.Errorf("%s = %v; want %v", c.name, got, c.want)
		}
	}
}
