package cache

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

const benchKeys = 1024 // a power of two, so i&(benchKeys-1) picks a key

func benchCache(b *testing.B, flag bool) (*OverLimit, []string, time.Time) {
	c, err := New(4 * benchKeys)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = "domain/descriptor/client-" + strconv.Itoa(i)
		if flag {
			c.Add(keys[i], now.Add(time.Hour))
		}
	}
	return c, keys, now
}

func benchUntil(b *testing.B, hit bool) {
	c, keys, now := benchCache(b, hit)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, ok := c.Until(keys[i&(benchKeys-1)], now); ok != hit {
			b.Fatalf("Until = %v; want %v", ok, hit)
		}
	}
}

func benchUntilParallel(b *testing.B, hit bool) {
	c, keys, now := benchCache(b, hit)
	b.ReportAllocs()
	b.ResetTimer()
	var workers atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		// Each worker starts elsewhere in the key list, so workers do not
		// march through the shards in lockstep.
		for i := int(workers.Add(1)) * 397; pb.Next(); i++ {
			if _, ok := c.Until(keys[i&(benchKeys-1)], now); ok != hit {
				b.Errorf("Until = %v; want %v", ok, hit)
				return
			}
		}
	})
}

func BenchmarkUntilHit(b *testing.B)          { benchUntil(b, true) }
func BenchmarkUntilMiss(b *testing.B)         { benchUntil(b, false) }
func BenchmarkUntilHitParallel(b *testing.B)  { benchUntilParallel(b, true) }
func BenchmarkUntilMissParallel(b *testing.B) { benchUntilParallel(b, false) }

// Add on a present key (the newest answer replacing a flag) allocates nothing;
// a new key costs one list entry and a key copy.
func BenchmarkAddExisting(b *testing.B) {
	c, keys, now := benchCache(b, true)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		c.Add(keys[i&(benchKeys-1)], now.Add(time.Hour))
	}
}

// A new key into a full cache: an eviction, and the copy of the key.
func BenchmarkAddNewEvicting(b *testing.B) {
	c, err := New(DefaultSize)
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, 4*DefaultSize)
	for i := range keys {
		keys[i] = storeKey("sluice:", i)
	}
	until := time.Now().Add(time.Hour)
	for _, k := range keys[:2*DefaultSize] {
		c.Add(k, until)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		c.Add(keys[i%len(keys)], until)
	}
}

// Sweep over a full cache of DefaultSize flags, none expired: the cost of
// each call of the owner's timer when every flag is live.
func BenchmarkSweep(b *testing.B) {
	c, err := New(DefaultSize)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	fill(c, DefaultSize, "sluice:", now.Add(time.Hour))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if n := c.Sweep(now); n != 0 {
			b.Fatalf("Sweep = %d; want 0", n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/DefaultSize, "ns/flag")
}
