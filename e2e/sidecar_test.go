package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testkit/envoyrl"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/internal/tools/loadgen"
)

// tier is one server in front of a real redis-server and sidecars in front
// of the server, as docker-compose.yml runs them; or servers in cached
// Redis mode on the Redis, with no server behind them.
type tier struct {
	redis  *redistest.Server
	server *proc   // nil for cached servers
	fronts []*proc // what clients call: the sidecars, or the cached servers
}

// startTier starts redis-server, one server and n sidecars in mode, all on
// config yaml, with the extra sidecar flags given.
func startTier(t *testing.T, yaml string, n int, mode string, sidecarArgs ...string) *tier {
	t.Helper()
	cfg := writeConfig(t, yaml)
	tr := &tier{redis: redistest.Start(t)}
	// Timeouts generous for a loaded CI machine: these tests are about
	// counts, and a timed-out call would be decided by a failure mode.
	auth := newSidecarTokens(t, n)
	tr.server = startServer(t, "server", append([]string{"-config", cfg, "-redis-url", tr.redis.URL(), "-store-timeout", "1s"}, auth.server...)...)
	for i := range n {
		args := append([]string{"-config", cfg, "-upstream", tr.server.GRPC, "-mode", mode, "-upstream-timeout", "1s"}, auth.sidecar(i)...)
		tr.fronts = append(tr.fronts, startSidecar(t, fmt.Sprintf("sidecar-%d", i), append(args, sidecarArgs...)...))
	}
	return tr
}

// sidecarTokens are the flags that make n sidecars known to the servers
// by a token each, sent in the clear (loopback; tls_test.go covers tokens
// and certificates over TLS): the authenticated path, as a deployment
// would run it.
type sidecarTokens struct {
	server []string
	files  []string
}

func newSidecarTokens(t *testing.T, n int) sidecarTokens {
	t.Helper()
	dir := t.TempDir()
	var all strings.Builder
	st := sidecarTokens{}
	for i := range n {
		tok := fmt.Sprintf("e2e-token-%d-%s", i, strings.Repeat("x", 24))
		fmt.Fprintf(&all, "sidecar-%d %s\n", i, tok)
		st.files = append(st.files, writeFile(t, dir, fmt.Sprintf("sidecar-%d.token", i), tok+"\n"))
	}
	if n == 0 {
		return st
	}
	st.server = []string{"-sidecar-tokens", writeFile(t, dir, "tokens", all.String()), "-sidecar-tokens-plaintext"}
	return st
}

// sidecar are sidecar i's flags.
func (st sidecarTokens) sidecar(i int) []string {
	return []string{"-upstream-token-file", st.files[i], "-upstream-token-plaintext"}
}

// startCached starts redis-server and n servers in cached Redis mode on
// config yaml, with the extra server flags given.
func startCached(t *testing.T, yaml string, n int, args ...string) *tier {
	t.Helper()
	cfg := writeConfig(t, yaml)
	tr := &tier{redis: redistest.Start(t)}
	for i := range n {
		a := append([]string{"-config", cfg, "-redis-url", tr.redis.URL(), "-redis-mode", "cached", "-store-timeout", "1s"}, args...)
		tr.fronts = append(tr.fronts, startServer(t, fmt.Sprintf("cached-%d", i), a...))
	}
	return tr
}

func (tr *tier) targets(t *testing.T) []rlsv3.RateLimitServiceClient {
	var out []rlsv3.RateLimitServiceClient
	for _, s := range tr.fronts {
		out = append(out, s.client(t))
	}
	return out
}

// roundTrips is the server's count of Redis round trips (pipelines and
// single commands, its go-redis hook).
func (tr *tier) roundTrips(t *testing.T) float64 {
	if tr.server == nil {
		n := 0.0
		for _, s := range tr.fronts {
			n += s.metric(t, loadgen.RoundTripsMetric)
		}
		return n
	}
	return tr.server.metric(t, loadgen.RoundTripsMetric)
}

// TestSidecarSyncExact: three sync sidecars under 64 concurrent callers
// admit exactly the limit on one key, for the default algorithm and the
// exact one.
func TestSidecarSyncExact(t *testing.T) {
	const limit = 400
	tr := startTier(t, fmt.Sprintf(`domain: edge
descriptors:
  - key: api_key
    rate_limit: {name: per-key, unit: day, requests_per_unit: %d}
  - key: client
    rate_limit: {name: per-client, unit: minute, requests_per_unit: %[1]d, algorithm: sliding_log}
`, limit), 3, "sync")
	targets := tr.targets(t)
	for _, key := range []string{"api_key", "client"} {
		t.Run(key, func(t *testing.T) {
			res := load{
				targets: targets, callers: 64, duration: time.Minute / 2, total: 3 * limit,
				request: func(int) *rlsv3.RateLimitRequest { return descriptors("edge", key, "hot") },
			}.run(context.Background())
			if res.errs > 0 || res.sent != 3*limit {
				t.Fatalf("%d errors (the first: %v), %d of %d sent", res.errs, res.firstErr, res.sent, 3*limit)
			}
			// Nothing comes back while the load lasts (at most 30 s): a
			// token bucket of 400 a day refills one token in 216 s (of 400
			// an hour, one in 9 s, which a loaded machine's run can
			// outlast), a sliding log of 400 a minute frees none for 60 s.
			if res.ok != limit {
				t.Errorf("three sync sidecars admitted %d of %d requests; want exactly the limit %d", res.ok, res.sent, limit)
			}
		})
	}
	for _, s := range tr.fronts {
		if n := s.metric(t, "sluice_localfilter_upstream_calls_total", "result", "error"); n != 0 {
			t.Errorf("%s: %v upstream errors; the fallback may have decided", s.name, n)
		}
	}
}

// TestOverLimitFloodRoundTrips: a flood of 10,000 requests on a key that is
// over limit is answered from the flag caches: fewer than 0.05 Redis round
// trips per request, straight to the server and through a sidecar in
// either mode.
func TestOverLimitFloodRoundTrips(t *testing.T) {
	const flood = 10_000
	yaml := `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {name: per-client, unit: hour, requests_per_unit: 20}
`
	for _, path := range []string{"server", "sync", "async"} {
		t.Run(path, func(t *testing.T) {
			var tr *tier
			var target string
			if path == "server" {
				tr = startTier(t, yaml, 0, "")
				target = tr.server.GRPC
			} else {
				tr = startTier(t, yaml, 1, path)
				target = tr.fronts[0].GRPC
			}
			// Another proxy used the whole limit: the sidecar's own bucket is
			// full, the global limit is not.
			direct := tr.server.client(t)
			for range 20 {
				if _, err := direct.ShouldRateLimit(context.Background(), descriptors("edge", "remote_address", "10.0.0.1")); err != nil {
					t.Fatal(err)
				}
			}
			// Round trips by the server's go-redis hook
			// (loadgen.RoundTripsMetric), and commands by Redis's INFO, which
			// also counts those a script runs.
			res, err := loadgen.Run(context.Background(), loadgen.Options{
				Target: target, Concurrency: 64, Duration: time.Minute, Requests: flood, Timeout: 10 * time.Second,
				Domain: "edge", Descriptors: "remote_address=10.0.0.1",
				RedisAddr: tr.redis.Addr, MetricsURL: "http://" + tr.server.HTTP + "/metrics",
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.Sent != flood || res.Errors > 0 {
				t.Fatalf("%d of %d sent, %d errors (%v)", res.Sent, flood, res.Errors, res.ErrorsByCode)
			}
			perReq := *res.RoundTripsPerReq
			t.Logf("%s: %d requests, %d admitted; Redis round trips %.4f/request (go-redis hook), commands incl. inside scripts %d (%.4f/request, INFO)",
				path, res.Sent, res.OK, perReq, res.Redis.Commands, res.Redis.CommandsPerReq)
			if perReq >= 0.05 {
				t.Errorf("%.4f Redis round trips per request; want fewer than 0.05", perReq)
			}
			// Async admits from memory until the first flush's answer flags
			// the key; sync and the server admit none.
			if path != "async" && res.OK != 0 {
				t.Errorf("admitted %d requests on a used-up key", res.OK)
			}
		})
	}
}

// asyncScenario is a load on async sidecars, or on servers in cached Redis
// mode (the same tier in process), with a computed overshoot bound.
type asyncScenario struct {
	name     string
	cached   bool
	sidecars int // or cached servers
	keys     int
	limit    int // per minute, fixed_window: the accounting is exact
	duration time.Duration
}

// TestSidecarAsync: async sidecars admit from memory and record every
// admitted hit upstream. Checked per key: admitted at most the limit plus
// the documented overshoot bound (pkg/localtier), every admitted hit in the
// global state afterwards, and Redis round trips per request.
//
// The first scenario is the one the sidecar issue asks for (three sidecars,
// 50 keys, 2,000 a minute each, 2 s from 64 callers); the load this machine
// can offer in 2 s rarely reaches its limits, so the second uses tighter
// limits to drive keys over and measure the overshoot.
func TestSidecarAsync(t *testing.T) {
	for _, sc := range []asyncScenario{
		{name: "50 keys at 2000 a minute", sidecars: 3, keys: 50, limit: 2000, duration: 2 * time.Second},
		{name: "5 keys at 200 a minute", sidecars: 3, keys: 5, limit: 200, duration: 2 * time.Second},
	} {
		t.Run(sc.name, func(t *testing.T) { sc.run(t) })
	}
}

// TestServerCached: servers in cached Redis mode, with no sidecar, hold
// to the async sidecars' bound and record every hit they admitted.
func TestServerCached(t *testing.T) {
	for _, sc := range []asyncScenario{
		{name: "50 keys at 2000 a minute", cached: true, sidecars: 3, keys: 50, limit: 2000, duration: 2 * time.Second},
		{name: "5 keys at 200 a minute", cached: true, sidecars: 3, keys: 5, limit: 200, duration: 2 * time.Second},
	} {
		t.Run(sc.name, func(t *testing.T) { sc.run(t) })
	}
}

func (sc asyncScenario) run(t *testing.T) {
	// Round trips per request are flush calls over requests: at 20ms, three
	// sidecars make at most 150 calls a second, under 0.2 per request from
	// 750 requests a second, which a loaded CI machine still offers.
	const flush = 20 * time.Millisecond
	yaml := fmt.Sprintf(`domain: edge
descriptors:
  - key: client
    rate_limit: {name: per-client, unit: minute, requests_per_unit: %d, algorithm: fixed_window}
`, sc.limit)
	var tr *tier
	if sc.cached {
		tr = startCached(t, yaml, sc.sidecars, "-flush-interval", flush.String())
	} else {
		tr = startTier(t, yaml, sc.sidecars, "async", "-flush-interval", flush.String())
	}
	targets := tr.targets(t)
	// The load's admissions in one window: it sends for sc.duration, its
	// calls may take their 1 s timeout, and a loaded machine is late.
	waitForWindow(t, time.Minute, sc.duration+10*time.Second)
	trips0 := tr.roundTrips(t)
	res := load{
		targets: targets, callers: 64, duration: sc.duration, keys: sc.keys,
		request: func(k int) *rlsv3.RateLimitRequest { return descriptors("edge", "client", "c"+strconv.Itoa(k)) },
	}.run(context.Background())
	if res.errs > 0 {
		t.Fatalf("%d errors, the first: %v", res.errs, res.firstErr)
	}
	// C = F + lag + RTT, from the sidecars' histograms: the slowest flush
	// and the latest start of one.
	cycle := flush.Seconds()
	worstRTT, worstLag := 0.0, 0.0
	trips := -trips0
	if tr.server != nil {
		trips += tr.roundTrips(t)
	}
	for _, s := range tr.fronts {
		mf := s.metrics(t)
		if tr.server == nil { // the cached servers' own, before they stop
			trips += sumMetric(mf, loadgen.RoundTripsMetric)
		}
		if n := sumMetric(mf, "sluice_localfilter_dropped_hits_total"); n != 0 {
			t.Errorf("%s dropped %v hits", s.name, n)
		}
		worstRTT = max(worstRTT, histogramMax(mf, "sluice_localfilter_flush_duration_seconds"))
		worstLag = max(worstLag, histogramMax(mf, "sluice_localfilter_flush_lag_seconds"))
		s.stop() // flushes what it admitted
	}
	// A flush slower than the histograms' largest bucket (250 ms) makes
	// the cycle +Inf; none outlasted the run, and a cycle as long as the
	// run already bounds each sidecar by all it was offered and by its
	// bucket's refill over the run.
	cycle = min(cycle+worstRTT+worstLag, res.elapsed.Seconds())
	perReq := trips / float64(res.sent)

	// The bound, per key: Σ over sidecars of min(b + r·C, q(C)) + 1, with
	// q(C) the most the sidecar was offered the key within any C.
	b, r := 2*float64(sc.limit), float64(sc.limit)/60 // fixed_window's local bucket at fraction 1
	C := time.Duration(cycle * float64(time.Second))
	worst, over := 0.0, 0
	for k, ok := range res.okByKey {
		bound := 0.0
		for i := range res.sentAt {
			bound += min(b+r*cycle, float64(res.mostWithin(i, k, C))) + 1
		}
		excess := ok - sc.limit
		if excess > 0 {
			over++
			worst = max(worst, float64(excess)/bound)
		}
		if float64(excess) > bound {
			t.Errorf("key %d: admitted %d, limit %d: %d over, beyond the bound %.1f", k, ok, sc.limit, excess, bound)
		}
	}
	recorded := fixedWindowCounts(t, tr.redis.Client(t))
	admitted := slices.Clone(res.okByKey)
	admitted = slices.DeleteFunc(admitted, func(n int) bool { return n == 0 })
	slices.Sort(admitted)
	if !slices.Equal(recorded, admitted) {
		t.Errorf("global state after the flushes holds per key %v; the sidecars admitted %v", recorded, admitted)
	}
	fronts := "sidecars"
	if sc.cached {
		fronts = "cached servers"
	}
	t.Logf("%d %s, %d keys, limit %d/min, %v: %d requests (%.0f/s), %d admitted, %d over limit; p50 %v p99 %v; "+
		"%d keys went over the limit, worst overshoot %.0f%% of its bound (C = F %v + lag %.1fms + RTT %.1fms); Redis round trips %.0f = %.4f/request",
		sc.sidecars, fronts, sc.keys, sc.limit, sc.duration, res.sent, float64(res.sent)/res.elapsed.Seconds(), res.ok, res.over,
		res.quantile(0.5), res.quantile(0.99), over, 100*worst, flush, worstLag*1000, worstRTT*1000, trips, perReq)
	// Fewer than 0.2 a request while the machine offers 750 requests a
	// second; on one too slow for that, no more than one a flush (and a
	// cached server's heartbeat, once a second).
	run := res.elapsed.Seconds() + 1
	if most := float64(sc.sidecars) * (run/flush.Seconds() + run); perReq >= 0.2 && trips > most {
		t.Errorf("%.4f Redis round trips per request, %.0f in all; want below 0.2, or at most one a flush (%.0f)", perReq, trips, most)
	}
}

// waitForWindow returns once the current epoch-aligned window of length w
// has at least need left, so that a fixed window's counters hold a whole
// run.
func waitForWindow(t *testing.T, w, need time.Duration) {
	t.Helper()
	now := time.Now()
	if left := now.Truncate(w).Add(w).Sub(now); left < need {
		t.Logf("waiting %v for the next %v window", left, w)
		time.Sleep(left + 100*time.Millisecond)
	}
}

// fixedWindowCounts returns the counts of every fixed_window state in Redis
// ("start count previous"), the previous window's with the current one's
// (hits admitted before a window's end and recorded after it count in the
// previous window's), sorted.
func fixedWindowCounts(t *testing.T, c *redis.Client) []int {
	t.Helper()
	ctx := context.Background()
	var counts []int
	iter := c.Scan(ctx, 0, "sluice:*", 1000).Iterator()
	for iter.Next(ctx) {
		if c.Type(ctx, iter.Val()).Val() != "string" {
			continue // cached mode's heartbeat of replicas
		}
		v, err := c.Get(ctx, iter.Val()).Result()
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(v) // window start, count, the previous window's count
		if len(f) != 3 {
			t.Fatalf("%s = %q: not a fixed_window state", iter.Val(), v)
		}
		n, err := strconv.Atoi(f[1])
		prev, err2 := strconv.Atoi(f[2])
		if err != nil || err2 != nil {
			t.Fatalf("%s = %q: not a fixed_window state", iter.Val(), v)
		}
		counts = append(counts, n+prev)
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(counts)
	return counts
}

// TestSidecarUpstreamDown: with the server killed (connections refused)
// or frozen (SIGSTOP: connections open, no answers), the sidecar keeps
// answering, each reply within its upstream timeout, at the fallback share
// of the limit; it recovers by itself once the server is back, and in
// async mode the hits it admitted meanwhile reach the global state.
func TestSidecarUpstreamDown(t *testing.T) {
	outages := []struct {
		name       string
		start, end func(t *testing.T, p *proc)
	}{
		{"killed", func(t *testing.T, p *proc) { p.kill() }, func(t *testing.T, p *proc) { p.restart(t) }},
		{"frozen", func(t *testing.T, p *proc) { p.signal(syscall.SIGSTOP) }, func(t *testing.T, p *proc) { p.signal(syscall.SIGCONT) }},
	}
	for _, outage := range outages {
		for _, mode := range []string{"sync", "async"} {
			t.Run(outage.name+"/"+mode, func(t *testing.T) {
				saturate(t)
				upstreamDown(t, mode, outage.start, outage.end)
			})
		}
	}
}

func upstreamDown(t *testing.T, mode string, startOutage, endOutage func(*testing.T, *proc)) {
	const (
		limit   = 40
		share   = 0.5
		timeout = 200 * time.Millisecond
		margin  = 800 * time.Millisecond // a loaded CI machine; a hang would be seconds
	)
	yaml := fmt.Sprintf(`domain: edge
descriptors:
  - key: api_key
    rate_limit: {name: per-key, unit: hour, requests_per_unit: %d}
`, limit)
	tr := startTier(t, yaml, 1, mode, "-upstream-timeout", timeout.String(),
		"-upstream-retry", "200ms", "-fallback-share", fmt.Sprint(share))
	sidecar := tr.fronts[0]
	target := sidecar.client(t)
	ask := func(key string, n int) loadResult {
		return load{targets: []rlsv3.RateLimitServiceClient{target}, callers: 1, duration: time.Minute, total: n,
			request: func(int) *rlsv3.RateLimitRequest { return descriptors("edge", "api_key", key) }}.run(context.Background())
	}
	if res := ask("before", 5); res.ok != 5 {
		t.Fatalf("with the server up: %d of 5 admitted", res.ok)
	}

	startOutage(t, tr.server)
	// The sidecar learns of the outage from a failed call: a sync
	// decision, or an async flush of the hits it admits meanwhile.
	global0 := -1.0
	waitFor(t, 10*time.Second, "the sidecar to see the upstream down", func() bool {
		if res := ask("probe", 1); res.errs > 0 {
			t.Fatalf("an error answer with the upstream down: %v", res.firstErr)
		}
		if sidecar.metric(t, "sluice_localfilter_upstream_up") != 0 {
			return false
		}
		global0 = sidecar.metric(t, "sluice_tier_decisions_total", "tier", "global")
		return true
	})
	down := ask("down", 3*limit)
	want := int(limit * share)
	if down.errs > 0 || down.ok != want {
		t.Errorf("upstream down: %d of %d admitted, %d errors (%v); want %d (fallback share %v of %d)",
			down.ok, down.sent, down.errs, down.firstErr, want, share, limit)
	}
	if worst := down.quantile(1); worst > timeout+margin {
		t.Errorf("slowest reply with the upstream down took %v; want within the upstream timeout %v (+%v margin)", worst, timeout, margin)
	}
	if n := sidecar.metric(t, "sluice_tier_decisions_total", "tier", "global"); n != global0 {
		t.Errorf("sluice_tier_decisions_total{tier=global} went from %v to %v while the upstream was down", global0, n)
	}
	if n := sidecar.metric(t, "sluice_tier_decisions_total", "tier", "fallback", "result", "ok"); n < float64(want) {
		t.Errorf("sluice_tier_decisions_total{tier=fallback,result=ok} = %v; want at least the %d admitted while down", n, want)
	}

	endOutage(t, tr.server)
	waitFor(t, 20*time.Second, "the sidecar to recover", func() bool {
		ask("recovery", 1) // traffic to probe with, and hits to flush
		return sidecar.metric(t, "sluice_localfilter_upstream_up") == 1
	})
	// The hits held through the outage go out with the first flush after
	// recovery, asynchronously in either mode: the global state holds them
	// once nothing is pending any more.
	waitFor(t, 10*time.Second, "the hits held through the outage to be sent", func() bool {
		return sidecar.metric(t, "sluice_localfilter_pending_keys") == 0
	})
	// The 20 admitted while the server was down were recorded when it came
	// back. A sync call that timed out may still have been counted by the
	// frozen server once it resumed, and then decided again by the
	// fallback: each can over-count one request, never under-count.
	resp, err := tr.server.client(t).ShouldRateLimit(context.Background(), descriptors("edge", "api_key", "down"))
	if err != nil {
		t.Fatal(err)
	}
	ambiguous := int(sidecar.metric(t, "sluice_localfilter_upstream_calls_total", "kind", "sync", "result", "error"))
	if got := int(resp.Statuses[0].LimitRemaining); got > limit-want-1 || got < limit-want-1-ambiguous {
		t.Errorf("global state after recovery: %d left of %d; want %d (the %d admitted while down recorded, and this one), less at most %d for timed-out calls",
			got, limit, limit-want-1, want, ambiguous)
	}
	if mode == "sync" {
		before := sidecar.metric(t, "sluice_tier_decisions_total", "tier", "global")
		ask("after", 1)
		if sidecar.metric(t, "sluice_tier_decisions_total", "tier", "global") != before+1 {
			t.Error("a request after recovery was not decided by the global tier")
		}
	}
	t.Logf("%s: while down %d of %d admitted, slowest reply %v, p50 %v", mode, down.ok, down.sent, down.quantile(1), down.quantile(0.5))
}

// waitFor polls cond until it holds, failing the test after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSidecarTwoServers: a sidecar in front of two server replicas (its
// -upstream lists both; one HTTP/2 connection each, round robin) on one
// Redis. In sync mode the limit holds exactly; in async mode every admitted
// hit reaches Redis. Both replicas take calls.
func TestSidecarTwoServers(t *testing.T) {
	const limit = 300
	cfg := writeConfig(t, fmt.Sprintf(`domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unlimited: true}
  - key: generic_key
    value: demo
    rate_limit: {name: demo, unit: hour, requests_per_unit: %d, algorithm: fixed_window}
`, limit))
	req := traffic(t, 200, func(k int) envoyrl.Request {
		return envoyrl.Request{Path: "/demo", Header: client(k), Peer: balancer}
	})
	for _, mode := range []string{"sync", "async"} {
		t.Run(mode, func(t *testing.T) {
			redis := redistest.Start(t)
			auth := newSidecarTokens(t, 1)
			var servers []*proc
			var addrs []string
			for i := range 2 {
				s := startServer(t, fmt.Sprintf("server-%d", i+1), append([]string{"-config", cfg, "-redis-url", redis.URL(), "-store-timeout", "1s"}, auth.server...)...)
				servers = append(servers, s)
				addrs = append(addrs, s.GRPC)
			}
			waitForWindow(t, time.Hour, time.Minute) // the fixed window holds the whole run
			sidecar := startSidecar(t, "sidecar", append([]string{"-config", cfg, "-upstream", strings.Join(addrs, ","), "-mode", mode, "-upstream-timeout", "1s"}, auth.sidecar(0)...)...)
			res := load{targets: []rlsv3.RateLimitServiceClient{sidecar.client(t)}, callers: 64, duration: time.Minute, total: 3 * limit, keys: 200, request: req}.run(context.Background())
			if res.errs > 0 {
				t.Fatalf("%d errors; the first: %v", res.errs, res.firstErr)
			}
			calls := make([]float64, len(servers))
			for i, s := range servers {
				calls[i] = s.metric(t, "sluice_requests_total")
				if calls[i] == 0 {
					t.Errorf("%s took no call from the sidecar", s.name)
				}
			}
			sidecar.stop() // async: the last flush
			recorded := fixedWindowCounts(t, redis.Client(t))
			t.Logf("%s: %d of %d admitted; calls to the servers %v; Redis holds %v", mode, res.ok, res.sent, calls, recorded)
			switch mode {
			case "sync":
				if res.ok != limit {
					t.Errorf("sync: admitted %d; want exactly the limit %d", res.ok, limit)
				}
			case "async":
				// Local buckets hold 2 × limit for a fixed window; the flags
				// stop the sidecar once the servers say the window is used up.
				if len(recorded) != 1 || recorded[0] != res.ok {
					t.Errorf("async: Redis holds %v for the key; want every one of the %d admitted", recorded, res.ok)
				}
			}
		})
	}
}
