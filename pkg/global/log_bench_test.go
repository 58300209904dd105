package global

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/pkg/algorithm"
)

// BenchmarkRedisSlidingLog is one decision on a sliding log of 10,000 an
// hour that already holds 9,000 hits, each admitted on its own: the
// largest log a config may have, near full. It reports Redis's own time per
// decision, which must not grow with the log.
func BenchmarkRedisSlidingLog(b *testing.B) {
	rs, client := benchRedis(b)
	ctx := context.Background()
	p := algorithm.Params{Kind: algorithm.SlidingLog, Limit: 10_000, Window: 3600 * sec}
	key := Key(redistest.Prefix(b), "log")
	out := make([]Result, 1)
	for range 9_000 {
		if err := rs.Decide(ctx, []Item{{Key: key, Params: p, Cost: 1}}, out); err != nil {
			b.Fatal(err)
		}
	}
	check := []Item{{Key: key, Params: p, Cost: 0}}
	client.ConfigResetStat(ctx)
	b.ResetTimer()
	for b.Loop() {
		if err := rs.Decide(ctx, check, out); err != nil || !out[0].Allowed || out[0].Remaining != 1000 {
			b.Fatalf("check: %+v, %v", out[0], err)
		}
	}
	b.StopTimer()
	b.ReportMetric(scriptUsec(b, client)/float64(b.N), "redis-µs/decision")
}
