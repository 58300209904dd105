package e2e

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/testkit/envoyrl"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// TestReplicasNeverExceedTheLimit: three server replicas on one store, 64
// concurrent callers spread over them, Envoy's requests for /api/ with one
// API key from a thousand clients: the per-api-key limit (sliding window,
// 100 a minute, envoy/ratelimit-config) binds, and never more pass than it
// allows, on a single Redis and on a three-master Redis Cluster (where a
// request's keys live in different slots: take, then refund).
func TestReplicasNeverExceedTheLimit(t *testing.T) {
	const limit, window = 100, time.Minute
	stores := []struct {
		name  string
		flags func(t *testing.T) []string
	}{
		{"redis", func(t *testing.T) []string { return []string{"-redis-url", redistest.Start(t).URL()} }},
		{"cluster", func(t *testing.T) []string {
			return []string{"-redis-cluster", strings.Join(redistest.StartCluster(t, 3).Addrs, ",")}
		}},
	}
	req := traffic(t, 1000, func(k int) envoyrl.Request {
		return envoyrl.Request{Path: "/api/orders", Header: withHeader(client(k), "X-Api-Key", "shared-key"), Peer: balancer}
	})
	for _, store := range stores {
		t.Run(store.name, func(t *testing.T) {
			flags := store.flags(t)
			var targets []rlsv3.RateLimitServiceClient
			for i := range 3 {
				args := append([]string{"-config", edgeConfig, "-store-timeout", "1s"}, flags...)
				targets = append(targets, startServer(t, fmt.Sprintf("server-%d", i+1), args...).client(t))
			}
			res := load{targets: targets, callers: 64, duration: 30 * time.Second, total: 20 * limit, keys: 1000, request: req}.run(context.Background())
			if res.errs > 0 || res.sent != 20*limit {
				t.Fatalf("%d of %d sent, %d errors (the first: %v)", res.sent, 20*limit, res.errs, res.firstErr)
			}
			// A sliding window admits the limit within a window; a run that
			// crosses a window boundary may add what the weight of the
			// previous window gives back over the run: at most limit × run/window.
			bound := limit + int(math.Ceil(limit*res.elapsed.Seconds()/window.Seconds()))
			t.Logf("%s: %d of %d admitted in %v by 3 replicas; the limit allows %d..%d", store.name, res.ok, res.sent, res.elapsed, limit, bound)
			if res.ok > bound || res.ok < limit {
				t.Errorf("admitted %d; want %d..%d (limit %d per %v over a %v run)", res.ok, limit, bound, limit, window, res.elapsed)
			}
		})
	}
}
