package global

import (
	"context"
	"fmt"
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
	say := func(f *FleetDemand, key string, mine, handed float64, ttl time.Duration) (float64, float64) {
		t.Helper()
		w := []FleetWord{{Key: key, Mine: mine, Handed: handed}}
		if err := f.Demand(ctx, ttl, w); err != nil {
			t.Fatal(err)
		}
		return w[0].Others, w[0].OthersHanded
	}
	if others, handed := say(a, "k", 10, 1, time.Minute); others != 0 || handed != 0 {
		t.Fatalf("alone: %v, %v; want 0, 0", others, handed)
	}
	if others, handed := say(b, "k", 2.5, 2, time.Minute); others != 10 || handed != 1 {
		t.Fatalf("beside a: %v, %v; want 10, 1", others, handed)
	}
	if others, handed := say(c, "k", 1, 4, 50*time.Millisecond); others != 12.5 || handed != 3 {
		t.Fatalf("beside a and b: %v, %v; want 12.5, 3", others, handed)
	}
	if others, _ := say(a, "other", 7, 0, time.Minute); others != 0 {
		t.Fatalf("another key: %v; want 0", others)
	}
	time.Sleep(100 * time.Millisecond) // c's word lapses
	if others, handed := say(a, "k", 10, 1, time.Minute); others != 2.5 || handed != 2 {
		t.Errorf("after c lapsed: %v, %v; want b's 2.5, 2", others, handed)
	}
	if ttl := client.PTTL(ctx, prefix+"k").Val(); ttl <= 0 || ttl > time.Minute+time.Millisecond {
		t.Errorf("the hash's PTTL %v; want within the last word's time", ttl)
	}
}

// TestFleetDemandBatches: the words of 2,500 keys go in pipelines of
// fleetBatch, each key answered with its own others' word, also after
// Redis lost its scripts (SCRIPT FLUSH: a restart or a new shard).
func TestFleetDemandBatches(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	prefix := redistest.Prefix(t) + "rlqs:"
	ctx := context.Background()
	a, b := NewFleetDemand(client, prefix), NewFleetDemand(client, prefix)
	words := func(mine float64) []FleetWord {
		w := make([]FleetWord, 2*fleetBatch+500)
		for i := range w {
			w[i] = FleetWord{Key: fmt.Sprint("k", i), Mine: mine * float64(i), Handed: mine}
		}
		return w
	}
	if err := a.Demand(ctx, time.Minute, words(1)); err != nil {
		t.Fatal(err)
	}
	if err := client.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	w := words(2)
	if err := b.Demand(ctx, time.Minute, w); err != nil {
		t.Fatalf("after SCRIPT FLUSH: %v", err)
	}
	for i, x := range w {
		if x.Others != float64(i) || x.OthersHanded != 1 {
			t.Fatalf("key %d: others %v, %v; want a's %d, 1", i, x.Others, x.OthersHanded, i)
		}
	}
}

// BenchmarkFleetDemand: the words of 1,000 keys, one round trip each (as
// a report's buckets were told before) and in one pipeline.
func BenchmarkFleetDemand(b *testing.B) {
	srv := redistest.Start(b)
	client := srv.Client(b)
	f := NewFleetDemand(client, redistest.Prefix(b)+"rlqs:")
	ctx := context.Background()
	w := make([]FleetWord, fleetBatch)
	for i := range w {
		w[i] = FleetWord{Key: fmt.Sprint("k", i), Mine: 1, Handed: 1}
	}
	b.Run("one-by-one", func(b *testing.B) {
		for b.Loop() {
			for i := range w {
				if err := f.Demand(ctx, time.Minute, w[i:i+1]); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*len(w)), "µs/key")
	})
	b.Run("batched", func(b *testing.B) {
		for b.Loop() {
			if err := f.Demand(ctx, time.Minute, w); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*len(w)), "µs/key")
	})
}
