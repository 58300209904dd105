package global

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// TestReplicasCount: replicas sharing a set count each other once each
// has said it is alive, and a count is never below one.
func TestReplicasCount(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	key := redistest.Prefix(t) + "replicas"
	ctx := context.Background()
	a, b := NewReplicas(client, key), NewReplicas(client, key)
	if a.Count() != 1 {
		t.Fatalf("before any beat: %d; want 1 (itself)", a.Count())
	}
	for _, r := range []*Replicas{a, b, a} {
		if err := r.Beat(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if a.Count() != 2 {
		t.Errorf("two replicas, both beating: %d; want 2", a.Count())
	}
	if ttl := client.PTTL(ctx, key).Val(); ttl <= 0 || ttl > ReplicaLapse {
		t.Errorf("the set's PTTL %v; want within %v, so that it goes with its replicas", ttl, ReplicaLapse)
	}
}
