package e2e

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/localtier"
)

// Exactness under pressure: a deployment of sluice (clients on the
// servers, sync or async sidecars, servers in cached Redis mode) flooded
// with real processes on one Redis, the machine saturated by the load
// itself, and what it admitted compared with what one exact limiter of
// the same algorithm admits of the same requests at their send times.
// make test runs one flood per deployment (TestFloodPerMode); the whole
// matrix of deployments, algorithms, traffic and servers is a soak
// (matrix_test.go, -tags soak).

const (
	matrixKeys  = 20  // keys of the flood, each limited to matrixLimit a second
	matrixLimit = 100 // a second
)

// floodSlack lowers TestFloodPerMode's least admitted below the goal.
const floodSlack = 0.05

// TestFloodPerMode: one closed-loop flood per deployment, three fronts
// where the deployment has them, admitted within [0.90, 1.03] of an exact
// limiter, with no error, no decision taken without the central state
// (fallback, shed) and no upstream marked down. Over the limit the bound
// is the matrix's goal; under it, 0.05 lower: make test runs this beside
// the other packages' tests, and an async sidecar starved of CPU lets its
// allowances lapse and refuses some of what the limit had left (0.947 was
// seen so, fixed_window 80/10/10). The matrix (make soak) holds 0.95.
func TestFloodPerMode(t *testing.T) {
	for _, c := range []matrixCell{
		{mode: "none", alg: "sliding_window", pattern: "flood", servers: 1},
		{mode: "sync", alg: "fixed_window", pattern: "flood", servers: 1},
		{mode: "async", alg: "fixed_window", pattern: "80/10/10", servers: 1},
		{mode: "cached", alg: "token_bucket", pattern: "flood", servers: 1},
	} {
		t.Run(c.mode, func(t *testing.T) {
			r := c.run(t, 4*time.Second)
			t.Log(matrixHeader + "\n" + r.String())
			if err := r.check(floodSlack); err != nil {
				t.Error(err)
			}
		})
	}
}

// matrixRow is one run of one cell.
type matrixRow struct {
	mode, alg, pattern string
	servers            int
	sent, ok, exact    int
	errs               int
	ratio, tripsPerReq float64
	// flushes is the most flush calls the sidecars could make in the run
	// (async): one a -flush-interval each.
	flushes float64
	// decisions no central state took part in: the sidecars' fallback,
	// the servers' shed and failure mode (fail open)
	fallback, shed, failOpen float64
	slow, dropped            float64
	upDown                   bool // a sidecar's upstream was ever marked down
}

func (r matrixRow) String() string {
	return fmt.Sprintf("| %s | %s | %s | %d | %d | %d | %d | %.3f | %d | %.4f | %.0f | %.0f | %.0f | %.0f | %.0f | %v |",
		r.mode, r.alg, r.pattern, r.servers, r.sent, r.ok, r.exact, r.ratio, r.errs, r.tripsPerReq, r.fallback, r.shed, r.failOpen, r.slow, r.dropped, r.upDown)
}

const matrixHeader = "| mode | algorithm | traffic | servers | sent | admitted | exact | ratio | errors | Redis trips/req | fallback | shed | failure mode | slow | dropped hits | upstream down |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"

// The goals per traffic shape: admitted over exact.
func matrixBounds(pattern string) (least, most float64) {
	switch pattern {
	case "1.5x":
		return 0.97, 1.03
	}
	return 0.95, 1.03
}

// check says what in the row misses the goals: admitted within the
// traffic's bounds of exact, no error, nothing decided without the central
// state, no upstream marked down, and (async) fewer than 0.05 Redis round
// trips a request. With slack (make test, sharing the machine), the least
// admitted is lowered by it, and the trips may instead be at most one a
// flush: a machine too busy to offer 20 requests a flush.
func (r matrixRow) check(slack float64) error {
	least, most := matrixBounds(r.pattern)
	least -= slack
	var errs []string
	if r.ratio > most || r.ratio < least {
		errs = append(errs, fmt.Sprintf("admitted %.3f of exact; want [%.2f, %.2f]", r.ratio, least, most))
	}
	if r.errs > 0 || r.fallback > 0 || r.shed > 0 || r.failOpen > 0 || r.upDown {
		errs = append(errs, fmt.Sprintf("%d errors, %.0f fallback, %.0f shed, %.0f failure mode, upstream down %v; want none", r.errs, r.fallback, r.shed, r.failOpen, r.upDown))
	}
	// The matrix (slack 0) holds the goal; make test, on a machine too
	// busy to offer 20 requests a flush, no more than one trip a flush.
	if trips := r.tripsPerReq * float64(r.sent); r.mode == "async" && r.tripsPerReq >= 0.05 && (slack == 0 || trips > r.flushes) {
		errs = append(errs, fmt.Sprintf("%.4f Redis round trips a request, %.0f in all; want under 0.05, or at most one a flush (%.0f)", r.tripsPerReq, trips, r.flushes))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%s", strings.Join(errs, "; "))
}

type matrixCell struct {
	mode, alg, pattern string
	servers            int
	// flush, if set, is the sidecars' and cached servers' -flush-interval;
	// tier, more flags of theirs.
	flush  time.Duration
	tier   []string
	server []string // more flags of the servers'
	// trace logs when the run's admissions came against the exact
	// limiter's.
	trace bool
}

func (c matrixCell) params() algorithm.Params {
	k, err := algorithm.ParseKind(c.alg)
	if err != nil {
		panic(err)
	}
	p := algorithm.Params{Kind: k, Limit: matrixLimit, Window: int64(time.Second / time.Microsecond)}
	if k.HasBurst() {
		p.Burst = matrixLimit
	}
	return p
}

func (c matrixCell) run(t *testing.T, duration time.Duration) matrixRow {
	yaml := fmt.Sprintf("domain: edge\ndescriptors:\n  - key: client\n    rate_limit: {name: flood, unit: second, requests_per_unit: %d, algorithm: %s}\n", matrixLimit, c.alg)
	cfg := writeConfig(t, yaml)
	redis := redistest.Start(t)
	auth := newSidecarTokens(t, 3)
	var servers, fronts []*proc
	var addrs []string
	for i := range c.servers {
		// Requests wait for Redis however slow a loaded machine makes it
		// (with the default, a second, requests were shed), and a Redis
		// that a loaded machine leaves unscheduled for 10 ms (the default
		// -store-timeout) is not taken as stalled (3 requests were shed so
		// with two busy loops on the cores): a shed decision is not the
		// central state's, and the stall watchdog is tested apart.
		args := []string{"-config", cfg, "-redis-url", redis.URL(), "-store-max-wait", "30s", "-store-timeout", "1s"}
		if c.mode == "cached" {
			args = append(args, "-redis-mode", "cached")
			if c.flush > 0 {
				args = append(args, "-flush-interval", c.flush.String())
			}
			args = append(args, c.tier...)
		} else {
			args = append(args, auth.server...)
		}
		args = append(args, c.server...)
		s := startServer(t, fmt.Sprintf("server-%d", i+1), args...)
		servers = append(servers, s)
		addrs = append(addrs, s.GRPC)
	}
	switch c.mode {
	case "none", "cached":
		fronts = servers
	default:
		for i := range 3 {
			args := append([]string{"-config", cfg, "-upstream", strings.Join(addrs, ","), "-mode", c.mode}, auth.sidecar(i)...)
			if c.flush > 0 {
				args = append(args, "-flush-interval", c.flush.String())
			}
			args = append(args, c.tier...)
			fronts = append(fronts, startSidecar(t, fmt.Sprintf("sidecar-%d", i), args...))
		}
	}
	var clients []rlsv3.RateLimitServiceClient
	for _, f := range fronts {
		clients = append(clients, f.client(t))
	}
	weights := slices.Repeat([]int{1}, len(clients))
	if c.pattern == "80/10/10" && len(clients) == 3 {
		weights = []int{8, 1, 1}
	}
	var targets []rlsv3.RateLimitServiceClient
	for i, w := range weights {
		for range w {
			targets = append(targets, clients[i])
		}
	}
	// The callers wait for their answers as long as the servers wait for
	// Redis: on a loaded machine, a second's timeout failed requests.
	if c.alg == "fixed_window" {
		// The load ends 50 ms before a window does, so that its last
		// window is whole. A flood's fixed window is admitted at once by an
		// exact limiter, and by the tiers over its first 100-300 ms, as
		// their allowances are answered: a run cut there measured when its
		// last window was admitted, not how much (0.927 was seen so, once
		// the windows before were exact).
		end := time.Now().Add(duration)
		duration += end.Truncate(time.Second).Add(time.Second - 50*time.Millisecond).Sub(end)
	}
	l := load{targets: targets, callers: 60, duration: duration, keys: matrixKeys, timeout: 30 * time.Second,
		request: func(k int) *rlsv3.RateLimitRequest { return descriptors("edge", "client", "m"+strconv.Itoa(k)) }}
	if c.pattern == "1.5x" {
		l.rate, l.callers = 1.5*matrixLimit*matrixKeys, 30
	}
	trips := func() float64 {
		n := 0.0
		for _, s := range servers {
			n += s.metric(t, "sluice_redis_round_trips_total")
		}
		return n
	}
	trips0 := trips()
	l.trace = c.trace
	res := l.run(context.Background())
	// The last flushes land before the counters are read.
	waitFor(t, 30*time.Second, "the fronts' pending hits flushed", func() bool {
		for _, f := range fronts {
			if f.metric(t, "sluice_localfilter_pending_keys") > 0 {
				return false
			}
		}
		return true
	})
	// With trace, when the admissions came against when the exact
	// limiter's would have, by 100 ms of send time: an excess is seen as
	// it forms.
	const bin = 100 * time.Millisecond
	exact, want := 0, map[int]int{}
	for k := range matrixKeys {
		var at []time.Duration
		for target := range res.sentAt {
			at = append(at, res.sentAt[target][k]...)
		}
		admitted := exactlyAdmittedAt(c.params(), res.start, at)
		exact += len(admitted)
		for _, d := range admitted {
			want[int(d/bin)]++
		}
	}
	if l.trace {
		got := map[int]int{}
		for _, e := range res.events {
			if e.err == nil && e.resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
				got[int(e.at/bin)]++
			}
		}
		line := ""
		for b := 0; b <= int(res.elapsed/bin); b++ {
			line += fmt.Sprintf(" %d:%d/%d", b, got[b], want[b])
		}
		t.Logf("admitted/exact by 100ms of send time:%s", line)
	}
	row := matrixRow{mode: c.mode, alg: c.alg, pattern: c.pattern, servers: c.servers,
		sent: res.sent, ok: res.ok, exact: exact, errs: res.errs,
		ratio: float64(res.ok) / float64(exact), tripsPerReq: (trips() - trips0) / float64(res.sent)}
	if c.mode == "async" {
		// From trips0 to the counters read: the run and the flushes after.
		row.flushes = float64(len(fronts)) * (time.Since(res.start).Seconds() + 1) / cmp.Or(c.flush, localtier.DefaultFlushInterval).Seconds()
	}
	for _, f := range fronts {
		row.fallback += f.metric(t, "sluice_tier_decisions_total", "tier", "fallback")
		row.slow += f.metric(t, "sluice_tier_decisions_total", "tier", "slow")
		row.dropped += f.metric(t, "sluice_localfilter_dropped_hits_total")
		row.upDown = row.upDown || f.metric(t, "sluice_localfilter_upstream_outages_total") > 0
	}
	for _, s := range servers {
		row.shed += s.metric(t, "sluice_tier_decisions_total", "tier", "shed")
		if n := s.metric(t, "sluice_tier_decisions_total", "tier", "failure_mode"); n > 0 {
			row.failOpen += n
			t.Logf("%s decided %.0f requests in its failure mode; its log ends:\n%s", s.name, n, s.logTail())
		}
	}
	// Which tier held the flood back, and which admitted it, for the log.
	refused, admitted := map[string]float64{}, map[string]float64{}
	for _, f := range fronts {
		for _, tier := range []string{"flag_cache", "local_bucket", "allowance", "global", "slow", "fallback", "store"} {
			refused[tier] += f.metric(t, "sluice_tier_decisions_total", "tier", tier, "result", "over_limit")
			admitted[tier] += f.metric(t, "sluice_tier_decisions_total", "tier", tier, "result", "ok")
		}
	}
	t.Logf("refused by tier: %v; admitted: %v", refused, admitted)
	return row
}
