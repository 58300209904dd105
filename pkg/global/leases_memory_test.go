package global

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestMemoryLeasesBounded: a MemoryLeases of 1,000 leases holds no more,
// however they are spread over keys (a key's limit goes up to 10,000, so a
// bound on keys alone let 100,000 keys hold up to 10^9 leases); a lease
// that expires makes room for one more, and so does one released.
func TestMemoryLeasesBounded(t *testing.T) {
	ctx := context.Background()
	clock := time.Unix(1_780_000_000, 0)
	m := NewMemoryLeases(1000, func() time.Time { return clock })
	held := 0
	for i := range 1100 {
		ttl := time.Hour
		if i == 0 {
			ttl = time.Minute // the first to expire
		}
		ok, _, _, err := m.Acquire(ctx, fmt.Sprint("k", i%10), fmt.Sprint("id", i), 10_000, ttl)
		if ok && err == nil {
			held++
		}
	}
	if held != 1000 {
		t.Fatalf("a store of 1,000 leases took %d of 1,100 on 10 keys; want 1,000", held)
	}
	if ok, _, _, err := m.Acquire(ctx, "new-key", "x", 10, time.Hour); ok || err == nil {
		t.Fatalf("full store, a new key: %v, %v; want refused with an error", ok, err)
	}
	clock = clock.Add(time.Minute)
	if ok, _, _, err := m.Acquire(ctx, "new-key", "x", 10, time.Hour); !ok || err != nil {
		t.Fatalf("full store, one lease expired: %v, %v; want its room taken", ok, err)
	}
	if err := m.Release(ctx, "k5", "id5"); err != nil {
		t.Fatal(err)
	}
	if ok, _, _, err := m.Acquire(ctx, "k5", "y", 10_000, time.Hour); !ok || err != nil {
		t.Fatalf("full store, one lease released: %v, %v; want its room taken", ok, err)
	}
	if ok, _, _, err := m.Acquire(ctx, "k5", "z", 10_000, time.Hour); ok || err == nil {
		t.Fatalf("full again: %v, %v; want refused with an error", ok, err)
	}
}

// TestMemoryLeasesAgainstAModel: random acquires, releases and clock
// steps on a few keys, with TTLs that expire out of order, against the
// definition (a key's leases are the ids taken and neither released nor
// expired): the same answers, held counts and waits.
func TestMemoryLeasesAgainstAModel(t *testing.T) {
	ctx := context.Background()
	clock := time.Unix(1_780_000_000, 0)
	m := NewMemoryLeases(20, func() time.Time { return clock })
	model := map[string]map[string]time.Time{}
	live := func(key string) map[string]time.Time {
		out := map[string]time.Time{}
		for id, exp := range model[key] {
			if exp.After(clock) {
				out[id] = exp
			}
		}
		model[key] = out
		return out
	}
	total := func() int {
		n := 0
		for k := range model {
			n += len(live(k))
		}
		return n
	}
	var seen [4]int // re-acquired, key full, store full, taken
	rng := rand.New(rand.NewPCG(21, 9))
	for step := range 20_000 {
		key, id := fmt.Sprint("k", rng.IntN(7)), fmt.Sprint("id", rng.IntN(12))
		switch rng.IntN(5) {
		case 0:
			clock = clock.Add(time.Duration(rng.IntN(20)) * time.Millisecond)
		case 1:
			if err := m.Release(ctx, key, id); err != nil {
				t.Fatal(err)
			}
			delete(model[key], id)
			continue
		}
		limit, ttl := 1+rng.Int64N(9), time.Duration(1+rng.IntN(200))*time.Millisecond
		ok, held, retry, err := m.Acquire(ctx, key, id, limit, ttl)
		leases := live(key)
		_, had := leases[id]
		switch {
		case had:
			seen[0]++
			if !ok || err != nil || held != int64(len(leases)) {
				t.Fatalf("step %d: re-acquire of a held lease = %v, %d, %v; want held, %d", step, ok, held, err, len(leases))
			}
		case int64(len(leases)) >= limit:
			seen[1]++
			first := time.Duration(1 << 62)
			for _, exp := range leases {
				first = min(first, exp.Sub(clock))
			}
			if ok || err != nil || held != int64(len(leases)) || retry != first {
				t.Fatalf("step %d: full key = %v, %d, %v, %v; want refused, %d, %v", step, ok, held, retry, err, len(leases), first)
			}
		case total() >= 20:
			seen[2]++
			if ok || err == nil {
				t.Fatalf("step %d: a full store = %v, %v; want an error", step, ok, err)
			}
		default:
			seen[3]++
			if !ok || err != nil || held != int64(len(leases))+1 {
				t.Fatalf("step %d: Acquire = %v, %d, %v; want a slot, %d held", step, ok, held, err, len(leases)+1)
			}
			if model[key] == nil {
				model[key] = map[string]time.Time{}
			}
			model[key][id] = clock.Add(ttl)
		}
	}
	if slices.Contains(seen[:], 0) {
		t.Fatalf("cases seen (re-acquired, key full, store full, taken): %v; want each", seen)
	}
	t.Logf("cases seen (re-acquired, key full, store full, taken): %v", seen)
}

// BenchmarkMemoryLeasesAt100k is the cost of one acquire on a store
// holding 100,000 keys: full of live leases (a new key is refused); full
// with the oldest lease expiring as each new key comes (churn); and a
// take and release on a key with room (the common path).
func BenchmarkMemoryLeasesAt100k(b *testing.B) {
	const n = 100_000
	ctx := context.Background()
	fill := func(b *testing.B, now *time.Time) *MemoryLeases {
		m := NewMemoryLeases(n, func() time.Time { return *now })
		for i := range n {
			// Lease i expires at now + 1 h + i µs.
			if ok, _, _, err := m.Acquire(ctx, fmt.Sprint("key", i), "id", 10, time.Hour+time.Duration(i)*time.Microsecond); !ok || err != nil {
				b.Fatalf("fill %d: %v, %v", i, ok, err)
			}
		}
		return m
	}
	b.Run("full", func(b *testing.B) {
		now := time.Unix(1_780_000_000, 0)
		m := fill(b, &now)
		b.ReportAllocs()
		for b.Loop() {
			if ok, _, _, err := m.Acquire(ctx, "new", "id", 10, time.Hour); ok || err == nil {
				b.Fatalf("a full store: %v, %v; want an error", ok, err)
			}
		}
	})
	b.Run("churn", func(b *testing.B) {
		now := time.Unix(1_780_000_000, 0)
		m := fill(b, &now)
		now = now.Add(time.Hour)
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			// One more lease expires each µs; each new one, on a new key,
			// expires 100,000 µs on, when the store has turned over.
			now = now.Add(time.Microsecond)
			if ok, _, _, err := m.Acquire(ctx, strconv.Itoa(i), "id", 10, 100*time.Millisecond); !ok || err != nil {
				b.Fatalf("churn %d: %v, %v", i, ok, err)
			}
			i++
		}
	})
	b.Run("take-release", func(b *testing.B) {
		now := time.Unix(1_780_000_000, 0)
		m := NewMemoryLeases(2*n, func() time.Time { return now })
		for i := range n {
			m.Acquire(ctx, fmt.Sprint("key", i), "id", 10, time.Hour)
		}
		b.ReportAllocs()
		for b.Loop() {
			if ok, _, _, err := m.Acquire(ctx, "key7", "other", 10, 2*time.Hour); !ok || err != nil {
				b.Fatalf("%v, %v", ok, err)
			}
			m.Release(ctx, "key7", "other")
		}
	})
}
