package global

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// TestFleetDemand: replicas read each other's demand and rate handed out
// on a key, not their own; a replica's word lapses after its time.
func TestFleetDemand(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	prefix := redistest.Prefix(t) + "rlqs:"
	ctx := context.Background()
	a, b, c := NewFleetDemand(client, prefix), NewFleetDemand(client, prefix), NewFleetDemand(client, prefix)
	if others, handed, err := a.Demand(ctx, "k", 10, 1, time.Minute); err != nil || others != 0 || handed != 0 {
		t.Fatalf("alone: %v, %v, %v; want 0, 0", others, handed, err)
	}
	if others, handed, err := b.Demand(ctx, "k", 2.5, 2, time.Minute); err != nil || others != 10 || handed != 1 {
		t.Fatalf("beside a: %v, %v, %v; want 10, 1", others, handed, err)
	}
	if others, handed, err := c.Demand(ctx, "k", 1, 4, 50*time.Millisecond); err != nil || others != 12.5 || handed != 3 {
		t.Fatalf("beside a and b: %v, %v, %v; want 12.5, 3", others, handed, err)
	}
	if others, _, err := a.Demand(ctx, "other", 7, 0, time.Minute); err != nil || others != 0 {
		t.Fatalf("another key: %v, %v; want 0", others, err)
	}
	time.Sleep(100 * time.Millisecond) // c's word lapses
	if others, handed, err := a.Demand(ctx, "k", 10, 1, time.Minute); err != nil || others != 2.5 || handed != 2 {
		t.Errorf("after c lapsed: %v, %v, %v; want b's 2.5, 2", others, handed, err)
	}
	if ttl := client.PTTL(ctx, prefix+"k").Val(); ttl <= 0 || ttl > time.Minute+time.Millisecond {
		t.Errorf("the hash's PTTL %v; want within the last word's time", ttl)
	}
}
