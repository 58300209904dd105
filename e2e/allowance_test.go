package e2e

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/pkg/algorithm"
)

// floodKeys are the keys of TestAsyncFloodUpstreamKilled's flood, each
// limited to 20 a second: 400 a second in all, which the flood's 60
// callers exceed however busy the machine (at 100 a key, 2,000 a second,
// a flood sharing two cores with busy loops and other tests never reached
// the limits, so the outage began with nothing refused).
const floodKeys = 20

// exactlyAdmittedAt is the offsets, of at from start, of the requests one
// exact limiter admits (its windows on the epoch, as the store's), in
// order.
func exactlyAdmittedAt(p algorithm.Params, start time.Time, at []time.Duration) []time.Duration {
	slices.Sort(at)
	var st algorithm.State
	var admitted []time.Duration
	base := start.UnixMicro()
	for _, d := range at {
		var r algorithm.Result
		if st, r = algorithm.Decide(st, p, base+d.Microseconds(), 1, algorithm.Take); r.Allowed {
			admitted = append(admitted, d)
		}
	}
	return admitted
}

// TestAsyncFloodUpstreamKilled: the server killed in the middle of a
// flood on tight keys and started again. No reply hangs (each comes
// within the sidecars' upstream timeout, plus a margin for a loaded
// machine); while it is away the sidecars admit no more than their
// fallback share of the limit; once it listens again each sidecar has
// allowances again within a second.
func TestAsyncFloodUpstreamKilled(t *testing.T) {
	const (
		timeout = 100 * time.Millisecond
		flush   = 25 * time.Millisecond
		// What a loaded 2-core machine adds to a reply, seen from this
		// process under -race: 1.3 s was seen (with a margin of 800 ms,
		// the test failed without a bug). A hang would be the callers'
		// timeout, 10 s.
		margin = 3 * time.Second
		share  = 0.5
		limit  = 20 // a second, burst 20
	)
	tr := startTier(t, "domain: edge\ndescriptors:\n  - key: client\n    rate_limit: {name: flood, unit: second, requests_per_unit: 20, burst: 20}\n",
		3, "async", "-flush-interval", flush.String(), "-upstream-timeout", timeout.String(), "-upstream-retry", "200ms", "-fallback-share", fmt.Sprint(share))
	allowances := func() []float64 {
		var n []float64
		for _, s := range tr.fronts {
			n = append(n, s.metric(t, "sluice_localfilter_allowances_total"))
		}
		return n
	}
	stop := load{
		targets: tr.targets(t), callers: 60, duration: time.Minute, keys: floodKeys, trace: true, timeout: 10 * time.Second,
		request: func(k int) *rlsv3.RateLimitRequest { return descriptors("edge", "client", "k"+strconv.Itoa(k)) },
	}.start()
	refused := func(s *proc) float64 {
		return s.metric(t, "sluice_tier_decisions_total", "result", "over_limit")
	}
	// The outage starts in the flood's steady state: every sidecar has
	// allowances and has refused, so the keys' bursts are spent.
	waitFor(t, 30*time.Second, "allowances and refusals at every sidecar before the outage", func() bool {
		for _, s := range tr.fronts {
			if refused(s) < floodKeys {
				return false
			}
		}
		return !slices.Contains(allowances(), 0)
	})
	t0 := time.Now()
	tr.server.kill()
	time.Sleep(2 * time.Second) // the outage lasts this long
	t1 := time.Now()
	tr.server.restart(t)
	// Back from when it listens: starting the process is not the sidecars'
	// part, and a loaded machine takes its time over it.
	listening := time.Now()
	before := allowances()
	rebuilt := time.Duration(0)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		now := allowances()
		back := true
		for i := range now {
			back = back && now[i] > before[i]
		}
		if back {
			rebuilt = time.Since(listening)
			break
		}
	}
	time.Sleep(time.Second) // traffic on the restored server
	res := stop()
	if res.errs > 0 {
		t.Fatalf("%d errors, the first: %v", res.errs, res.firstErr)
	}
	if worst := res.quantile(1); worst > timeout+margin {
		t.Errorf("slowest reply took %v; want within the upstream timeout %v (+%v margin)", worst, timeout, margin)
	}
	// While the server was away, per key, at most each sidecar's fallback
	// share of the limit (its bucket and its refill, and one request) and
	// the allowances it held at the kill (at most the pool's refill over
	// an allowance's life, three flush intervals, and a unit each).
	from, to := t0.Sub(res.start), t1.Sub(res.start)
	byKey := make([]int, floodKeys)
	for _, e := range res.events {
		if e.at >= from && e.at < to && e.err == nil && e.resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
			byKey[e.key]++
		}
	}
	bound := 3*(share*(limit+limit*(to-from).Seconds())+1) + 3*limit*flush.Seconds() + 3
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
