package main

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// TestCachedMode: in cached Redis mode the server admits from memory and
// every hit it admitted reaches Redis, before an outage and, held while
// Redis is away, after it returns; meanwhile it answers every request
// without error, in time, at -local-share.
func TestCachedMode(t *testing.T) {
	const margin = 500 * time.Millisecond // a loaded 2-core machine under -race
	rdb := redistest.Start(t)
	// A fixed window, whose state in Redis windowCounts reads; an hour
	// long, so that the run rarely straddles one's end (when it does, the
	// hits are counted in the previous window's count).
	cfg := writeConfig(t, `domain: edge
descriptors:
  - key: client
    rate_limit: {name: per-client, unit: hour, requests_per_unit: 3, algorithm: fixed_window}
`)
	s := startServer(t, "-config", cfg, "-redis-url", rdb.URL(), "-redis-mode", "cached",
		"-flush-interval", "10ms", "-store-timeout", "20ms", "-breaker-cooldown", "200ms", "-local-share", "0.5")
	ctx := context.Background()
	// ask sends requests for client until one is over limit (or n were
	// sent) and returns how many were admitted.
	ask := func(client string, n int) int {
		t.Helper()
		admitted := 0
		for range n {
			start := time.Now()
			resp, err := s.client.ShouldRateLimit(ctx, request(client))
			if d := time.Since(start); err != nil || d > margin {
				t.Fatalf("%s: %v after %v; want an answer within %v", client, err, d, margin)
			}
			if resp.OverallCode != rlsv3.RateLimitResponse_OK {
				break
			}
			admitted++
			time.Sleep(2 * time.Millisecond)
		}
		return admitted
	}
	// recorded waits for Redis to hold want hits in its fixed windows.
	recorded := func(want int) {
		t.Helper()
		var got int
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if got = windowCounts(t, rdb); got == want {
				return
			}
		}
		t.Fatalf("Redis holds %d hits; the server admitted %d:\n%s", got, want, s.logs)
	}

	// Local tokens first: the limit of 3 an hour is overshot by what is
	// admitted before the first flush's answer flags the key, and every
	// admitted hit is recorded.
	admitted := ask("a", 50)
	if admitted < 3 || admitted > 50 {
		t.Fatalf("admitted %d of 50 on a limit of 3", admitted)
	}
	recorded(admitted)

	rdb.Kill()
	down := ask("b", 20)
	if down < 1 {
		t.Errorf("with Redis down, admitted none: -local-share decides")
	}
	// Ready, saying so, once a flush has failed.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		code, body := get(t, "http://"+s.httpAddr+"/readyz")
		if code != http.StatusOK {
			t.Fatalf("/readyz with Redis down = %d %s; want ready: it decides locally", code, body)
		}
		if strings.Contains(body, "redis unavailable") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz with Redis down = %s; want it to say Redis is unavailable", body)
		}
	}
	rdb.Restart(t) // empty: what it holds next came from the held hits
	recorded(down)
	t.Logf("admitted on a limit of 3: %d with Redis up, %d with Redis down; all recorded", admitted, down)
}

// windowCounts sums the counts of every fixed_window state in rdb, the
// previous window's with the current one's: hits admitted in one window and
// recorded in the next (or a run that straddles a window's end) count in
// the previous window's.
func windowCounts(t *testing.T, rdb *redistest.Server) int {
	t.Helper()
	ctx := context.Background()
	c := rdb.Client(t)
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		return -1 // not back yet
	}
	n := 0
	for _, k := range keys {
		if c.Type(ctx, k).Val() != "string" {
			continue // the replicas' heartbeat
		}
		v, err := c.Get(ctx, k).Result()
		f := strings.Fields(v)
		if err != nil || len(f) != 3 { // window start, count, the previous window's count
			t.Fatalf("%s = %q, %v: not a fixed_window state", k, v, err)
		}
		for _, field := range f[1:] {
			c, err := strconv.Atoi(field)
			if err != nil {
				t.Fatalf("%s = %q: %v", k, v, err)
			}
			n += c
		}
	}
	return n
}
