package localtier

import (
	"context"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/global"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// TestRefundThroughTheSidecar: in either mode a refund gives the local
// bucket its units back at once and reaches the upstream with the next
// flush; a request mixing a refund and a charge is refused.
func TestRefundThroughTheSidecar(t *testing.T) {
	for _, mode := range []Mode{Sync, Async} {
		t.Run(mode.String(), func(t *testing.T) {
			up := upstream(t)
			// The test flushes; a flusher ticking beside it would race.
			svc, tier := sidecar(t, up, Options{Mode: mode, FlushInterval: time.Hour, BatchSize: 1 << 20})
			ctx := context.Background()
			charge := func(hits uint64, refund bool) string {
				t.Helper()
				r := req("route", "r")
				r.Descriptors[0].HitsAddend, r.Descriptors[0].IsNegativeHits = wrapperspb.UInt64(hits), refund
				resp, err := svc.ShouldRateLimit(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				return resp.GetOverallCode().String()
			}
			if got := charge(3, false); got != "OK" {
				t.Fatalf("3 charged: %s", got)
			}
			if got := charge(2, true); got != "OK" {
				t.Fatalf("2 refunded: %s", got)
			}
			tier.flush(nil, true)
			if left := remaining(t, up, "route", "r"); left != 2 {
				t.Fatalf("the refund did not reach the upstream with the flush: %d left; want 2", left)
			}
			if got := charge(2, false); got != "OK" {
				t.Errorf("2 charged after the refund: %s; want OK (the local bucket got them back)", got)
			}
			mixed := req("route", "r", "route", "r")
			mixed.Descriptors[0].IsNegativeHits = true
			if _, err := svc.ShouldRateLimit(ctx, mixed); err == nil {
				t.Error("a refund beside a charge at a sidecar: answered; want refused")
			}
		})
	}
}

// TestRefundToAnOlderServer: a server that applies no refunds refuses
// their call alone: the refunds are dropped and counted, the hits of the
// same flush are recorded.
func TestRefundToAnOlderServer(t *testing.T) {
	m, err := global.NewMemory(global.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := mustConfig(t)
	up := serveService(t, limiter.Options{Config: func() *config.Config { return cfg }, Decider: limiter.Infallible{Store: m}})
	svc, tier := sidecar(t, up, Options{Mode: Async, FlushInterval: time.Hour, BatchSize: 1 << 20})
	ctx := context.Background()
	charge := req("route", "r")
	charge.Descriptors[0].HitsAddend = wrapperspb.UInt64(2)
	refund := req("route", "r")
	refund.Descriptors[0].HitsAddend, refund.Descriptors[0].IsNegativeHits = wrapperspb.UInt64(1), true
	for _, r := range []*rlsv3.RateLimitRequest{charge, refund} {
		if _, err := svc.ShouldRateLimit(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	tier.flush(nil, true)
	if dropped, left := testutil.ToFloat64(tier.m.dropped), remaining(t, up, "route", "r"); dropped != 1 || left != 1 {
		t.Fatalf("dropped %v, %d left upstream; want the refund of 1 dropped and the 2 hits recorded (1 left of 3)", dropped, left)
	}
}
