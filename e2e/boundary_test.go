package e2e

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/testkit/envoyrl"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// TestWindowBoundaryBurst: a client that spends the whole limit just before
// a window boundary and tries again just after it. Envoy's requests for
// /demo carry [("generic_key", "demo")]; its limit is L per 2 s. A fixed
// window (as envoyproxy/ratelimit counts) admits 2L within moments; a
// sliding window admits only what the previous window's weight has given
// back, and a token bucket only what it refilled.
func TestWindowBoundaryBurst(t *testing.T) {
	const limit = 40
	const window = 2 * time.Second
	redis := redistest.Start(t)
	req := traffic(t, 500, func(k int) envoyrl.Request {
		return envoyrl.Request{Path: "/demo", Header: client(k), Peer: balancer}
	})
	for _, alg := range []string{"fixed_window", "sliding_window", "token_bucket"} {
		t.Run(alg, func(t *testing.T) {
			cfg := writeConfig(t, fmt.Sprintf(`domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unlimited: true}
  - key: generic_key
    value: demo
    rate_limit: {name: demo, unit: second, unit_multiplier: 2, requests_per_unit: %d, algorithm: %s}
`, limit, alg))
			server := startServer(t, "server", "-config", cfg, "-redis-url", redis.URL(), "-key-prefix", "sluice:"+alg+":", "-store-timeout", "1s")
			target := []rlsv3.RateLimitServiceClient{server.client(t)}
			burst := func() loadResult {
				return load{targets: target, callers: 64, duration: 5 * time.Second, total: 2 * limit, keys: 500, request: req}.run(context.Background())
			}
			// Both bursts must land whole on their side of the boundary; on a
			// machine too slow for that at one boundary, try the next, the
			// first burst started earlier each time (300 ms before the
			// boundary, then 600, then 900).
			for attempt := 1; ; attempt++ {
				lead := min(300*time.Millisecond*time.Duration(attempt), 900*time.Millisecond)
				boundary := nextBoundary(window, lead+100*time.Millisecond)
				time.Sleep(time.Until(boundary.Add(-lead)))
				start := time.Now()
				before := burst()
				beforeEnd := start.Add(before.elapsed)
				time.Sleep(time.Until(boundary.Add(10 * time.Millisecond)))
				after := burst()
				span := time.Since(start)
				if before.errs+after.errs > 0 {
					t.Fatalf("errors: %v %v", before.firstErr, after.firstErr)
				}
				if !beforeEnd.Before(boundary) || span > window-200*time.Millisecond {
					if attempt == 5 {
						t.Fatalf("five attempts, and the bursts never fitted either side of a boundary (last: first burst %v, both %v)", before.elapsed, span)
					}
					// Two idle windows: the bucket is full again and the
					// sliding window's previous window is empty.
					time.Sleep(2 * window)
					continue
				}
				got := before.ok + after.ok
				t.Logf("%s: %d admitted before the boundary, %d after, %d in %v", alg, before.ok, after.ok, got, span)
				switch alg {
				case "fixed_window":
					if before.ok != limit || after.ok != limit {
						t.Errorf("fixed_window admitted %d + %d across the boundary; want %d + %d: twice the limit within %v", before.ok, after.ok, limit, limit, span)
					}
				default:
					// Since the first request, at most limit + limit·d/window can
					// be spent in d: the sliding window gives back the previous
					// window's weight linearly, the bucket refills at limit/window
					// (also while the first burst is still arriving).
					refill := func(d time.Duration) int { return int(math.Ceil(limit * d.Seconds() / window.Seconds())) }
					if before.ok < limit || before.ok > limit+refill(before.elapsed) || got > limit+refill(span) {
						t.Errorf("%s admitted %d + %d within %v (first burst %v); want %d to %d before and at most %d in all",
							alg, before.ok, after.ok, span, before.elapsed, limit, limit+refill(before.elapsed), limit+refill(span))
					}
				}
				return
			}
		})
	}
}

// nextBoundary returns the next epoch-aligned boundary of windows of length
// w that is at least lead away.
func nextBoundary(w, lead time.Duration) time.Time {
	b := time.Now().Truncate(w).Add(w)
	if time.Until(b) < lead {
		b = b.Add(w)
	}
	return b
}
