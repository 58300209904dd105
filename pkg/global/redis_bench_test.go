package global

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
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
			rs, _ := benchStore(b, client, false)
			prefix := redistest.Prefix(b)
			keys := make([]string, 10_000)
			for i := range keys {
				keys[i] = Key(prefix, fmt.Sprint(i))
			}
			var next atomic.Int64
			next.Store(-1)
			client.ConfigResetStat(context.Background())
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
			b.ReportMetric(scriptUsec(b, client)/float64(b.N), "redis-µs/decision")
		})
	}
}

// BenchmarkDecideScript is the decide script alone, one request after
// another, of one item or of 16 on distinct keys, per algorithm: what Redis
// spends on a call (redis-µs/item, INFO commandstats, over the items) is
// the cost of the script itself, whatever the machine does to the client
// meanwhile.
func BenchmarkDecideScript(b *testing.B) {
	srv := redistest.Start(b)
	for _, kind := range algorithm.Kinds() {
		for _, n := range []int{1, 16} {
			for _, packed := range []bool{false, true} {
				b.Run(fmt.Sprintf("kind=%s/items=%d/packed=%v", kind, n, packed), func(b *testing.B) {
					rs, client := benchStore(b, srv.Client(b), packed)
					p := algorithm.Params{Kind: kind, Limit: 1000, Window: sec, Burst: 1000}
					prefix := redistest.Prefix(b)
					keys := make([]string, 160)
					for i := range keys {
						keys[i] = Key(prefix, fmt.Sprint(i))
					}
					items, out := make([]Item, n), make([]Result, n)
					client.ConfigResetStat(context.Background())
					b.ResetTimer()
					for i := range b.N {
						for j := range items {
							items[j] = Item{Key: keys[(i*n+j)%len(keys)], Params: p, Cost: 1}
							items[j].Params.Holder = strconv.Itoa(i*n + j) // a concurrency limit's: each request's own
						}
						if err := rs.Decide(context.Background(), items, out); err != nil {
							b.Fatal(err)
						}
					}
					b.StopTimer()
					b.ReportMetric(scriptUsec(b, client)/float64(b.N*n), "redis-µs/item")
				})
			}
		}
	}
}

// BenchmarkRedisRecordBatch is a sidecar's async flush as the store sees
// it: one script call recording hits (Force) on 64 distinct keys. It
// reports Redis's own time per item (INFO commandstats: the script calls'
// usec over the items they carried), the cost a uniform key space puts on
// Redis for every hit a sidecar admits.
func BenchmarkRedisRecordBatch(b *testing.B) {
	rs, client := benchRedis(b)
	ctx := context.Background()
	const batch = 64
	for _, kind := range []algorithm.Kind{algorithm.TokenBucket, algorithm.FixedWindow} {
		b.Run(kind.String(), func(b *testing.B) {
			p := algorithm.Params{Kind: kind, Limit: 1 << 30, Window: sec, Burst: 1 << 30}
			prefix := redistest.Prefix(b)
			items := make([]Item, batch)
			out := make([]Result, batch)
			client.ConfigResetStat(ctx)
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				for j := range items {
					items[j] = Item{Key: Key(prefix, fmt.Sprint((i*batch+j)%10_000)), Params: p, Cost: 1, Mode: algorithm.Force}
				}
				if err := rs.Decide(ctx, items, out); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			usec := scriptUsec(b, client)
			b.ReportMetric(usec/float64(b.N*batch), "redis-µs/item")
		})
	}
}

// benchRedis is a store on a fresh redis-server with its scripts loaded,
// and the client it uses; both close when b ends.
func benchRedis(b *testing.B) (*Redis, *redis.Client) {
	return benchStore(b, redistest.Start(b).Client(b), false)
}

// benchStore is a store on client with its scripts loaded; it closes when
// b ends.
func benchStore(b *testing.B, client *redis.Client, packed bool) (*Redis, *redis.Client) {
	// A generous timeout: the machine is shared, and a benchmark that fails
	// on one slow round trip measures nothing.
	rs, err := NewRedis(RedisOptions{Client: client, Timeout: time.Second, PackedState: packed})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rs.Close() })
	if err := rs.Load(context.Background()); err != nil {
		b.Fatal(err)
	}
	return rs, client
}

// scriptUsec is the time Redis spent in script calls since the last
// CONFIG RESETSTAT, from INFO commandstats.
func scriptUsec(b *testing.B, c *redis.Client) float64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	total := 0.0
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") && !strings.HasPrefix(line, "cmdstat_fcall:") {
			continue
		}
		for _, f := range strings.Split(strings.TrimSpace(line[strings.IndexByte(line, ':')+1:]), ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				n, _ := strconv.ParseFloat(v, 64)
				total += n
			}
		}
	}
	return total
}
