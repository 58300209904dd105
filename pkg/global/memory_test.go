package global

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/pkg/algorithm"
)

func TestMemoryBoundedAndDropsFreshState(t *testing.T) {
	m, err := NewMemory(MemoryOptions{MaxKeys: 256, Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	p := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 10, Window: sec, Burst: 10}
	out := make([]Result, 1)
	now := int64(1_780_000_000) * sec
	for i := range 10_000 {
		if err := m.DecideAt([]Item{{Key: fmt.Sprint(i), Params: p, Cost: 1}}, out, now); err != nil {
			t.Fatal(err)
		}
	}
	if n := m.Len(); n > 256 {
		t.Errorf("Len() = %d after 10000 distinct keys; want at most 256", n)
	}
	// A check that leaves a full bucket keeps nothing.
	m2, _ := NewMemory(MemoryOptions{})
	if err := m2.DecideAt([]Item{{Key: "k", Params: p, Cost: 0}}, out, now); err != nil {
		t.Fatal(err)
	}
	if n := m2.Len(); n != 0 {
		t.Errorf("Len() = %d after a zero-cost check on a fresh key; want 0", n)
	}
	// A bucket that refilled is dropped on its next full-bucket decision.
	m2.DecideAt([]Item{{Key: "k", Params: p, Cost: 1}}, out, now)
	m2.DecideAt([]Item{{Key: "k", Params: p, Cost: 0}}, out, now+sec)
	if n := m2.Len(); n != 0 {
		t.Errorf("Len() = %d once the bucket refilled; want 0", n)
	}
}

func TestMemoryConcurrentExact(t *testing.T) {
	m, _ := NewMemory(MemoryOptions{})
	p := algorithm.Params{Kind: algorithm.FixedWindow, Limit: 1000, Window: 3600 * sec}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	now := int64(1_780_000_000) * sec
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]Result, 2)
			for range 50 {
				// Two limits per request, overlapping keys across goroutines.
				items := []Item{{Key: "shared", Params: p, Cost: 1}, {Key: fmt.Sprint("g", g%4), Params: p, Cost: 1}}
				m.DecideAt(items, out, now)
				if out[0].Allowed && out[1].Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if got := admitted.Load(); got != 1000 {
		t.Errorf("admitted %d of 3200 on a limit of 1000; want exactly 1000", got)
	}
}

func TestSlot(t *testing.T) {
	if slot("sluice:{abc}") != slot("other{abc}tail") {
		t.Error("slot ignores the hash tag")
	}
	if got := slot("123456789"); got != 12739 { // CRC16/XMODEM check value 0x31C3 % 16384
		t.Errorf(`slot("123456789") = %d; want 12739`, got)
	}
}

func BenchmarkMemoryDecide(b *testing.B) {
	p := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 1 << 30, Window: sec, Burst: 1 << 30}
	for _, keys := range []int{1, 1_000_000} {
		m, _ := NewMemory(MemoryOptions{MaxKeys: 2 * keys})
		names := make([]string, keys)
		out := make([]Result, 1)
		now := m.Now()
		for i := range names {
			names[i] = fmt.Sprint("key", i)
			m.DecideAt([]Item{{Key: names[i], Params: p, Cost: 1}}, out, now)
		}
		b.Run(fmt.Sprintf("keys=%d/serial", keys), func(b *testing.B) {
			b.ReportAllocs()
			items := []Item{{Params: p, Cost: 1}}
			for i := 0; b.Loop(); i++ {
				items[0].Key = names[i%keys]
				m.DecideAt(items, out, now)
			}
		})
		b.Run(fmt.Sprintf("keys=%d/parallel", keys), func(b *testing.B) {
			b.ReportAllocs()
			var seed atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				i := int(seed.Add(7919))
				items := []Item{{Params: p, Cost: 1}}
				out := make([]Result, 1)
				for pb.Next() {
					items[0].Key = names[i%keys]
					m.DecideAt(items, out, now)
					i++
				}
			})
		})
	}
}

// TestMemoryBoundedInBytes: a store bounds the bytes its keys hold, not
// only their number: sliding logs filled with many runs, and concurrency
// limits with many slots named by long holders, on many keys stay within
// MaxBytes (the finding: 3,200 logged keys held 269 MB for an hour).
func TestMemoryBoundedInBytes(t *testing.T) {
	const budget = 1 << 20
	for _, tc := range []struct {
		p          algorithm.Params
		keys, each int
	}{
		{algorithm.Params{Kind: algorithm.SlidingLog, Limit: 10000, Window: 3600 * sec}, 200, 1000},
		// About 1,200 slots a key, each with a member of 64 bytes or more:
		// 7 MB on 60 keys if the members went uncounted.
		{algorithm.Params{Kind: algorithm.Concurrency, Limit: 10000, Window: 3600 * sec}, 60, 300},
	} {
		t.Run(tc.p.Kind.String(), func(t *testing.T) {
			m, err := NewMemory(MemoryOptions{MaxBytes: budget, Shards: 4})
			if err != nil {
				t.Fatal(err)
			}
			out := make([]Result, 1)
			now := int64(1_780_000_000) * sec
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for k := range tc.keys {
				for i := range tc.each {
					now++ // a run per request
					it := Item{Key: fmt.Sprint(k), Params: tc.p, Cost: int64(i%7 + 1)}
					it.Params.Holder = fmt.Sprintf("%064d", i) // the longest a holder is
					if err := m.DecideAt([]Item{it}, out, now); err != nil {
						t.Fatal(err)
					}
				}
				if b := m.Bytes(); b > budget {
					t.Fatalf("after %d keys: %d bytes held; want at most %d", k+1, b, budget)
				}
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 4*budget {
				t.Errorf("heap grew %d bytes; want about the %d budget", grew, budget)
			}
			if n := m.Len(); n == 0 || n >= tc.keys {
				t.Errorf("%d keys held; want the newest few, within the budget", n)
			}
		})
	}
}

// TestUnknownKindRefused: an item of an algorithm no store knows is an
// error, never decided as another algorithm.
func TestUnknownKindRefused(t *testing.T) {
	m, _ := NewMemory(MemoryOptions{})
	bad := []Item{{Key: "k", Params: algorithm.Params{Kind: algorithm.Kind(200), Limit: 1, Window: sec, Burst: 1}, Cost: 1}}
	if err := m.DecideAt(bad, make([]Result, 1), 1_780_000_000*sec); err == nil {
		t.Fatal("memory store decided an unknown algorithm")
	}
	srv := redistest.Start(t)
	rs := newRedisStore(t, RedisOptions{Client: srv.Client(t)})
	if err := rs.Decide(context.Background(), bad, make([]Result, 1)); err == nil {
		t.Fatal("Redis store decided an unknown algorithm")
	}
}

// Key is a store key for the tests: prefix and a hash tag over parts, as
// the core's keys are (limiter.Key); the store treats keys as opaque but
// for the tag.
func Key(prefix string, parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return prefix + "{" + hex.EncodeToString(sum[:16]) + "}"
}

// TestRefundsOnUnknownKeysHoldNothing: a flood of refunds (Envoy's
// is_negative_hits) on keys with nothing consumed, each as large as a
// request may carry, leaves the store holding no key.
func TestRefundsOnUnknownKeysHoldNothing(t *testing.T) {
	m, err := NewMemory(MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]Result, 1)
	for k, kind := range algorithm.Kinds() {
		p := algorithm.Params{Kind: kind, Limit: 10, Window: 60e6, Burst: 10, Holder: "h"}
		for i := range 10_000 {
			it := Item{Key: fmt.Sprintf("refund-%d-\xff-%d", k, i), Params: p, Cost: 1 << 32, Mode: algorithm.GiveBack}
			if err := m.DecideAt([]Item{it}, out, 1_780_000_000_000_000); err != nil || !out[0].Allowed {
				t.Fatalf("refund %d: %v, %+v; want allowed", i, err, out[0])
			}
		}
	}
	if n := m.Len(); n != 0 {
		t.Errorf("%d keys held after refunds on keys with nothing consumed; want none", n)
	}
}

// TestMemoryEvictsUnusedFirst: a full shard drops, oldest first, the keys
// not used since they came in or since the eviction hand passed them; a
// used key gets a second chance unless its state has expired; a new key
// starts unused, so a run of one-off keys evicts its own kind. Each key's
// state tells whether it was kept: a key dropped comes back with a full
// bucket.
func TestMemoryEvictsUnusedFirst(t *testing.T) {
	m, err := NewMemory(MemoryOptions{MaxKeys: 8, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	hour := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 10, Window: 3600 * sec, Burst: 10}
	brief := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 2, Window: sec, Burst: 2}
	now := int64(1_780_000_000) * sec
	out := make([]Result, 1)
	take := func(key string, p algorithm.Params) {
		t.Helper()
		if err := m.DecideAt([]Item{{Key: key, Params: p, Cost: 1}}, out, now); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		take(k, hour) // 9 left each
	}
	take("brief", brief)
	take("a", hour) // used: 8 left
	take("b", hour)
	take("brief", brief) // used, but its state expires in a second
	now += 2 * sec
	// The hand passes a and b (second chances), then drops c to g; then
	// brief, whose state has expired, rather than a, unused since.
	for i := range 6 {
		take(fmt.Sprint("one-off-", i), hour)
	}
	if n := m.Len(); n != 8 {
		t.Fatalf("Len() = %d; want the 8 the shard holds", n)
	}
	for key, want := range map[string]int64{"a": 8, "b": 8, "c": 10, "d": 10, "e": 10, "f": 10, "g": 10, "one-off-0": 9} {
		if err := m.DecideAt([]Item{{Key: key, Params: hour, Cost: 0}}, out, now); err != nil {
			t.Fatal(err)
		}
		if got := out[0].Remaining; got != want {
			t.Errorf("%s: %d left; want %d (kept: 8 or 9; dropped: 10)", key, got, want)
		}
	}
}

// TestMemoryFloodOnUsedKeys: one-off keys (a hostile client's random
// values) flooding a full shard whose every key is in use stay within
// MaxKeys, each eviction bounded by secondChances, and the keys used
// between them keep their state.
func TestMemoryFloodOnUsedKeys(t *testing.T) {
	m, err := NewMemory(MemoryOptions{MaxKeys: 256, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	p := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 1 << 40, Window: 3600 * sec, Burst: 1 << 40}
	now := int64(1_780_000_000) * sec
	out := make([]Result, 1)
	take := func(key string) {
		if err := m.DecideAt([]Item{{Key: key, Params: p, Cost: 1 << 30}}, out, now); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 256 {
		take(fmt.Sprint("used-", i))
		take(fmt.Sprint("used-", i))
	}
	for i := range 20_000 {
		take(fmt.Sprintf("flood-\xff%d", i))
		if i%40 == 0 {
			take("used-7") // in steady use
		}
	}
	if n := m.Len(); n > 256 {
		t.Fatalf("Len() = %d; want at most 256", n)
	}
	if err := m.DecideAt([]Item{{Key: "used-7", Params: p, Cost: 0}}, out, now); err != nil {
		t.Fatal(err)
	}
	if used := (int64(1)<<40 - out[0].Remaining) >> 30; used < 500 {
		t.Errorf("used-7 has %d takes on record; want its 500 and more kept through the flood", used)
	}
}
