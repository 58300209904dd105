package localtier

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/global"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/rls"
	"github.com/sluicehq/sluice/pkg/share"
)

// TestLooseKeysHeld: the hits of a key far from its limit wait under the
// upstream's hold (1/16 of what it has left, the sidecar alone on it)
// and are recorded once they pass it, once LooseHold (or half what the
// limit remembers, if less) has gone by, once a request for it is
// refused, with a refund, when the buffer is half full, and at Close; a
// tight key gets no
// hold; an upstream that gives no holds has every key recorded every
// flush.
func TestLooseKeysHeld(t *testing.T) {
	const wide = `domain: edge
descriptors:
  - key: wide
    rate_limit: {name: wide, unit: hour, requests_per_unit: 1600}
  - key: bucket
    rate_limit: {name: bucket, unit: hour, requests_per_unit: 20}
  - key: second
    rate_limit: {name: second, unit: second, requests_per_unit: 16000}
`
	cfg, err := config.Parse(map[string][]byte{"l.yaml": []byte(wide)})
	if err != nil {
		t.Fatal(err)
	}
	serve := func(t *testing.T, withShares bool) *countingUpstream {
		m, err := global.NewMemory(global.MemoryOptions{})
		if err != nil {
			t.Fatal(err)
		}
		o := limiter.Options{Config: func() *config.Config { return cfg }, Decider: limiter.Infallible{Store: m}, Refunds: true}
		if withShares {
			if o.Shares, err = share.New(share.Options{}); err != nil {
				t.Fatal(err)
			}
		}
		return serveService(t, o)
	}
	calls := func(tier *Tier) float64 {
		return testutil.ToFloat64(tier.m.upstreamCalls.WithLabelValues("record", "ok"))
	}
	var svc *rls.Service
	newSidecar := func(t *testing.T, up *countingUpstream, maxPending int) (*Tier, func(n int, kv ...string), *clock) {
		clk := newClock()
		var tier *Tier
		svc, tier = sidecarOn(t, cfg, up, Options{Mode: Async, FlushInterval: time.Hour, BatchSize: 1 << 20, LooseHold: time.Second, MaxPending: maxPending, Now: clk.Now})
		return tier, func(n int, kv ...string) {
			t.Helper()
			if ok := admit(t, svc, n, req(kv...)); ok != n {
				t.Fatalf("admitted %d of %d", ok, n)
			}
		}, clk
	}

	t.Run("held until past the hold", func(t *testing.T) {
		up := serve(t, true)
		tier, admitN, _ := newSidecar(t, up, 0)
		admitN(10, "wide", "a")
		tier.flush(nil, false) // no hold yet: recorded; 1590 left, a hold of 99
		admitN(99, "wide", "a")
		tier.flush(nil, false)
		if left := remaining(t, up, "wide", "a"); left != 1590 || calls(tier) != 1 {
			t.Fatalf("99 within the hold: %d left upstream after %v record calls; want 1590 after 1 (kept)", left, calls(tier))
		}
		if held := tier.pending.kept.Load(); held != 1 {
			t.Errorf("held keys %v; want 1", held)
		}
		admitN(1, "wide", "a")
		tier.flush(nil, false)
		if left := remaining(t, up, "wide", "a"); left != 1490 {
			t.Fatalf("100 past the hold of 99: %d left upstream; want 1490", left)
		}
	})
	t.Run("held no longer than LooseHold", func(t *testing.T) {
		up := serve(t, true)
		tier, admitN, clk := newSidecar(t, up, 0)
		admitN(10, "wide", "a")
		tier.flush(nil, false)
		admitN(5, "wide", "a")
		clk.Advance(999 * time.Millisecond)
		tier.flush(nil, false)
		if left := remaining(t, up, "wide", "a"); left != 1590 {
			t.Fatalf("within the second: %d left; want 1590", left)
		}
		clk.Advance(time.Millisecond)
		tier.flush(nil, false)
		if left := remaining(t, up, "wide", "a"); left != 1585 {
			t.Fatalf("after the second: %d left; want 1585", left)
		}
	})
	t.Run("held no longer than half what the limit remembers", func(t *testing.T) {
		up := serve(t, true)
		tier, admitN, clk := newSidecar(t, up, 0)
		admitN(10, "second", "a")
		tier.flush(nil, false)
		admitN(5, "second", "a")
		clk.Advance(499 * time.Millisecond)
		tier.flush(nil, false)
		if calls(tier) != 1 {
			t.Fatalf("within half a second: %v record calls; want 1", calls(tier))
		}
		clk.Advance(time.Millisecond)
		tier.flush(nil, false)
		if calls(tier) != 2 {
			t.Fatalf("after half a second: %v record calls; want 2", calls(tier))
		}
		if expired := testutil.ToFloat64(tier.m.expired); expired != 0 {
			t.Errorf("%v hits expired; want none (every held hit sent while it counts)", expired)
		}
	})
	t.Run("a key that refuses is sent at once", func(t *testing.T) {
		up := serve(t, true)
		tier, admitN, _ := newSidecar(t, up, 0)
		admitN(10, "wide", "a")
		tier.flush(nil, false)
		admitN(5, "wide", "a")
		// The key's pending entry records a request refused (as the flag
		// cache or the local bucket refuses): asked, not admitted.
		var key string
		for i := range tier.pending.shards {
			for k := range tier.pending.shards[i].hits {
				key = k
			}
		}
		tier.pend(key, 0, 1, 0, 0, 0, nil)
		tier.flush(nil, false)
		if left := remaining(t, up, "wide", "a"); left != 1585 {
			t.Fatalf("a held key that refused: %d left; want 1585 (sent)", left)
		}
	})
	t.Run("a refund is sent at once", func(t *testing.T) {
		up := serve(t, true)
		tier, admitN, _ := newSidecar(t, up, 0)
		admitN(10, "wide", "a")
		tier.flush(nil, false)
		admitN(5, "wide", "a")
		r := req("wide", "a")
		r.Descriptors[0].HitsAddend, r.Descriptors[0].IsNegativeHits = wrapperspb.UInt64(2), true
		if _, err := svc.ShouldRateLimit(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		tier.flush(nil, false)
		if left := remaining(t, up, "wide", "a"); left != 1587 {
			t.Fatalf("5 hits and a refund of 2 after 10: %d left; want 1587", left)
		}
	})
	t.Run("never with the buffer half full", func(t *testing.T) {
		up := serve(t, true)
		tier, admitN, _ := newSidecar(t, up, 4)
		for _, k := range []string{"a", "b", "c"} {
			admitN(1, "wide", k)
		}
		tier.flush(nil, false) // holds for all three
		for _, k := range []string{"a", "b", "c"} {
			admitN(1, "wide", k)
		}
		tier.flush(nil, false) // 3 of 4 pending: sent
		if left := remaining(t, up, "wide", "c"); left != 1598 {
			t.Fatalf("3 keys pending of at most 4: %d left; want 1598 (recorded)", left)
		}
	})
	t.Run("recorded at Close", func(t *testing.T) {
		up := serve(t, true)
		tier, admitN, _ := newSidecar(t, up, 0)
		admitN(10, "wide", "a")
		tier.flush(nil, false)
		admitN(7, "wide", "a")
		tier.Close()
		if left := remaining(t, up, "wide", "a"); left != 1583 {
			t.Fatalf("after Close: %d left; want 1583", left)
		}
	})
	t.Run("a tight key is not held", func(t *testing.T) {
		up := serve(t, true)
		tier, admitN, _ := newSidecar(t, up, 0)
		admitN(16, "bucket", "a")
		tier.flush(nil, false) // 4 left of 20: tight, an allowance
		admitN(2, "bucket", "a")
		tier.flush(nil, false)
		if left := remaining(t, up, "bucket", "a"); left != 2 {
			t.Fatalf("a tight key: %d left; want 2 (recorded every flush)", left)
		}
	})
	t.Run("no holds from an upstream without shares", func(t *testing.T) {
		up := serve(t, false)
		tier, admitN, _ := newSidecar(t, up, 0)
		admitN(10, "wide", "a")
		tier.flush(nil, false)
		admitN(3, "wide", "a")
		tier.flush(nil, false)
		if left := remaining(t, up, "wide", "a"); left != 1587 {
			t.Fatalf("no holds: %d left; want 1587", left)
		}
	})
}
