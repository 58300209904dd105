package loadgen

import (
	"context"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// scriptService runs one EVALSHA per request, whose script makes two calls
// (SET and GET), over a single pooled connection opened up front.
type scriptService struct {
	NoopService
	client *redis.Client
	sha    string
	prefix string
}

const twoCallScript = `redis.call('SET', KEYS[1], ARGV[1]) return redis.call('GET', KEYS[1])`

func (s *scriptService) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	key := s.prefix + req.GetDescriptors()[0].GetEntries()[0].GetValue()
	if err := s.client.EvalSha(ctx, s.sha, []string{key}, 1).Err(); err != nil {
		return nil, err
	}
	return s.NoopService.ShouldRateLimit(ctx, req)
}

func TestRedisFigures(t *testing.T) {
	checkNoLeak(t)
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 1, DisableIdentity: true, ConnMaxIdleTime: -1})
	t.Cleanup(func() { client.Close() })
	sha, err := client.ScriptLoad(context.Background(), twoCallScript).Result() // opens the one connection too
	if err != nil {
		t.Fatal(err)
	}
	addr := startServer(t, &scriptService{client: client, sha: sha, prefix: redistest.Prefix(t)})

	res := run(t, Options{Target: addr, Concurrency: 2, Requests: 100, Duration: 20 * time.Second, Keys: 10, RedisAddr: srv.Addr})
	checkCounts(t, res)
	f := res.Redis
	if res.OK != 100 || f == nil {
		t.Fatalf("ok %d (errors %v), redis figures %v; want 100 OK with figures", res.OK, res.ErrorsByCode, f)
	}
	// commandstats and total_commands_processed count the script's inner
	// calls; the sampler's own INFO is excluded.
	want := map[string]int64{"evalsha": 100, "set": 100, "get": 100}
	if len(f.ByCommand) != len(want) {
		t.Errorf("ByCommand = %v; want %v", f.ByCommand, want)
	}
	for name, n := range want {
		if f.ByCommand[name] != n {
			t.Errorf("ByCommand[%s] = %d; want %d (all: %v)", name, f.ByCommand[name], n, f.ByCommand)
		}
	}
	if f.Scripts != 100 || f.Commands != 300 || f.ScriptsPerReq != 1 || f.CommandsPerReq != 3 || f.OtherPerReq != 2 {
		t.Errorf("scripts %d (%.2f/req), commands %d (%.2f/req), other %.2f/req; want 100 (1), 300 (3), 2",
			f.Scripts, f.ScriptsPerReq, f.Commands, f.CommandsPerReq, f.OtherPerReq)
	}
	// One command per write on one connection: about one read each.
	if f.ReadsPerReq < 0.9 || f.ReadsPerReq > 1.1 {
		t.Errorf("reads %.3f/req; want about 1 (one EVALSHA per round trip)", f.ReadsPerReq)
	}
	if f.FailedCalls != 0 || f.RejectedCalls != 0 {
		t.Errorf("failed %d, rejected %d; want 0", f.FailedCalls, f.RejectedCalls)
	}
}

func TestRedisFiguresExcludeTheSampler(t *testing.T) {
	srv := redistest.Start(t)
	addr := startServer(t, NoopService{})
	res := run(t, Options{Target: addr, Requests: 10, Duration: 20 * time.Second, RedisAddr: srv.Addr})
	if f := res.Redis; f == nil || f.Commands != 0 || f.Reads != 0 || len(f.ByCommand) != 0 {
		t.Fatalf("redis figures with no Redis traffic = %+v; want zero commands, reads and calls", f)
	}
}

func TestParseRedisInfo(t *testing.T) {
	info := "# Server\r\nredis_version:7.0.15\r\n# Stats\r\ntotal_commands_processed:42\r\ntotal_reads_processed:40\r\n" +
		"# CPU\r\nused_cpu_sys:1.5\r\nused_cpu_user:2.25\r\n# Commandstats\r\n" +
		"cmdstat_evalsha:calls=10,usec=70,usec_per_call=7.00,rejected_calls=2,failed_calls=1\r\n" +
		"cmdstat_config|resetstat:calls=1,usec=46,usec_per_call=46.00,rejected_calls=0,failed_calls=0\r\n"
	got, err := parseRedisInfo(info)
	if err != nil {
		t.Fatal(err)
	}
	if got.version != "7.0.15" || got.commands != 42 || got.reads != 40 || got.cpu != 3.75 ||
		got.cmds["evalsha"] != (cmdStat{calls: 10, rejected: 2, failed: 1}) || got.cmds["config|resetstat"].calls != 1 {
		t.Fatalf("parseRedisInfo = %+v", got)
	}
	if _, err := parseRedisInfo("# Stats\r\ntotal_commands_processed:x\r\n"); err == nil {
		t.Errorf("parseRedisInfo accepted a non-numeric counter")
	}
	if _, err := parseRedisInfo("# Server\r\nredis_version:7.0.15\r\n"); err == nil {
		t.Errorf("parseRedisInfo accepted INFO without total_commands_processed")
	}
	// Counters that go backwards (CONFIG RESETSTAT mid-run) are an error.
	before, after := got, got
	after.commands = 1
	if _, err := redisDelta("x", before, after, 10); err == nil {
		t.Errorf("redisDelta accepted counters that went backwards")
	}
}
