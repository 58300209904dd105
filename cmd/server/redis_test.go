package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// TestRoundTripsCountWhatGoesOnTheWire: each kind of client the flags
// build works, and a pipeline is one round trip on a single node (found
// directly or through Sentinel), one per node it touches on a Cluster.
func TestRoundTripsCountWhatGoesOnTheWire(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	sentinel := redistest.StartSentinel(t)
	cases := []struct {
		name  string
		opts  options
		trips float64
	}{
		{"single node", options{redisURL: redistest.Start(t).URL()}, 1},
		{"cluster", options{redisCluster: strings.Join(cluster.Addrs, ",")}, 3},
		{"sentinel", options{sentinelAddrs: sentinel.Addr, sentinelName: sentinel.MasterName}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.redisPool, tc.opts.writers = 4, 1
			c, _, err := newRedisClient(&tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			client := c.(redis.UniversalClient)
			h := newRoundTrips(prometheus.NewRegistry())
			countRoundTrips(c, h)
			ctx := context.Background()
			// Keys in every node's slots; a first pass lets a Cluster client
			// learn the slot map, so the second is measured alone.
			keys := make([]string, 30)
			for i := range keys {
				keys[i] = fmt.Sprint("k", i)
			}
			pipeline := func() {
				t.Helper()
				if _, err := client.Pipelined(ctx, func(p redis.Pipeliner) error {
					for _, k := range keys {
						p.Incr(ctx, k)
					}
					return nil
				}); err != nil {
					t.Fatal(err)
				}
			}
			pipeline()
			trips, commands := testutil.ToFloat64(h.trips), testutil.ToFloat64(h.commands)
			pipeline()
			if got := testutil.ToFloat64(h.trips) - trips; got != tc.trips {
				t.Errorf("one pipeline counted %v round trips; want %v", got, tc.trips)
			}
			if got := testutil.ToFloat64(h.commands) - commands; got != float64(len(keys)) {
				t.Errorf("one pipeline counted %v commands; want %d", got, len(keys))
			}
		})
	}
}
