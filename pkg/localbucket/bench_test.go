package localbucket

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The benchmarks hold now fixed, as callers' decisions on one instant would:
// after the first Burst requests a key is denied, which is the costlier branch
// (it computes RetryAfter).
var benchLimit = Limit{Rate: 100, Burst: 100}

func BenchmarkAllowNOneKey(b *testing.B) {
	bk := mustNew(b, Options{MaxKeys: 1024})
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		bk.AllowN("domain/descriptor/client-42", benchLimit, now, 1)
	}
}

// All workers on one key: one shard lock, the worst case for contention.
func BenchmarkAllowNOneKeyParallel(b *testing.B) {
	bk := mustNew(b, Options{MaxKeys: 1024})
	now := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			bk.AllowN("domain/descriptor/client-42", benchLimit, now, 1)
		}
	})
}

// Allow reads the clock: AllowN plus time.Now.
func BenchmarkAllowOneKey(b *testing.B) {
	bk := mustNew(b, Options{MaxKeys: 1024})
	b.ReportAllocs()
	for b.Loop() {
		bk.Allow("domain/descriptor/client-42", benchLimit, 1)
	}
}

const millionKeys = 1 << 20

// millionFixture is built once and shared: filling a million keys takes
// longer than the benchmarks that read it.
var millionFixture = sync.OnceValues(func() (*Buckets, []string) {
	// Room for twice the keys, so the hash spreading them over the shards
	// never overfills one and every benchmarked key stays held.
	bk, err := New(Options{MaxKeys: 2 * millionKeys})
	if err != nil {
		panic(err)
	}
	keys := make([]string, millionKeys)
	now := time.Now()
	for i := range keys {
		keys[i] = "domain/descriptor/client-" + strconv.Itoa(i)
		bk.AllowN(keys[i], benchLimit, now, 1)
	}
	return bk, keys
})

func millionKeysHeld(b *testing.B) (*Buckets, []string) {
	bk, keys := millionFixture()
	if n := bk.Len(); n != millionKeys {
		b.Fatalf("Len() = %d; want %d", n, millionKeys)
	}
	return bk, keys
}

func BenchmarkAllowNMillionKeys(b *testing.B) {
	bk, keys := millionKeysHeld(b)
	now := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		bk.AllowN(keys[i&(millionKeys-1)], benchLimit, now, 1)
	}
}

func BenchmarkAllowNMillionKeysParallel(b *testing.B) {
	bk, keys := millionKeysHeld(b)
	now := time.Now()
	var workers atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		// Workers start far apart in the key list, not in lockstep.
		for i := int(workers.Add(1)) * 7919 * 13; pb.Next(); i++ {
			bk.AllowN(keys[i&(millionKeys-1)], benchLimit, now, 1)
		}
	})
}

// Every request a new key into full shards of drained buckets: each costs an
// eviction and the copy of its key (the one allocation).
func BenchmarkAllowNNewKeysEvicting(b *testing.B) {
	bk := mustNew(b, Options{MaxKeys: 1 << 14})
	keys := make([]string, 1<<18)
	for i := range keys {
		keys[i] = "domain/descriptor/client-" + strconv.Itoa(i)
	}
	now := time.Now()
	for _, k := range keys[:1<<15] {
		bk.AllowN(k, benchLimit, now, benchLimit.Burst) // fill every shard, all drained
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		bk.AllowN(keys[i&(len(keys)-1)], benchLimit, now, benchLimit.Burst)
	}
}

// Sweep over DefaultMaxKeys buckets, none full: the cost of each call of the
// owner's timer when every key is live. It also reports the heap the
// buckets take per key (heap-B/key), store keys of the default prefix
// included.
func BenchmarkSweep(b *testing.B) {
	before := liveHeap()
	bk := mustNew(b, Options{})
	now := time.Now()
	fill(bk, DefaultMaxKeys, "sluice:", now)
	perKey := float64(liveHeap()-before) / DefaultMaxKeys
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if n := bk.Sweep(now); n != 0 {
			b.Fatalf("Sweep = %d; want 0", n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/DefaultMaxKeys, "ns/key")
	b.ReportMetric(perKey, "heap-B/key")
}
