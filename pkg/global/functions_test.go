package global

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/pkg/algorithm"
)

// calls is how many times Redis ran cmd (INFO commandstats).
func calls(t *testing.T, c *redis.Client, cmd string) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls="); ok {
			n := 0
			for _, r := range rest {
				if r < '0' || r > '9' {
					break
				}
				n = n*10 + int(r-'0')
			}
			return n
		}
	}
	return 0
}

// The store calls the decide function, loads it when a call finds it
// missing (a fresh Redis, FUNCTION FLUSH, a failover), answering that
// call by EVAL, and goes on with scripts alone where Redis refuses
// FUNCTION LOAD.
func TestDecideFunction(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	p := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 100, Window: sec, Burst: 100}
	decide := func(rs *Redis, key string) {
		t.Helper()
		out := make([]Result, 1)
		if err := rs.Decide(ctx, []Item{{Key: key, Params: p, Cost: 1}}, out); err != nil || !out[0].Allowed {
			t.Fatalf("Decide: %v, %+v", err, out[0])
		}
	}
	prefix := redistest.Prefix(t)
	// loaded waits for the library a missing call loads in the background.
	loaded := func() {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if libs, err := admin.FunctionList(ctx, redis.FunctionListQuery{}).Result(); err == nil && len(libs) > 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("the library was not loaded after a call found it missing")
			}
		}
	}

	rs := newRedisStore(t, RedisOptions{Client: srv.Client(t), Timeout: 5 * time.Second})
	decide(rs, prefix+"a") // missing: by EVAL, and loaded
	loaded()
	admin.ConfigResetStat(ctx)
	for range 5 {
		decide(rs, prefix+"a")
	}
	if n, e := calls(t, admin, "fcall"), calls(t, admin, "evalsha")+calls(t, admin, "eval"); n != 5 || e != 0 {
		t.Errorf("5 decisions after the first: %d FCALL, %d scripts; want 5 and 0", n, e)
	}
	// FUNCTION FLUSH, as a failover to a node never given it would: the
	// next call is answered all the same, and the function is back.
	if err := admin.FunctionFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	decide(rs, prefix+"a")
	loaded()
	admin.ConfigResetStat(ctx)
	decide(rs, prefix+"a")
	if n := calls(t, admin, "fcall"); n != 1 {
		t.Errorf("after FUNCTION FLUSH and a decision: %d FCALL; want the function back", n)
	}

	// A user Redis refuses FUNCTION: scripts alone, every answer right.
	if err := admin.Do(ctx, "ACL", "SETUSER", "nofn", "on", "nopass", "~*", "+@all", "-function").Err(); err != nil {
		t.Fatal(err)
	}
	opts := srv.Client(t).Options()
	opts.Username, opts.Password = "nofn", "any" // nopass: any password; go-redis sends AUTH only with one
	limited := redis.NewClient(opts)
	t.Cleanup(func() { limited.Close() })
	if err := admin.FunctionFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	rs2 := newRedisStore(t, RedisOptions{Client: limited, Timeout: 5 * time.Second})
	for deadline := time.Now().Add(10 * time.Second); !rs2.fn.off.Load() && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		decide(rs2, prefix+"b") // by EVAL while the load is tried and refused
	}
	decide(rs2, prefix+"b")
	if !rs2.fn.off.Load() {
		t.Error("FUNCTION LOAD refused: the function still on; want scripts alone")
	}
}

// lateReader holds the replies of the first pipeline that found the
// function missing until that pipeline's deadline has passed: a process
// that got to them late (starved of CPU, a pause).
type lateReader struct{ held, released atomic.Bool }

func (*lateReader) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*lateReader) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *lateReader) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if functionMissing(cmds[0].Err()) && h.held.CompareAndSwap(false, true) {
			if d, ok := ctx.Deadline(); ok {
				time.Sleep(time.Until(d) + time.Millisecond)
			}
			h.released.Store(true)
		}
		return err
	}
}

// A call that found the function missing is sent again as EVAL in a round
// trip with a deadline of its own: a process slow to read the first
// round's replies must not leave the second none (a healthy Redis's calls
// failed as stalled so, in TestSlowProcessIsNotStalled under load). Other
// callers keep Redis's replies coming meanwhile, so the watchdog rightly
// judges nothing: the first caller's first call is the one held, the
// others start once it is.
func TestFunctionRetryHasItsOwnDeadline(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	late := &lateReader{}
	client.AddHook(late)
	rs := newRedisStore(t, RedisOptions{Client: client, Timeout: 100 * time.Millisecond})
	p := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 1 << 30, Window: sec, Burst: 1 << 30}
	prefix := redistest.Prefix(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for g > 0 && !late.held.Load() {
				time.Sleep(time.Millisecond)
			}
			out := make([]Result, 1)
			for i := 0; i < 10 || !late.released.Load(); i++ {
				if i > 5000 {
					errs <- fmt.Errorf("caller %d: the held pipeline never came back", g)
					return
				}
				if err := rs.Decide(context.Background(), []Item{{Key: Key(prefix, fmt.Sprint(g, i)), Params: p, Cost: 1}}, out); err != nil {
					errs <- fmt.Errorf("caller %d, call %d: %w", g, i, err)
					return
				}
				if late.held.Load() {
					time.Sleep(time.Millisecond) // replies keep coming, at a pace
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if !late.held.Load() {
		t.Fatal("no pipeline found the function missing: the retry was not tested")
	}
}

// Every flags byte decides as its known bits say, the bits no server
// sets ignored, and a call of many one-item requests over as many keys
// answers each: the function reads flags through a table it fills as
// bytes come (decide.lua's FLAGS), at most one entry a byte.
func TestDecideFlagsAnyByte(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := context.Background()
	src, name := decideLibrary()
	if err := client.FunctionLoadReplace(ctx, src).Err(); err != nil {
		t.Fatal(err)
	}
	p := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 10, Window: sec, Burst: 10}
	prefix := redistest.Prefix(t)
	// flagsAt sets the flags byte of the first item of a one-item request.
	const flagsAt = requestHeaderSize + 1
	known := byte(flagForce | flagShadow | flagCount | flagGiveBack | flagPacked) // not the holder: no argument follows
	// A cost past the burst: a take is refused, a force or a count
	// recorded, so the bits show in the reply.
	byFlags := map[byte]string{}
	for f := range 256 {
		flags := byte(f) &^ flagHolder
		var replies [2]string
		for j, b := range []byte{flags, flags & known} {
			key := Key(prefix, fmt.Sprintf("f%d-%d", f, j))
			blob := appendRequest(nil, []Item{{Key: key, Params: p, Cost: 11}}, 1_000_000, false)
			blob[flagsAt] = b
			v, err := client.FCall(ctx, name, []string{key}, string(blob)).Text()
			if err != nil {
				t.Fatalf("flags %#x: %v", b, err)
			}
			replies[j] = v
		}
		if replies[0] != replies[1] {
			t.Errorf("flags %#x decided unlike its known bits %#x", flags, flags&known)
		}
		byFlags[flags&known] = replies[1]
	}
	if byFlags[0] == byFlags[flagForce] {
		t.Error("a take and a force of more than the burst got the same reply: the test tells no flags apart")
	}
	// A thousand one-item requests, a key each, in one call.
	var (
		keys []string
		blob []byte
	)
	for i := range 1000 {
		keys = append(keys, Key(prefix, fmt.Sprint("many", i)))
		blob = appendRequest(blob, []Item{{Key: keys[i], Params: p, Cost: 1}}, -1, true)
	}
	v, err := client.FCall(ctx, name, keys, string(blob)).Text()
	if err != nil || len(v) != 1000*replySize(1) {
		t.Fatalf("a call of 1,000 requests: %d bytes, %v; want %d", len(v), err, 1000*replySize(1))
	}
	vals, _ := unpackReply(nil, v, 1)
	if vals[0] < 0 {
		t.Error("the first of 1,000 requests failed")
	}
}
