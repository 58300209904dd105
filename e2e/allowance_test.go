package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/pkg/algorithm"
)

// floodScenario is the hybrid tier under a flood on few keys: one server
// on Redis, three async sidecars, one limit of 100 a second on each of 20
// keys, callers spread over the sidecars by weight.
type floodScenario struct {
	name    string
	p       algorithm.Params
	yaml    string // the limit, as the config says it
	weights []int  // callers per sidecar, in tenths
	rate    float64
	// Admitted over what one exact limiter admits of the same arrivals.
	least, most float64
}

const floodKeys = 20

// TestAsyncFloodHoldsTheLimit: with the server handing each sidecar its
// share of what a tight key has left, a closed-loop flood (repeated) is
// admitted at most 1.05 times what an exact limiter would admit of the
// same requests; an offered 1.5 times the limit at least 0.97 of it; an
// 80/10/10 split of the traffic at least 0.95; for a token bucket, a
// sliding window and a fixed window; and Redis sees fewer than 0.05 round
// trips per request throughout.
func TestAsyncFloodHoldsTheLimit(t *testing.T) {
	sec := int64(time.Second / time.Microsecond)
	tb := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 100, Window: sec, Burst: 100}
	sw := algorithm.Params{Kind: algorithm.SlidingWindow, Limit: 100, Window: sec}
	fw := algorithm.Params{Kind: algorithm.FixedWindow, Limit: 100, Window: sec}
	const (
		tbYAML = "{name: flood, unit: second, requests_per_unit: 100, burst: 100}"
		swYAML = "{name: flood, unit: second, requests_per_unit: 100, algorithm: sliding_window}"
		fwYAML = "{name: flood, unit: second, requests_per_unit: 100, algorithm: fixed_window}"
	)
	even := []int{1, 1, 1}
	var scenarios []floodScenario
	for i := range 5 {
		scenarios = append(scenarios, floodScenario{name: fmt.Sprint("token_bucket flood ", i+1), p: tb, yaml: tbYAML, weights: even, most: 1.05})
	}
	scenarios = append(scenarios,
		floodScenario{name: "token_bucket at 1.5x", p: tb, yaml: tbYAML, weights: even, rate: 1.5 * 100 * floodKeys, least: 0.97, most: 1.05},
		floodScenario{name: "token_bucket 80/10/10", p: tb, yaml: tbYAML, weights: []int{8, 1, 1}, least: 0.95, most: 1.05},
		floodScenario{name: "sliding_window flood", p: sw, yaml: swYAML, weights: even, most: 1.05},
		floodScenario{name: "sliding_window 80/10/10", p: sw, yaml: swYAML, weights: []int{8, 1, 1}, least: 0.95, most: 1.05},
		floodScenario{name: "fixed_window flood", p: fw, yaml: fwYAML, weights: even, most: 1.05},
		floodScenario{name: "fixed_window 80/10/10", p: fw, yaml: fwYAML, weights: []int{8, 1, 1}, least: 0.95, most: 1.05},
	)
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) { sc.run(t) })
	}
}

func (sc floodScenario) run(t *testing.T) {
	// 25 ms flushes: three sidecars make at most 120 calls a second, under
	// 0.05 a request from the 3,000 a second of the 1.5x scenario.
	const duration, flush = 5 * time.Second, "25ms"
	tr := startTier(t, "domain: edge\ndescriptors:\n  - key: client\n    rate_limit: "+sc.yaml+"\n", 3, "async", "-flush-interval", flush)
	sidecars := tr.targets(t)
	var targets []rlsv3.RateLimitServiceClient
	for i, w := range sc.weights {
		for range w {
			targets = append(targets, sidecars[i])
		}
	}
	callers := 60 // a multiple of every split's ten
	if sc.rate > 0 {
		callers = 30
	}
	trips0 := tr.roundTrips(t)
	res := load{
		targets: targets, callers: callers, duration: duration, keys: floodKeys, rate: sc.rate,
		request: func(k int) *rlsv3.RateLimitRequest { return descriptors("edge", "client", "f"+strconv.Itoa(k)) },
	}.run(context.Background())
	if res.errs > 0 {
		t.Fatalf("%d errors, the first: %v", res.errs, res.firstErr)
	}
	perReq := (tr.roundTrips(t) - trips0) / float64(res.sent)
	// What one exact limiter admits of the same requests, per key, in the
	// order they were sent.
	exact := 0
	for k := range floodKeys {
		var at []time.Duration
		for target := range res.sentAt {
			at = append(at, res.sentAt[target][k]...)
		}
		exact += exactlyAdmitted(sc.p, res.start, at)
	}
	ratio := float64(res.ok) / float64(exact)
	t.Logf("%s: %d requests (%.0f/s), %d admitted, an exact limiter %d: %.3f; Redis round trips %.4f/request",
		sc.name, res.sent, float64(res.sent)/res.elapsed.Seconds(), res.ok, exact, ratio, perReq)
	if ratio > sc.most || ratio < sc.least {
		t.Errorf("admitted %.3f of what an exact limiter admits; want within [%.2f, %.2f]", ratio, sc.least, sc.most)
	}
	if perReq >= 0.05 {
		t.Errorf("%.4f Redis round trips per request; want fewer than 0.05", perReq)
	}
}

// exactlyAdmitted is how many requests sent at the offsets at from start
// one exact limiter admits (its windows on the epoch, as the store's).
func exactlyAdmitted(p algorithm.Params, start time.Time, at []time.Duration) int {
	slices.Sort(at)
	var st algorithm.State
	n := 0
	base := start.UnixMicro()
	for _, d := range at {
		var r algorithm.Result
		if st, r = algorithm.Decide(st, p, base+d.Microseconds(), 1, algorithm.Take); r.Allowed {
			n++
		}
	}
	return n
}

// TestAsyncFloodUpstreamKilled: the server killed in the middle of a
// flood on tight keys and started again. No reply waits longer than the
// sidecars' upstream timeout; while it is away the sidecars admit no more
// than their fallback share of the limit; once it is back each sidecar has
// allowances again within a second.
func TestAsyncFloodUpstreamKilled(t *testing.T) {
	const (
		timeout = 100 * time.Millisecond
		margin  = 800 * time.Millisecond // a loaded CI machine; a hang would be seconds
		share   = 0.5
		limit   = 100 // a second, burst 100
	)
	tr := startTier(t, "domain: edge\ndescriptors:\n  - key: client\n    rate_limit: {name: flood, unit: second, requests_per_unit: 100, burst: 100}\n",
		3, "async", "-flush-interval", "25ms", "-upstream-timeout", timeout.String(), "-upstream-retry", "200ms", "-fallback-share", fmt.Sprint(share))
	allowances := func() []float64 {
		var n []float64
		for _, s := range tr.fronts {
			n = append(n, s.metric(t, "sluice_localfilter_allowances_total"))
		}
		return n
	}
	stop := load{
		targets: tr.targets(t), callers: 60, duration: time.Minute, keys: floodKeys, trace: true,
		request: func(k int) *rlsv3.RateLimitRequest { return descriptors("edge", "client", "k"+strconv.Itoa(k)) },
	}.start()
	time.Sleep(2 * time.Second)
	if n := allowances(); slices.Contains(n, 0) {
		t.Errorf("allowances received per sidecar before the outage: %v; want some for each", n)
	}
	t0 := time.Now()
	tr.server.kill()
	time.Sleep(2 * time.Second)
	t1 := time.Now()
	tr.server.restart(t)
	before := allowances()
	rebuilt := time.Duration(0)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		now := allowances()
		back := true
		for i := range now {
			back = back && now[i] > before[i]
		}
		if back {
			rebuilt = time.Since(t1)
			break
		}
	}
	time.Sleep(time.Second)
	res := stop()
	if res.errs > 0 {
		t.Fatalf("%d errors, the first: %v", res.errs, res.firstErr)
	}
	if worst := res.quantile(1); worst > timeout+margin {
		t.Errorf("slowest reply took %v; want within the upstream timeout %v (+%v margin)", worst, timeout, margin)
	}
	// While the server was away, per key, at most each sidecar's fallback
	// share of the limit: its bucket and its refill, and one request.
	from, to := t0.Sub(res.start), t1.Sub(res.start)
	byKey := make([]int, floodKeys)
	for _, e := range res.events {
		if e.at >= from && e.at < to && e.err == nil && e.resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
			byKey[e.key]++
		}
	}
	bound := 3 * (share*(limit+limit*(to-from).Seconds()) + 1)
	for k, n := range byKey {
		if float64(n) > bound {
			t.Errorf("key %d: %d admitted while the server was away (%v); want at most %.0f (the fallback share)", k, n, to-from, bound)
		}
	}
	if rebuilt == 0 || rebuilt > time.Second {
		t.Errorf("allowances after the server came back: within %v; want within 1s", rebuilt)
	}
	t.Logf("%d requests, slowest reply %v; while away (%v) at most %d admitted a key (bound %.0f); allowances again %v after the restart",
		res.sent, res.quantile(1), to-from, slices.Max(byKey), bound, rebuilt)
}
