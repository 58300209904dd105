package envoy_test

import (
	"testing"
)

// TestReservationRoute: the reservation route is Envoy's API (validated
// all the way down, nothing deprecated), charges the most a request may
// cost at request time and refunds (is_negative_hits) at stream end from
// dynamic metadata, and its descriptor selects a limit that refuses a
// reservation that does not fit (no count_refused).
func TestReservationRoute(t *testing.T) {
	limits := routeRateLimits(t, "reservation-route.yaml")
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
	for i, l := range aiLimits(t, limits) {
		if l == nil || l.RateLimit.CountRefused || int64(l.RateLimit.RequestsPerUnit) < int64(reserve.GetHitsAddend().GetNumber().GetValue()) {
			t.Errorf("rate_limits[%d] selects %v in domain ai; want a limit that holds a reservation and refuses one that does not fit", i, l)
		}
	}
}
