package global

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

type leases interface {
	Acquire(ctx context.Context, key, id string, limit int64, ttl time.Duration) (bool, int64, time.Duration, error)
	Release(ctx context.Context, key, id string) error
}

func leaseStores(t *testing.T) map[string]leases {
	return map[string]leases{
		"memory": NewMemoryLeases(0, nil),
		"redis":  NewRedisLeases(redistest.Start(t).Client(t)),
	}
}

// TestLeasesNeverExceedTheLimit: 64 goroutines take and release slots of
// one key with a limit of 5: never more than 5 are held at once, and the
// slots are used.
func TestLeasesNeverExceedTheLimit(t *testing.T) {
	for name, l := range leaseStores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			var inFlight, most, got atomic.Int64
			var wg sync.WaitGroup
			for g := range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 40 {
						id := fmt.Sprint(g, ".", i)
						ok, held, _, err := l.Acquire(ctx, "k-"+name, id, 5, 10*time.Second)
						if err != nil {
							t.Error(err)
							return
						}
						if held > 5 {
							t.Errorf("held %d of 5", held)
						}
						if !ok {
							continue
						}
						got.Add(1)
						n := inFlight.Add(1)
						for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
						}
						time.Sleep(100 * time.Microsecond)
						inFlight.Add(-1)
						if err := l.Release(ctx, "k-"+name, id); err != nil {
							t.Error(err)
						}
					}
				}()
			}
			wg.Wait()
			if most.Load() > 5 {
				t.Errorf("%d held at once; the limit is 5", most.Load())
			}
			if got.Load() < 40 {
				t.Errorf("only %d slots taken in 2,560 tries", got.Load())
			}
			t.Logf("%s: %d of 2,560 tries took a slot, at most %d at once", name, got.Load(), most.Load())
		})
	}
}

// TestLeaseExpires: a holder that never releases frees its slot within
// the TTL, and a full key says when the first slot frees.
func TestLeaseExpires(t *testing.T) {
	for name, l := range leaseStores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			// Long enough for the three calls that fill the key and find it
			// full on a loaded machine: with 300 ms, a first slot could
			// expire before the third call and the full key admit it.
			const ttl = 2 * time.Second
			for i := range 2 {
				if ok, _, _, err := l.Acquire(ctx, "dead-"+name, fmt.Sprint("crashed", i), 2, ttl); !ok || err != nil {
					t.Fatalf("slot %d: %v, %v", i, ok, err)
				}
			}
			ok, held, retry, err := l.Acquire(ctx, "dead-"+name, "next", 2, ttl)
			if ok || err != nil || held != 2 || retry <= 0 || retry > ttl {
				t.Fatalf("a full key: %v, held %d, retry %v, %v; want refused, 2 held, a retry within the TTL", ok, held, retry, err)
			}
			pollAcquire(t, l, "dead-"+name, "next", 2, ttl, time.Now().Add(retry+5*time.Second))
			if _, _, _, err := l.Acquire(ctx, "k", "id", 0, ttl); err == nil {
				t.Error("limit 0: no error")
			}
		})
	}
}

// pollAcquire takes a slot of key for id, trying until it gets one or the
// deadline passes (a lease frees on the store's clock).
func pollAcquire(t *testing.T, l leases, key, id string, limit int64, ttl time.Duration, deadline time.Time) {
	t.Helper()
	for {
		ok, held, _, err := l.Acquire(context.Background(), key, id, limit, ttl)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Acquire(%q, %q) still refused (%d held) at the deadline; want a slot once a lease expired", key, id, held)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestLeaseKeyOutlivesItsLongestLease is finding 9 of issue 21: each
// Redis acquire set the whole sorted set's PEXPIRE to its own lease's TTL,
// so a 50 ms lease taken after a 1 h lease on the same key had Redis
// delete the key, the 1 h lease with it, and the limit admitted one more.
// A key lives as long as its longest lease, in Redis and in memory.
func TestLeaseKeyOutlivesItsLongestLease(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	prefix := redistest.Prefix(t)
	for name, l := range map[string]leases{"memory": NewMemoryLeases(0, nil), "redis": NewRedisLeases(client)} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			key := prefix + name
			for _, lease := range []struct {
				id  string
				ttl time.Duration
			}{{"long", time.Hour}, {"short", 50 * time.Millisecond}} {
				if ok, _, _, err := l.Acquire(ctx, key, lease.id, 2, lease.ttl); !ok || err != nil {
					t.Fatalf("Acquire(%s, %v) = %v, %v; want a slot", lease.id, lease.ttl, ok, err)
				}
			}
			if name == "redis" {
				if pttl := client.PTTL(ctx, key).Val(); pttl < 59*time.Minute {
					t.Errorf("PTTL after a 50 ms lease that follows a 1 h one = %v; want about 1 h, the longest lease's", pttl)
				}
			}
			// The short lease's slot frees; the long one's does not.
			pollAcquire(t, l, key, "next", 2, time.Hour, time.Now().Add(5*time.Second))
			if ok, held, retry, err := l.Acquire(ctx, key, "one-too-many", 2, time.Hour); ok || err != nil || held != 2 || retry < 59*time.Minute {
				t.Fatalf("Acquire with the 1 h lease and the next held = %v, held %d, retry %v, %v; want refused, 2 held, about 1 h to wait", ok, held, retry, err)
			}
		})
	}
}
