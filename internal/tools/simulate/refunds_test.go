package simulate

import (
	"testing"

	"github.com/sluicehq/sluice/pkg/config"
)

// A reservation replayed: five requests a second apart each reserve 4,000
// of a 10,000-a-minute budget and give back the 2,800 they did not use
// when they end a second later. Without the refunds two fit; with them all
// five do, and what stays charged is what they used (5 × 1,200).
func TestRunReplaysReservations(t *testing.T) {
	cfg := parseConfig(t, "domain: ai\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 10000, algorithm: fixed_window}\n")
	trace := func(refund int64) []Request {
		var out []Request
		for i := range int64(5) {
			out = append(out, Request{Time: i * 2_000_000, Entries: []config.Entry{{Key: "tenant", Value: "a"}}, Cost: 4000, Duration: 1_000_000, Refund: refund})
		}
		return out
	}
	for _, tc := range []struct {
		refund, admitted, refunded int64
	}{{0, 2, 0}, {2800, 5, 5 * 2800}} {
		res, err := Run(cfg, trace(tc.refund), Options{Domain: "ai"})
		if err != nil {
			t.Fatal(err)
		}
		if l := res.Limits[0]; l.Admitted != tc.admitted || l.Refunded != tc.refunded {
			t.Errorf("refund %d: %d admitted, %d refunded; want %d and %d", tc.refund, l.Admitted, l.Refunded, tc.admitted, tc.refunded)
		}
	}
}

// An in-flight limit replayed: each request holds a unit of its tenant's
// two for its duration, named by itself, whatever its trace entry says.
func TestRunReplaysInFlight(t *testing.T) {
	cfg := parseConfig(t, "domain: ai\ndescriptors:\n  - key: tenant\n    descriptors:\n      - key: request_id\n        rate_limit: {unit: minute, requests_per_unit: 2, algorithm: concurrency, holder: true}\n")
	req := func(at int64, id string) Request {
		return Request{Time: at, Entries: []config.Entry{{Key: "tenant", Value: "a"}, {Key: "request_id", Value: id}}, Duration: 1_000_000}
	}
	// The third arrives while two run; the fourth after both ended. The
	// trace's ids repeat: each request is its own holder anyway.
	trace := []Request{req(0, "x"), req(100_000, "x"), req(200_000, "y"), req(1_500_000, "x")}
	res, err := Run(cfg, trace, Options{Domain: "ai"})
	if err != nil {
		t.Fatal(err)
	}
	l := res.Limits[0]
	if l.Admitted != 3 || l.Rejected != 1 || l.Refunded != 3 || l.Keys != 1 {
		t.Errorf("%d admitted, %d rejected, %d refunded, %d keys; want 3, 1, 3 and 1", l.Admitted, l.Rejected, l.Refunded, l.Keys)
	}
	if d := res.decisions; d[2].admitted || !d[3].admitted {
		t.Errorf("decisions %+v; want the third refused and the fourth admitted", d)
	}
	if _, err := ParseUnder("concurrency"); err == nil {
		t.Error("ParseUnder(concurrency) = nil; want an error: a rate replayed as concurrency means nothing")
	}
}
