package envoy_test

import (
	"os"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/sluicehq/sluice/internal/testkit/envoyrl"
	"github.com/sluicehq/sluice/pkg/config"
)

// TestReservationRoute: the reservation route is Envoy's API (validated
// all the way down, nothing deprecated), charges the most a request may
// cost at request time and refunds (is_negative_hits) at stream end from
// dynamic metadata, and its descriptor selects a limit that refuses a
// reservation that does not fit (no count_refused).
func TestReservationRoute(t *testing.T) {
	data, err := os.ReadFile("reservation-route.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rc := &routev3.RouteConfiguration{}
	if err := envoyrl.ParseYAML(data, rc); err != nil {
		t.Fatal(err)
	}
	for _, err := range deepCheck(rc) {
		t.Error(err)
	}
	limits := rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetRateLimits()
	if len(limits) != 2 {
		t.Fatalf("%d rate_limits; want the reservation and the refund", len(limits))
	}
	reserve, refund := limits[0], limits[1]
	if reserve.GetApplyOnStreamDone() || reserve.GetHitsAddend().GetNumber().GetValue() == 0 || reserve.GetHitsAddend().GetIsNegativeHits() {
		t.Errorf("the request-time entry does not charge the most a request costs: %v", reserve)
	}
	if !refund.GetApplyOnStreamDone() || !refund.GetHitsAddend().GetIsNegativeHits() || refund.GetHitsAddend().GetFormat() == "" {
		t.Errorf("the stream-end entry does not refund from metadata: %v", refund)
	}
	cfg, err := config.Load(configDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, rl := range limits {
		key := rl.GetActions()[0].GetRequestHeaders().GetDescriptorKey()
		l := cfg.Match("ai", []config.Entry{{Key: key, Value: "tenant-a"}})
		if l == nil || l.RateLimit.CountRefused || int64(l.RateLimit.RequestsPerUnit) < int64(reserve.GetHitsAddend().GetNumber().GetValue()) {
			t.Errorf("descriptor %q selects %v in domain ai; want a limit that holds a reservation and refuses one that does not fit", key, l)
		}
	}
}
