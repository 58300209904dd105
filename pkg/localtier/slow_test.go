package localtier

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/rls"
)

// stallingUpstream holds the sync calls for one value until their
// deadline (an upstream too busy to answer them in time), or every call
// while frozen, and answers the rest.
type stallingUpstream struct {
	*countingUpstream
	value  string
	frozen atomic.Bool
}

func (u *stallingUpstream) ShouldRateLimit(ctx context.Context, in *rlsv3.RateLimitRequest, opts ...grpc.CallOption) (*rlsv3.RateLimitResponse, error) {
	late := u.frozen.Load()
	md, _ := metadata.FromOutgoingContext(ctx)
	for _, d := range in.GetDescriptors() {
		if sync := md.Get(rls.SidecarKey); len(sync) == 0 || sync[0] != rls.SidecarSync {
			break // records are answered
		}
		for _, e := range d.GetEntries() {
			late = late || e.GetValue() == u.value
		}
	}
	if late {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return u.countingUpstream.ShouldRateLimit(ctx, in, opts...)
}

// TestSyncSlowIsNotGone: a sync call that misses its deadline while the
// upstream answers other calls is answered locally (tier slow) without
// opening the upstream's breaker, and its hit is recorded; an upstream
// that answers nothing for slowWindow is gone (tier fallback).
func TestSyncSlowIsNotGone(t *testing.T) {
	up := &stallingUpstream{countingUpstream: upstream(t), value: "late"}
	clk := newClock()
	s, tier := sidecar(t, up, Options{Mode: Sync, Timeout: 30 * time.Millisecond, FlushInterval: time.Hour, BatchSize: 1 << 20, Now: clk.Now})
	if ok := admit(t, s, 2, req("client", "fast")); ok != 2 {
		t.Fatalf("the upstream answering: %d of 2 admitted", ok)
	}
	b := batch("route", "late", routeParams, 1)
	b.Paths = []string{mustConfig(t).Match("edge", []config.Entry{{Key: "route", Value: "late"}}).Path}
	if err := tier.Decide(context.Background(), b); err != nil || !b.Results[0].Allowed || b.Tier != tierSlow {
		t.Fatalf("a call the upstream did not answer in time: %v, %+v from %q; want admitted by tier %q", err, b.Results[0], b.Tier, tierSlow)
	}
	if !tier.Healthy() {
		t.Fatal("one slow call opened the upstream's breaker")
	}
	if ok := admit(t, s, 1, req("client", "fast")); ok != 1 {
		t.Fatal("after a slow call: the next one not decided by the upstream")
	}
	tier.flush(nil)
	if got := remaining(t, up.countingUpstream, "route", "late"); got != 2 {
		t.Errorf("the slow answer's hit not recorded: %d of 3 left upstream; want 2", got)
	}
	// Frozen: nothing answers for longer than slowWindow.
	up.frozen.Store(true)
	clk.Advance(2 * slowWindow)
	b = batch("route", "late", routeParams, 1)
	if err := tier.Decide(context.Background(), b); err != nil || b.Tier != tierFallback || tier.Healthy() {
		t.Fatalf("an upstream silent for %v: %v, %+v from %q, healthy %v; want the fallback, breaker open", 2*slowWindow, err, b.Results[0], b.Tier, tier.Healthy())
	}
}
