package global

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/pkg/algorithm"
)

// TestDebtCapOnRedis is finding 8 of issue 21 on the Lua scripts, with the
// attacker's numbers: 2^32 hits charged on a token bucket of 1 a day with
// a burst of 100, as count_refused counts them and as a sidecar's record
// forces them, answered a Retry-After of 101 days. The debt stops at one
// window's refill (algorithm.Decide), so the key is held back for at most
// one window plus one unit's refill: two days.
func TestDebtCapOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	rs := newRedisStore(t, RedisOptions{Client: srv.Client(t), InjectTime: true})
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	const day = 24 * 3600 * sec
	now := int64(1_780_000_020) * sec
	for _, kind := range []algorithm.Kind{algorithm.TokenBucket, algorithm.GCRA} {
		for _, mode := range []algorithm.Mode{algorithm.Count, algorithm.Force} {
			t.Run(fmt.Sprintf("%v/%s", kind, map[algorithm.Mode]string{algorithm.Count: "count", algorithm.Force: "force"}[mode]), func(t *testing.T) {
				p := algorithm.Params{Kind: kind, Limit: 1, Window: day, Burst: 100}
				key := Key(prefix, kind.String(), fmt.Sprint(mode))
				got := make([]Result, 1)
				if err := rs.DecideAt(ctx, []Item{{Key: key, Params: p, Cost: 1 << 32, Mode: mode}}, got, now); err != nil {
					t.Fatal(err)
				}
				bound := p.Window + p.Window/p.Limit + 1 // W + one unit's refill, and 1 µs of rounding
				if r := got[0]; r.Allowed || r.RetryAfter <= 0 || r.RetryAfter > bound {
					t.Fatalf("DecideAt(2^32, mode %d) = %+v; want denied, RetryAfter in (0, %d µs] (%.1f days)", mode, r, bound, float64(bound)/float64(day))
				}
				if err := rs.DecideAt(ctx, []Item{{Key: key, Params: p, Cost: 1}}, got, now+got[0].RetryAfter); err != nil {
					t.Fatal(err)
				}
				if !got[0].Allowed {
					t.Errorf("Take(1) at the RetryAfter = %+v; want admitted", got[0])
				}
			})
		}
	}
}

// TestSlidingLogDebtOnRedis: a sliding log's debt in Redis. A take
// followed by hits forced past the limit is refunded
// (a request across Cluster slots that another slot refused): the debt
// gives back first, as algorithm.Refund does. And the stored list is one
// an older server reads: every entry "t n total", times never
// decreasing, running totals whole, every unit counted (the debt as units
// accepted at the newest time, as that server stored its own excess).
func TestSlidingLogDebtOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	rs := newRedisStore(t, RedisOptions{Client: client, InjectTime: true})
	ctx := context.Background()
	p := algorithm.Params{Kind: algorithm.SlidingLog, Limit: 10, Window: 60 * sec}
	key := Key(redistest.Prefix(t), "log")
	now := int64(1_780_000_020) * sec
	items := []Item{{Key: key, Params: p, Cost: 3}}
	got := make([]Result, 1)
	taken, err := rs.decideGroup(ctx, items, got, now, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	force := []Item{{Key: key, Params: p, Cost: 12, Mode: algorithm.Force}}
	if err := rs.DecideAt(ctx, force, make([]Result, 1), now+sec); err != nil {
		t.Fatal(err)
	}
	s, _ := algorithm.Decide(algorithm.State{}, p, now, 3, algorithm.Take)
	s, _ = algorithm.Decide(s, p, now+sec, 12, algorithm.Force)

	raw, err := client.LRange(ctx, key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var units, lastT, lastTotal float64
	for i, v := range raw {
		var tt, n, total float64
		if k, err := fmt.Sscanf(v, "%g %g %g", &tt, &n, &total); k != 3 || err != nil || n <= 0 || (i > 0 && (tt < lastT || total != lastTotal+n)) {
			t.Fatalf("entry %d of %q is not a run an older server reads", i, raw)
		}
		units, lastT, lastTotal = units+n, tt, total
	}
	if units != 15 || len(raw) < 2 {
		t.Fatalf("stored %q: %v units; want the 10 the limit holds and a debt of 5", raw, units)
	}

	if err := rs.refundGroup(ctx, items, got, taken, time.Time{}); err != nil {
		t.Fatal(err)
	}
	s = algorithm.Refund(s, p, now, 3)
	for _, at := range []int64{now + 2*sec, now + 60*sec, now + 61*sec, now + 120*sec} {
		var w Result
		s, w = algorithm.Decide(s, p, at, 0, algorithm.Take)
		check := make([]Result, 1)
		if err := rs.DecideAt(ctx, []Item{{Key: key, Params: p}}, check, at); err != nil {
			t.Fatal(err)
		}
		if differ(check, []Result{w}) {
			t.Errorf("refunded, checked at +%d s: lua %+v; go %+v", (at-now)/sec, check[0], w)
		}
	}
}
