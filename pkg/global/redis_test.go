package global

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/pkg/algorithm"
)

func newRedisStore(t *testing.T, opts RedisOptions) *Redis {
	t.Helper()
	if opts.Timeout == 0 {
		opts.Timeout = 5 * time.Second // the race detector is slow; production default is 10ms
	}
	rs, err := NewRedis(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	return rs
}

func decide1(t *testing.T, s interface {
	Decide(context.Context, []Item, []Result) error
}, it Item) Result {
	t.Helper()
	out := make([]Result, 1)
	if err := s.Decide(context.Background(), []Item{it}, out); err != nil {
		t.Fatalf("Decide(%s) = %v", it.Key, err)
	}
	return out[0]
}

// countingHook counts round trips: one per pipeline or single command,
// however many commands (or script calls inside them) it carries; and the
// pipelines that call a script (scriptTrips).
type countingHook struct{ trips, cmds, scriptTrips atomic.Int64 }

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.trips.Add(1)
		h.cmds.Add(1)
		return next(ctx, cmd)
	}
}
func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.trips.Add(1)
		h.cmds.Add(int64(len(cmds)))
		for _, c := range cmds {
			if n := c.Name(); n == "evalsha" || n == "eval" {
				h.scriptTrips.Add(1)
				break
			}
		}
		return next(ctx, cmds)
	}
}

// TestRedisConcurrentOneKey: 64 goroutines on 4 connections hammer one key
// with limit L; exactly L are admitted plus what refills while they run
// (a concurrency limit's units, each request's own, are held an hour).
func TestRedisConcurrentOneKey(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 4, MinIdleConns: 4})
	t.Cleanup(func() { client.Close() })
	hook := &countingHook{}
	client.AddHook(hook)
	rs := newRedisStore(t, RedisOptions{Client: client, Writers: 4})
	const limit = 500
	for _, kind := range algorithm.Kinds() {
		t.Run(kind.String(), func(t *testing.T) {
			// One hour windows: what refills during the test is computed below.
			p := algorithm.Params{Kind: kind, Limit: limit, Window: 3600 * sec, Burst: limit}
			key := Key(redistest.Prefix(t), "hot")
			var admitted atomic.Int64
			var wg sync.WaitGroup
			start := time.Now()
			hook.trips.Store(0)
			const callers, each = 64, 20
			for g := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					out := make([]Result, 1)
					for i := range each {
						it := Item{Key: key, Params: p, Cost: 1}
						it.Params.Holder = fmt.Sprint(g, "-", i)
						if err := rs.Decide(context.Background(), []Item{it}, out); err != nil {
							t.Error(err)
							return
						}
						if out[0].Allowed {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			// Refill during the run: limit per hour, rounded up, plus one: a
			// bucket's refill, or what a sliding window's previous window
			// gives back once the run crosses a window's end. A fixed
			// window whose end the run crossed admits the next window's
			// limit.
			refill := int64(float64(limit)*elapsed.Hours()) + 1
			if kind == algorithm.FixedWindow && start.Truncate(time.Hour) != start.Add(elapsed).Truncate(time.Hour) {
				refill = limit
			}
			got := admitted.Load()
			if got < limit || got > limit+refill {
				t.Errorf("admitted %d of %d requests; want %d (+ at most %d refilled in %v)", got, callers*each, limit, refill, elapsed)
			}
			trips := hook.trips.Load()
			t.Logf("%d decisions in %d round trips (%.3f per decision)", callers*each, trips, float64(trips)/float64(callers*each))
			if trips >= callers*each {
				t.Errorf("%d round trips for %d decisions: concurrent calls were not pipelined", trips, callers*each)
			}
		})
	}
}

func TestRedisExpiryMatchesReset(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	rs := newRedisStore(t, RedisOptions{Client: client})
	ctx := context.Background()
	key := Key(redistest.Prefix(t), "k")
	p := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 10, Window: 10 * sec, Burst: 10}
	start := time.Now()
	r := decide1(t, rs, Item{Key: key, Params: p, Cost: 3})
	pttl := client.PTTL(ctx, key).Val()
	took := time.Since(start)
	// 3 tokens at 1/s refill in 3 s: the key lives exactly that long, less
	// what has passed since the decision (PTTL counts whole ms).
	if r.ResetAfter != 3*sec || pttl > 3*time.Second || pttl < 3*time.Second-took-time.Millisecond {
		t.Errorf("after taking 3 of 10 at 1/s: reset %dµs, PTTL %v %v later; want 3s for both", r.ResetAfter, pttl, took)
	}
	// A check on a fresh key stores nothing.
	fresh := Key(redistest.Prefix(t), "fresh")
	decide1(t, rs, Item{Key: fresh, Params: p, Cost: 0})
	if n := client.Exists(ctx, fresh).Val(); n != 0 {
		t.Errorf("a zero-cost check on a fresh key left %d keys; want 0", n)
	}
}

func TestRedisScriptCacheFlushed(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	rs := newRedisStore(t, RedisOptions{Client: client})
	ctx := context.Background()
	// 2 in any hour: no window end for the two decisions to straddle.
	p := algorithm.Params{Kind: algorithm.SlidingLog, Limit: 2, Window: 3600 * sec}
	key := Key(redistest.Prefix(t), "k")
	decide1(t, rs, Item{Key: key, Params: p, Cost: 1})
	if err := client.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if r := decide1(t, rs, Item{Key: key, Params: p, Cost: 1}); !r.Allowed || r.Remaining != 0 {
		t.Fatalf("after SCRIPT FLUSH: %+v; want admitted with 0 left (EVAL fallback)", r)
	}
}

func TestRedisAuthAndTLSURL(t *testing.T) {
	srv := redistest.Start(t, redistest.WithPassword("s3cret"))
	opts, err := redis.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(opts)
	t.Cleanup(func() { client.Close() })
	rs := newRedisStore(t, RedisOptions{Client: client})
	if r := decide1(t, rs, Item{Key: Key(redistest.Prefix(t), "k"), Params: algorithm.Params{Limit: 1, Window: sec, Burst: 1}, Cost: 1}); !r.Allowed {
		t.Fatalf("with AUTH from the URL: %+v; want admitted", r)
	}
	bad := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { bad.Close() })
	rsBad := newRedisStore(t, RedisOptions{Client: bad})
	out := make([]Result, 1)
	if err := rsBad.Decide(context.Background(), []Item{{Key: "k", Params: algorithm.Params{Limit: 1, Window: sec, Burst: 1}, Cost: 1}}, out); err == nil {
		t.Fatal("without the password: no error; want NOAUTH")
	}
}

func TestRedisSentinel(t *testing.T) {
	s := redistest.StartSentinel(t)
	rs := newRedisStore(t, RedisOptions{Client: s.FailoverClient(t)})
	p := algorithm.Params{Kind: algorithm.SlidingWindow, Limit: 2, Window: 60 * sec}
	key := Key(redistest.Prefix(t), "k")
	for i, want := range []bool{true, true, false} {
		if r := decide1(t, rs, Item{Key: key, Params: p, Cost: 1}); r.Allowed != want {
			t.Fatalf("request %d through Sentinel: %+v; want allowed=%v", i, r, want)
		}
	}
}

func TestRedisCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	client := c.Client(t)
	rs := newRedisStore(t, RedisOptions{Client: client, Cluster: true})
	prefix := redistest.Prefix(t)
	// Limits that time does not change during the test: a bucket that
	// refills a token in 36 s (a minute's bucket refilled one in 0.6 s,
	// giving a back 96), and 1 in any hour (a fixed window admitted again
	// past its end).
	loose := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 100, Window: 3600 * sec, Burst: 100}
	tight := algorithm.Params{Kind: algorithm.SlidingLog, Limit: 1, Window: 3600 * sec}
	// Find two keys on different slots (every key has its own slot, so
	// nearly any two do).
	a, b := Key(prefix, "a"), Key(prefix, "b")
	if slot(a) == slot(b) {
		t.Fatalf("test keys share slot %d", slot(a))
	}
	items := []Item{{Key: a, Params: loose, Cost: 5}, {Key: b, Params: tight, Cost: 1}}
	out := make([]Result, 2)
	ctx := context.Background()
	if err := rs.Decide(ctx, items, out); err != nil || !out[0].Allowed || !out[1].Allowed {
		t.Fatalf("first request across slots: %+v, %v; want both admitted", out, err)
	}
	// The tight limit now rejects; what the loose one took is refunded.
	if err := rs.Decide(ctx, items, out); err != nil || out[1].Allowed {
		t.Fatalf("second request across slots: %+v, %v; want b denied", out, err)
	}
	if r := decide1(t, rs, Item{Key: a, Params: loose, Cost: 0}); r.Remaining != 95 {
		t.Errorf("after a rejected request across slots, a has %d left; want 95 (the refund restored 5)", r.Remaining)
	}
	// Keys on every master work.
	for i := range 50 {
		k := Key(prefix, "spread", string(rune('a'+i)))
		if r := decide1(t, rs, Item{Key: k, Params: tight, Cost: 1}); !r.Allowed {
			t.Fatalf("key %d: %+v; want admitted", i, r)
		}
	}
	// The decide function was loaded on every master (a missing call
	// loads it on all of them).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var masters atomic.Int32 // ForEachMaster runs on the masters at once
		err := client.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			if libs, err := m.FunctionList(ctx, redis.FunctionListQuery{}).Result(); err == nil && len(libs) > 0 {
				masters.Add(1)
			}
			return nil
		})
		if err == nil && masters.Load() == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the decide function on %d of 3 masters (%v)", masters.Load(), err)
		}
	}
	if rs.fn.off.Load() {
		t.Error("functions off on a Cluster")
	}
}

func TestRedisTimeoutIsBounded(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	rs, err := NewRedis(RedisOptions{Client: client, Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	srv.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	out := make([]Result, 1)
	err = rs.Decide(ctx, []Item{{Key: "k", Params: algorithm.Params{Limit: 1, Window: sec, Burst: 1}, Cost: 1}}, out)
	if err == nil {
		t.Fatal("Decide with Redis down: nil error")
	}
	if ctx.Err() != nil {
		t.Fatalf("Decide with Redis down waited for the caller's deadline (%v); want the store timeout", err)
	}
}

// TestFusedRequestFailsAlone: a request that fails inside a fused script
// call (its key holds another type) fails alone; the others of the call are
// decided.
func TestFusedRequestFailsAlone(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	rs := newRedisStore(t, RedisOptions{Client: client, Timeout: time.Second})
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	bad := Key(prefix, "bad")
	if err := client.Set(ctx, bad, "x", 0).Err(); err != nil { // a string where a sliding log's list belongs
		t.Fatal(err)
	}
	p := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 10, Window: sec, Burst: 10}
	log := algorithm.Params{Kind: algorithm.SlidingLog, Limit: 10, Window: sec}
	requests := [][]Item{
		{{Key: Key(prefix, "a"), Params: p, Cost: 1}},
		{{Key: bad, Params: log, Cost: 1}},
		{{Key: Key(prefix, "b"), Params: p, Cost: 1}},
	}
	var batch []ref
	for _, items := range requests {
		batch = append(batch, newRef(rs.decideCall(items, 0)))
	}
	rs.exec(rs.fuse(batch))
	for i, rc := range batch {
		c := rc.c
		out := make([]Result, 1)
		if c.err == nil {
			_, c.err = readDecide(c.reply, requests[i], out)
		}
		if (i == 1) != (c.err != nil) {
			t.Errorf("request %d: error %v; want an error for request 1 only", i, c.err)
		}
		if i != 1 && (c.err != nil || !out[0].Allowed) {
			t.Errorf("request %d: %+v, %v; want admitted", i, out[0], c.err)
		}
	}
}

// TestRefundEveryKind: the refund script gives back exactly what a take
// of each algorithm took, also on a sliding log whose later runs (another
// request's, after the take) must keep their place and units, and on a
// concurrency limit whose holder took again after the take.
func TestRefundEveryKind(t *testing.T) {
	srv := redistest.Start(t)
	rs := newRedisStore(t, RedisOptions{Client: srv.Client(t), InjectTime: true})
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	t0 := int64(1_780_000_020)*sec + 250_000
	for _, kind := range algorithm.Kinds() {
		t.Run(kind.String(), func(t *testing.T) {
			// One holder for every request: a concurrency limit's refund
			// frees the holder's units of the take's time only.
			p := algorithm.Params{Kind: kind, Limit: 20, Window: 60 * sec, Burst: 20, Holder: "req"}
			key := Key(prefix, kind.String())
			check := func(at int64) Result {
				out := make([]Result, 1)
				if err := rs.DecideAt(ctx, []Item{{Key: key, Params: p}}, out, at); err != nil {
					t.Fatal(err)
				}
				return out[0]
			}
			take := []Item{{Key: key, Params: p, Cost: 5}}
			res := make([]Result, 1)
			taken, err := rs.decideGroup(ctx, take, res, t0, time.Time{})
			if err != nil || !res[0].Allowed {
				t.Fatalf("take: %+v, %v", res, err)
			}
			// Another request's hits after the take.
			later := []Item{{Key: key, Params: p, Cost: 2}}
			if _, err := rs.decideGroup(ctx, later, make([]Result, 1), t0+1, time.Time{}); err != nil {
				t.Fatal(err)
			}
			if err := rs.refundGroup(ctx, take, res, taken, time.Time{}); err != nil {
				t.Fatal(err)
			}
			if r := check(t0 + 1); r.Remaining != 18 {
				t.Fatalf("after the refund: %+v; want 18 left (only the later 2 taken)", r)
			}
			if kind == algorithm.SlidingLog || kind == algorithm.Concurrency {
				// The later hits still leave the window when they should.
				if r := check(t0 + 1 + p.Window); r.Remaining != 20 {
					t.Errorf("after the later hits' window: %+v; want 20 left", r)
				}
			}
		})
	}
}

// TestFuseBoundsItems: however many requests a writer coalesces, no fused
// decide call carries more than maxFusedItems items, so no one script call
// holds Redis for long.
func TestFuseBoundsItems(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	t.Cleanup(func() { client.Close() })
	rs := newRedisStore(t, RedisOptions{Client: client})
	var batch []ref
	items := make([]Item, maxItems)
	for i := range items {
		items[i] = Item{Key: Key("t:", fmt.Sprint(i)), Params: algorithm.Params{Limit: 1, Window: sec, Burst: 1}, Cost: 1}
	}
	for range 20 {
		batch = append(batch, newRef(rs.decideCall(items, 0)))
	}
	calls, total := 0, 0
	for _, f := range rs.fuse(batch) {
		if len(f.keys) > maxFusedItems {
			t.Fatalf("a fused call carries %d items; want at most %d", len(f.keys), maxFusedItems)
		}
		calls += len(f.calls)
		total += len(f.keys)
	}
	if calls != 20 || total != 20*maxItems {
		t.Fatalf("fused %d calls, %d items; want all 20 calls and %d items", calls, total, 20*maxItems)
	}
}

// newRef is c as a writer holds it.
func newRef(c *call) ref { return ref{c, c.gen, len(c.keys)} }
