package global

import (
	"context"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/pkg/algorithm"
)

// BenchmarkRedisConcurrency is a request's take and its refund on a
// concurrency limit of 10,000 that already holds 9,000 units: the largest
// a config may have, near full. Held by 9,000 requests, each its own
// holder, a refund looks its holder's units up by number and Redis's time
// per decision does not grow with the units held; held by one holder
// (a force of 9,000), the numbers reach 9,000 and a refund scans the set.
func BenchmarkRedisConcurrency(b *testing.B) {
	for _, holders := range []int{9_000, 1} {
		b.Run("holders="+strconv.Itoa(holders), func(b *testing.B) {
			rs, client := benchRedis(b)
			ctx := context.Background()
			p := algorithm.Params{Kind: algorithm.Concurrency, Limit: 10_000, Window: 3600 * sec}
			key := Key(redistest.Prefix(b), "inflight")
			out := make([]Result, 1)
			for i := range holders {
				p.Holder = strconv.Itoa(i)
				if err := rs.Decide(ctx, []Item{{Key: key, Params: p, Cost: int64(9_000 / holders), Mode: algorithm.Force}}, out); err != nil {
					b.Fatal(err)
				}
			}
			p.Holder = "req"
			take := []Item{{Key: key, Params: p, Cost: 1}}
			refund := []Item{{Key: key, Params: p, Cost: 1, Mode: algorithm.GiveBack}}
			client.ConfigResetStat(ctx)
			b.ResetTimer()
			for b.Loop() {
				if err := rs.Decide(ctx, take, out); err != nil || !out[0].Allowed {
					b.Fatalf("take: %+v, %v", out[0], err)
				}
				if err := rs.Decide(ctx, refund, out); err != nil || out[0].Remaining != 1000 {
					b.Fatalf("refund: %+v, %v", out[0], err)
				}
			}
			b.StopTimer()
			b.ReportMetric(scriptUsec(b, client)/float64(2*b.N), "redis-µs/decision")
		})
	}
}
