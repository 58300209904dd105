package global

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/pkg/algorithm"
)

// BenchmarkRedisDecide measures decisions per second on a real
// redis-server at 1, 16 and 64 concurrent callers, and reports Redis round
// trips per decision (pipelines count once).
func BenchmarkRedisDecide(b *testing.B) {
	srv := redistest.Start(b)
	p := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 1 << 30, Window: sec, Burst: 1 << 30}
	for _, callers := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			client := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 8})
			defer client.Close()
			hook := &countingHook{}
			client.AddHook(hook)
			// A generous timeout: the machine is shared, and a benchmark
			// that fails on one slow round trip measures nothing.
			rs, err := NewRedis(RedisOptions{Client: client, Timeout: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			defer rs.Close()
			if err := rs.Load(context.Background()); err != nil {
				b.Fatal(err)
			}
			prefix := redistest.Prefix(b)
			keys := make([]string, 10_000)
			for i := range keys {
				keys[i] = Key(prefix, fmt.Sprint(i))
			}
			var next atomic.Int64
			next.Store(-1)
			b.ReportAllocs()
			b.ResetTimer()
			var wg sync.WaitGroup
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					out := make([]Result, 1)
					items := make([]Item, 1)
					for {
						i := next.Add(1)
						if i >= int64(b.N) {
							return
						}
						items[0] = Item{Key: keys[i%int64(len(keys))], Params: p, Cost: 1}
						if err := rs.Decide(context.Background(), items, out); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
			b.ReportMetric(float64(hook.trips.Load())/float64(b.N), "trips/decision")
		})
	}
}
