package envoy_test

import (
	"testing"

	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/config"
)

// TestInFlightRoute: the in-flight route is Envoy's API (validated all the
// way down, nothing deprecated), takes a unit at request time and gives it
// back at stream end, both naming the request by its x-request-id, and
// its descriptor selects a concurrency limit that names its holder.
func TestInFlightRoute(t *testing.T) {
	limits := routeRateLimits(t, "inflight-route.yaml")
	if len(limits) != 2 {
		t.Fatalf("%d rate_limits; want the take and the refund", len(limits))
	}
	take, refund := limits[0], limits[1]
	if take.GetApplyOnStreamDone() || take.GetHitsAddend() != nil {
		t.Errorf("the request-time entry does not take one unit: %v", take)
	}
	if !refund.GetApplyOnStreamDone() || !refund.GetHitsAddend().GetIsNegativeHits() || refund.GetHitsAddend().GetNumber().GetValue() != 1 {
		t.Errorf("the stream-end entry does not give one unit back: %v", refund)
	}
	cfg, err := config.Load(configDir)
	if err != nil {
		t.Fatal(err)
	}
	for i, rl := range limits {
		var entries []config.Entry
		for _, a := range rl.GetActions() {
			entries = append(entries, config.Entry{Key: a.GetRequestHeaders().GetDescriptorKey(), Value: "x"})
		}
		if len(entries) != 2 || rl.GetActions()[1].GetRequestHeaders().GetHeaderName() != "x-request-id" {
			t.Errorf("rate_limits[%d] does not name the request by its x-request-id: %v", i, rl)
		}
		l := cfg.Match("ai", entries)
		if l == nil || l.RateLimit.Algorithm != algorithm.Concurrency || !l.RateLimit.Holder {
			t.Errorf("rate_limits[%d] selects %v in domain ai; want a concurrency limit naming its holder", i, l)
		}
	}
}
