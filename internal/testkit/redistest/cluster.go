package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterSlots is the number of hash slots in a Redis Cluster.
const clusterSlots = 16384

// Cluster is a Redis Cluster of masters without replicas, started for one
// test.
type Cluster struct {
	// Addrs are the nodes' addresses, usable as ClusterClient seeds.
	Addrs []string
	// Nodes are the node processes, in the order of Addrs. A restarted node
	// rejoins from its nodes.conf; Restart waits for PING, not for the
	// cluster to be healthy again.
	Nodes []*Server
}

// StartCluster starts masters (at least 3) cluster-enabled redis-servers,
// joins them with `redis-cli --cluster create`, which spreads the slots
// evenly, and returns once every node reports cluster_state:ok with all
// 16384 slots served and every other node known.
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	if masters < 3 {
		t.Fatalf("redistest: StartCluster(%d): a Redis Cluster needs at least 3 masters", masters)
	}
	cli := lookBinary(t, "redis-cli")
	c := &Cluster{}
	for range masters {
		s := Start(t, func(cfg *config) { cfg.cluster = true })
		c.Nodes = append(c.Nodes, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}

	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli, args...) // SIGKILLed if ctx ends
	cmd.WaitDelay = time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}

	c.waitHealthy(t)
	return c
}

// waitHealthy polls CLUSTER INFO on every node until all agree the cluster
// is whole; redis-cli returns once the configuration is consistent, which
// can be before each node has marked its state ok.
func (c *Cluster) waitHealthy(t testing.TB) {
	t.Helper()
	want := map[string]string{
		"cluster_state":          "ok",
		"cluster_slots_assigned": strconv.Itoa(clusterSlots),
		"cluster_slots_ok":       strconv.Itoa(clusterSlots),
		"cluster_known_nodes":    strconv.Itoa(len(c.Addrs)),
	}
	deadline := time.Now().Add(readyTimeout)
	for {
		problem := ""
		for _, addr := range c.Addrs {
			if problem = clusterNodeProblem(addr, want); problem != "" {
				break
			}
		}
		if problem == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: cluster %v not healthy within %v: %s", c.Addrs, readyTimeout, problem)
		}
		time.Sleep(pollInterval)
	}
}

// clusterNodeProblem returns why the node at addr does not yet report the
// wanted CLUSTER INFO fields, or "" if it does.
func clusterNodeProblem(addr string, want map[string]string) string {
	opt, release, err := dialProbe(addr, "")
	if err != nil {
		return fmt.Sprintf("%s: %v", addr, err)
	}
	defer release()
	cl := redis.NewClient(opt)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, err := cl.ClusterInfo(ctx).Result()
	if err != nil {
		return fmt.Sprintf("%s: CLUSTER INFO: %v", addr, err)
	}
	for key, v := range want {
		if got := infoField(info, key); got != v {
			return fmt.Sprintf("%s: %s:%s, want %s", addr, key, got, v)
		}
	}
	return ""
}

// Client returns a cluster client seeded with every node, closed in
// t.Cleanup.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}
