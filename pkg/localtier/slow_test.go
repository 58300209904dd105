package localtier

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/rls"
)

// stallingUpstream holds the sync calls for one value until their
// deadline (an upstream too busy to answer them in time), or every call
// while frozen, and answers the rest.
type stallingUpstream struct {
	*countingUpstream
	value  string
	frozen atomic.Bool
	delay  time.Duration
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
	if u.delay > 0 {
		time.Sleep(u.delay) // answers, after its caller's deadline
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
	if err := tier.Decide(context.Background(), b); err != nil || !b.Results[0].Allowed || b.Source != limiter.SourceSlow {
		t.Fatalf("a call the upstream did not answer in time: %v, %+v from %q; want admitted by tier %q", err, b.Results[0], b.Source, limiter.SourceSlow)
	}
	if !tier.Healthy() {
		t.Fatal("one slow call opened the upstream's breaker")
	}
	if ok := admit(t, s, 1, req("client", "fast")); ok != 1 {
		t.Fatal("after a slow call: the next one not decided by the upstream")
	}
	// The call is awaited for lateTimeout, then its hit is pending.
	for deadline := time.Now().Add(5 * time.Second); len(tier.late) > 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the call answered locally still awaited after 5s")
		}
	}
	tier.flush(nil, true)
	if got := remaining(t, up.countingUpstream, "route", "late"); got != 2 {
		t.Errorf("the slow answer's hit not recorded: %d of 3 left upstream; want 2", got)
	}
	// Frozen: nothing answers for longer than slowWindow.
	up.frozen.Store(true)
	clk.Advance(2 * slowWindow)
	b = batch("route", "late", routeParams, 1)
	if err := tier.Decide(context.Background(), b); err != nil || b.Source != limiter.SourceFallback || tier.Healthy() {
		t.Fatalf("an upstream silent for %v: %v, %+v from %q, healthy %v; want the fallback, breaker open", 2*slowWindow, err, b.Results[0], b.Source, tier.Healthy())
	}
}

// TestSyncLateAnswerCounted: a sync call answered locally whose answer
// comes late and says the upstream counted the hit: the hit is not
// recorded a second time.
func TestSyncLateAnswerCounted(t *testing.T) {
	up := &stallingUpstream{countingUpstream: upstream(t), delay: 100 * time.Millisecond}
	reg := prometheus.NewRegistry()
	_, tier := sidecar(t, up, Options{Mode: Sync, Timeout: 30 * time.Millisecond, FlushInterval: time.Hour, BatchSize: 1 << 20, Registerer: reg})
	b := batch("route", "counted", routeParams, 1)
	b.Paths = []string{mustConfig(t).Match("edge", []config.Entry{{Key: "route", Value: "counted"}}).Path}
	if err := tier.Decide(context.Background(), b); err != nil || !b.Results[0].Allowed || b.Source != limiter.SourceSlow {
		t.Fatalf("a call answered after its deadline: %v, %+v from %q; want admitted by tier %q", err, b.Results[0], b.Source, limiter.SourceSlow)
	}
	for deadline := time.Now().Add(5 * time.Second); testutil.ToFloat64(tier.m.lateCounted) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the late answer never arrived")
		}
	}
	tier.flush(nil, true)
	if got := remaining(t, up.countingUpstream, "route", "counted"); got != 2 {
		t.Errorf("%d of 3 left upstream; want 2: counted once, by the call that came late", got)
	}
}
