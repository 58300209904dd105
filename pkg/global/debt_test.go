package global

import (
	"context"
	"fmt"
	"testing"

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
