package loadgen

import (
	"context"
	"fmt"
)

// A hybrid tier (a sidecar, or a server in cached Redis mode) can answer
// fast by deciding without the central state: from its fallback share
// with the upstream marked down, by shedding, or admitting hits it then
// drops; and a sidecar whose upstream does not take its records as a
// sidecar's (it lacks the credentials) gets no shares or holds, its hits
// decided as an ordinary request's. A load generator counts those answers as successes, so a
// benchmark of the tier reads the tier's own counters around the measured
// phase (Options.TierMetricsURL), and a run in which any of them moved is
// a failed run, like one with errors.

// tierFault is one counter of a decision taken without the central state.
type tierFault struct {
	name, metric, label, value string
}

var tierFaults = []tierFault{
	{"fallback", "sluice_tier_decisions_total", "tier", "fallback"},
	{"shed", "sluice_tier_decisions_total", "tier", "shed"},
	{"failure_mode", "sluice_tier_decisions_total", "tier", "failure_mode"},
	{"dropped_hits", "sluice_localfilter_dropped_hits_total", "", ""},
	{"upstream_outages", "sluice_localfilter_upstream_outages_total", "", ""},
	{"records_refused", "sluice_localfilter_record_refusals_total", "", ""},
}

// tierDecisions is the family a tier's endpoint serves once it decided:
// without it after a run the URL is not a sluice tier's, and zero faults
// would mean nothing.
const tierDecisions = "sluice_tier_decisions_total"

// tierSample reads the tier's fault counters; after a run (decided), the
// endpoint must have counted decisions.
func (m *metricsSampler) tierSample(ctx context.Context, decided bool) (map[string]float64, error) {
	families, err := m.scrape(ctx)
	if err != nil {
		return nil, err
	}
	if decided && families[tierDecisions] == nil {
		return nil, fmt.Errorf("tier metrics %s: no %s after the run: not a sluice sidecar's or server's", m.url, tierDecisions)
	}
	out := make(map[string]float64, len(tierFaults))
	for _, f := range tierFaults {
		out[f.name] = counter(families, f.metric, f.label, f.value)
	}
	return out, nil
}

// tierDelta is what moved between two samples; nil when nothing did.
func tierDelta(before, after map[string]float64) map[string]float64 {
	var out map[string]float64
	for name, v := range after {
		if d := v - before[name]; d > 0 {
			if out == nil {
				out = map[string]float64{}
			}
			out[name] = d
		}
	}
	return out
}

// faultText lists faults as "fallback=12 shed=3", in name order.
func faultText(faults map[string]float64) []string {
	var parts []string
	for _, name := range sortedKeys(faults) {
		parts = append(parts, fmt.Sprintf("%s=%.0f", name, faults[name]))
	}
	return parts
}
