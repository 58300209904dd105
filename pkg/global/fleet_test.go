package global

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// TestFleetDemand: replicas read each other's demand on a key, not their
// own; a replica's word lapses after its time.
func TestFleetDemand(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	prefix := redistest.Prefix(t) + "rlqs:"
	ctx := context.Background()
	a, b, c := NewFleetDemand(client, prefix), NewFleetDemand(client, prefix), NewFleetDemand(client, prefix)
	if others, err := a.Demand(ctx, "k", 10, time.Minute); err != nil || others != 0 {
		t.Fatalf("alone: %v, %v; want 0", others, err)
	}
	if others, err := b.Demand(ctx, "k", 2.5, time.Minute); err != nil || others != 10 {
		t.Fatalf("beside a: %v, %v; want 10", others, err)
	}
	if others, err := c.Demand(ctx, "k", 1, 50*time.Millisecond); err != nil || others != 12.5 {
		t.Fatalf("beside a and b: %v, %v; want 12.5", others, err)
	}
	if others, err := a.Demand(ctx, "other", 7, time.Minute); err != nil || others != 0 {
		t.Fatalf("another key: %v, %v; want 0", others, err)
	}
	time.Sleep(100 * time.Millisecond) // c's word lapses
	if others, err := a.Demand(ctx, "k", 10, time.Minute); err != nil || others != 2.5 {
		t.Errorf("after c lapsed: %v, %v; want 2.5 (b's)", others, err)
	}
	if ttl := client.PTTL(ctx, prefix+"k").Val(); ttl <= 0 || ttl > time.Minute+time.Millisecond {
		t.Errorf("the hash's PTTL %v; want within the last word's time", ttl)
	}
}
