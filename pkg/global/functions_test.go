package global

import (
	"context"
	"strings"
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
