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

func leaseStores(t *testing.T) map[string]*Leases {
	m, err := NewMemory(MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return map[string]*Leases{
		"memory": NewLeases(m),
		"redis":  NewLeases(newRedisStore(t, RedisOptions{Client: redistest.Start(t).Client(t), Timeout: 5 * time.Second})),
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
						if err := l.Release(ctx, "k-"+name, id, 5, 10*time.Second); err != nil {
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
func pollAcquire(t *testing.T, l *Leases, key, id string, limit int64, ttl time.Duration, deadline time.Time) {
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

// TestLeaseKeyLivesWithItsLeases: a key lives in Redis as long as its
// newest lease and goes with its last one, released or expired; the
// memory store forgets it alike.
func TestLeaseKeyLivesWithItsLeases(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := context.Background()
	l := NewLeases(newRedisStore(t, RedisOptions{Client: client, Timeout: 5 * time.Second}))
	key := redistest.Prefix(t) + "k"
	for _, id := range []string{"a", "b"} {
		if ok, _, _, err := l.Acquire(ctx, key, id, 2, time.Hour); !ok || err != nil {
			t.Fatalf("Acquire(%s) = %v, %v; want a slot", id, ok, err)
		}
	}
	if pttl := client.PTTL(ctx, key).Val(); pttl < 59*time.Minute {
		t.Errorf("PTTL with leases of 1 h = %v; want about 1 h", pttl)
	}
	if ok, held, retry, err := l.Acquire(ctx, key, "c", 2, time.Hour); ok || err != nil || held != 2 || retry < 59*time.Minute {
		t.Fatalf("a full key = %v, held %d, retry %v, %v; want refused, 2 held, about 1 h to wait", ok, held, retry, err)
	}
	for _, id := range []string{"a", "b"} {
		if err := l.Release(ctx, key, id, 2, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if n := client.Exists(ctx, key).Val(); n != 0 {
		t.Errorf("after the last release the key exists (%d); want it gone", n)
	}
	// Released twice, or never taken: nothing else moves.
	if err := l.Release(ctx, key, "a", 2, time.Hour); err != nil {
		t.Fatal(err)
	}
	if ok, held, _, err := l.Acquire(ctx, key, "d", 2, time.Hour); !ok || held != 1 || err != nil {
		t.Errorf("after the releases: %v, held %d, %v; want a slot, 1 held", ok, held, err)
	}
}
