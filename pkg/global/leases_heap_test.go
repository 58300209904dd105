package global

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMemoryLeasesHeapBound fills a MemoryLeases to its default bound in
// its costliest shape (every lease on a key of its own, keys and ids at
// their longest) and reads the heap after a GC: within the documented
// DefaultMaxLeases × MaxLeaseBytes. One lease more is refused.
func TestMemoryLeasesHeapBound(t *testing.T) {
	ctx := context.Background()
	clock := time.Unix(1_780_000_000, 0)
	keyPad := strings.Repeat("k", maxLeaseKeyLen-10)
	idPad := strings.Repeat("i", maxLeaseIDLen-10)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m := NewMemoryLeases(0, func() time.Time { return clock })
	for i := range DefaultMaxLeases {
		key, id := fmt.Sprintf("%s%010d", keyPad, i), fmt.Sprintf("%s%010d", idPad, i)
		if ok, _, _, err := m.Acquire(ctx, key, id, maxLeaseLimit, time.Hour); !ok || err != nil {
			t.Fatalf("lease %d of %d: %v, %v", i+1, DefaultMaxLeases, ok, err)
		}
	}
	if ok, _, _, err := m.Acquire(ctx, "one-more", "id", 1, time.Hour); ok || err == nil {
		t.Fatalf("past the bound: %v, %v; want refused with an error", ok, err)
	}
	check := func(when string) {
		t.Helper()
		runtime.GC()
		runtime.ReadMemStats(&after)
		used := int64(after.HeapAlloc) - int64(before.HeapAlloc)
		bound := int64(DefaultMaxLeases * MaxLeaseBytes)
		t.Logf("%s: %d leases at their longest: %d bytes of heap (%d a lease); bound %d (%d a lease)",
			when, DefaultMaxLeases, used, used/DefaultMaxLeases, bound, MaxLeaseBytes)
		if used > bound {
			t.Errorf("%s: heap grew by %d bytes holding %d leases; the documented bound is %d", when, used, DefaultMaxLeases, bound)
		}
	}
	check("filled")
	// Churn: every lease expires and a new one on a new key takes its
	// room, twice over; the maps' deleted slots and the heaps must not
	// grow the store past its bound.
	for round := 1; round <= 2; round++ {
		clock = clock.Add(time.Hour)
		for i := range DefaultMaxLeases {
			key, id := fmt.Sprintf("%s%05d%05d", keyPad, round, i), fmt.Sprintf("%s%010d", idPad, i)
			if ok, _, _, err := m.Acquire(ctx, key, id, maxLeaseLimit, time.Hour); !ok || err != nil {
				t.Fatalf("round %d, lease %d: %v, %v", round, i+1, ok, err)
			}
		}
	}
	check("after two rounds of churn")
	// One key that held 10,000 leases and holds one keeps no room for the
	// other 9,999.
	clock = clock.Add(time.Hour)
	for i := range maxLeaseLimit {
		if ok, _, _, err := m.Acquire(ctx, "wide", fmt.Sprint(i), maxLeaseLimit, time.Hour); !ok || err != nil {
			t.Fatalf("wide key, lease %d: %v, %v", i+1, ok, err)
		}
	}
	for i := 1; i < maxLeaseLimit; i++ {
		m.Release(ctx, "wide", fmt.Sprint(i))
	}
	if k := m.keys["wide"]; len(k.leases.s) != 1 || cap(k.leases.s) > 4 {
		t.Errorf("a key down to 1 lease of 10,000 keeps a heap of capacity %d; want at most 4", cap(k.leases.s))
	}
	runtime.KeepAlive(m)
}

// TestMemoryLeasesSweep: expired leases leave without a full store: on
// the owner's timer (Sweep), the heap back to what an empty store takes,
// and as leases are taken, two expired ones for each taken.
func TestMemoryLeasesSweep(t *testing.T) {
	ctx := context.Background()
	clock := time.Unix(1_780_000_000, 0)
	m := NewMemoryLeases(0, func() time.Time { return clock })
	fill := func(prefix string, n int) {
		t.Helper()
		for i := range n {
			if ok, _, _, err := m.Acquire(ctx, fmt.Sprint(prefix, i), "id", 1, time.Second); !ok || err != nil {
				t.Fatalf("lease %d: %v, %v", i, ok, err)
			}
		}
	}
	var before, filled, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fill("key-", 50_000)
	runtime.GC()
	runtime.ReadMemStats(&filled)
	if n := m.Sweep(clock); n != 0 {
		t.Fatalf("a sweep before any lease expired dropped %d", n)
	}
	clock = clock.Add(2 * time.Second)
	if n := m.Sweep(clock); n != 50_000 || len(m.keys) != 0 || len(m.ids) != 0 || len(m.byExpiry.s) != 0 {
		t.Fatalf("the sweep after every lease expired dropped %d, left %d keys, %d ids, %d in the heap; want 50,000 and none", n, len(m.keys), len(m.ids), len(m.byExpiry.s))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	grew, left := int64(filled.HeapAlloc)-int64(before.HeapAlloc), int64(after.HeapAlloc)-int64(before.HeapAlloc)
	t.Logf("50,000 leases: heap grew %d bytes; %d left after the sweep (the maps' and heap's room)", grew, left)
	if left > grew/2 {
		t.Errorf("after the sweep %d of the %d bytes remain; want most given back", left, grew)
	}
	// Taken as others expire: each acquire drops two expired leases.
	fill("a-", 1000)
	clock = clock.Add(2 * time.Second)
	fill("b-", 500)
	if len(m.ids) != 500 {
		t.Errorf("500 acquires after 1,000 leases expired leave %d leases; want the 500 new ones", len(m.ids))
	}
	runtime.KeepAlive(m)
}
