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
