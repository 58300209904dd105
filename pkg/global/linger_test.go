package global

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/pkg/algorithm"
)

// TestRecordLinger: records that arrive apart, as sidecars' flushes do,
// go to Redis together within RecordLinger of the first (one round trip
// for many, each still recorded). Only records linger (records); a
// request that takes hits goes at once (its time is logged).
func TestRecordLinger(t *testing.T) {
	srv := redistest.Start(t)
	p := algorithm.Params{Kind: algorithm.FixedWindow, Limit: 1000, Window: 3600e6}
	for _, c := range []struct {
		linger time.Duration
		most   int64 // round trips for the 10 records
	}{
		{0, 10},
		{200 * time.Millisecond, 2},
	} {
		t.Run(fmt.Sprint(c.linger), func(t *testing.T) {
			client := redis.NewClient(&redis.Options{Addr: srv.Addr})
			defer client.Close()
			hook := &countingHook{}
			client.AddHook(hook)
			s := newRedisStore(t, RedisOptions{Client: client, RecordLinger: c.linger})
			ctx := context.Background()
			if err := s.Load(ctx); err != nil {
				t.Fatal(err)
			}
			prefix := fmt.Sprintf("linger-%d:", c.linger)
			before := hook.scriptTrips.Load()
			var wg sync.WaitGroup
			for range 10 {
				wg.Go(func() {
					out := make([]Result, 1)
					if err := s.Decide(ctx, []Item{{Key: prefix + "k", Params: p, Cost: 1, Mode: algorithm.Force}}, out); err != nil {
						t.Error(err)
					}
				})
				time.Sleep(5 * time.Millisecond) // apart, not at once
			}
			// A request taking hits meanwhile is not held.
			start := time.Now()
			if r := decide1(t, s, Item{Key: prefix + "take", Params: p, Cost: 1, Mode: algorithm.Take}); !r.Allowed {
				t.Errorf("a take: %+v", r)
			}
			took := time.Since(start)
			wg.Wait()
			trips := hook.scriptTrips.Load() - before - 1
			t.Logf("linger %v: %d round trips for 10 records; a take took %v", c.linger, trips, took)
			if trips > c.most {
				t.Errorf("linger %v: %d round trips for 10 records; want at most %d", c.linger, trips, c.most)
			}
			if got := decide1(t, s, Item{Key: prefix + "k", Params: p, Cost: 0, Mode: algorithm.Take}); got.Remaining != 990 {
				t.Errorf("after 10 records of 1: %d remaining; want 990", got.Remaining)
			}
		})
	}
}

func TestOnlyRecordsLinger(t *testing.T) {
	force, take := Item{Mode: algorithm.Force}, Item{Mode: algorithm.Take}
	for _, c := range []struct {
		items []Item
		want  bool
	}{
		{[]Item{force}, true},
		{[]Item{force, force}, true},
		{[]Item{force, take}, false},
		{[]Item{take}, false},
		{[]Item{{Mode: algorithm.Count}}, false},
	} {
		if got := records(c.items); got != c.want {
			t.Errorf("records(%v) = %v; want %v", c.items, got, c.want)
		}
	}
}
