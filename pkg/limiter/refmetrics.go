package limiter

import (
	"math"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/pkg/algorithm"
)

// nearLimitRatio is the share of a limit past which the reference counts
// hits as near_limit (its NEAR_LIMIT_RATIO default).
const nearLimitRatio = 0.8

// referenceMetrics are envoyproxy/ratelimit's per-limit counters under the
// names and labels its Prometheus mapping gives them
// (ratelimit_service_rate_limit_*{domain, key1, key2}: the limit's key
// after the domain, its first two dot-separated parts), counted in hits as
// it counts them, so that dashboards and alerts written for it keep
// working (EnableReferenceMetrics).
type referenceMetrics struct {
	total, over, near, within, shadow *prometheus.CounterVec
}

// EnableReferenceMetrics registers the reference's metrics on reg; from
// then on m counts them too. Call it once, before m is used.
func (m *Metrics) EnableReferenceMetrics(reg prometheus.Registerer) {
	vec := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimit_service_rate_limit_" + name, Help: help}, []string{"domain", "key1", "key2"})
	}
	r := &referenceMetrics{
		total:  vec("total_hits", "envoyproxy/ratelimit's total_hits: hits asked of the limit."),
		over:   vec("over_limit", "envoyproxy/ratelimit's over_limit: hits past the limit."),
		near:   vec("near_limit", "envoyproxy/ratelimit's near_limit: hits past 80% of the limit and within it."),
		within: vec("within_limit", "envoyproxy/ratelimit's within_limit: hits of requests within the limit."),
		shadow: vec("shadow_mode", "envoyproxy/ratelimit's shadow_mode: hits past a shadow-mode limit."),
	}
	reg.MustRegister(r.total, r.over, r.near, r.within, r.shadow)
	m.reference = r
}

// reference counts one decision as the reference would: cost hits on a
// limit of size units (what one request may take), r its result. key is
// the limit's key after the domain.
func (m *Metrics) referenceDecision(domain, key string, p algorithm.Params, cost int64, r algorithm.Result, shadow bool) {
	if m == nil || m.reference == nil || cost <= 0 {
		return
	}
	k1, rest, _ := strings.Cut(key, ".")
	k2, _, _ := strings.Cut(rest, ".")
	labels := []string{domain, m.detailedLabel(k1), m.detailedLabel(k2)}
	size := algorithm.MaxCost(p)
	near := int64(math.Floor(float64(size) * nearLimitRatio))
	// What was used before and after, in the reference's counter's terms:
	// it counts a rejected request's hits too.
	after := size - r.Remaining
	before := after - cost
	if !r.Allowed {
		before, after = size-r.Remaining, size-r.Remaining+cost
	}
	ref := m.reference
	ref.total.WithLabelValues(labels...).Add(float64(cost))
	if after > size {
		overHits := after - size
		if before >= size {
			overHits = cost
		} else {
			ref.near.WithLabelValues(labels...).Add(float64(size - max(near, before)))
		}
		ref.over.WithLabelValues(labels...).Add(float64(overHits))
		if shadow {
			ref.shadow.WithLabelValues(labels...).Add(float64(overHits))
		}
		return
	}
	if after > near {
		nearHits := after - near
		if before >= near {
			nearHits = cost
		}
		ref.near.WithLabelValues(labels...).Add(float64(nearHits))
	}
	ref.within.WithLabelValues(labels...).Add(float64(cost))
}
