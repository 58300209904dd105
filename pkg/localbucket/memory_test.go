package localbucket

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// storeKey returns the i-th key of the form the limiter builds (see
// pkg/limiter/key.go), which the local tier keys its buckets by:
// prefix + "{" + 32 hex digits + "}".
func storeKey(prefix string, i int) string {
	var buf [256]byte
	b := append(buf[:0], prefix...)
	b = append(b, '{')
	b = binary.BigEndian.AppendUint64(b, uint64(i)*0x9e3779b97f4a7c15)
	b = binary.BigEndian.AppendUint64(b, uint64(i))
	n := len(b) - 16
	b = hex.AppendEncode(b, b[n:])
	b = append(b[:n], b[n+16:]...)
	return string(append(b, '}'))
}

// longPrefix is a key prefix of 64 bytes, longer than any deployment needs.
var longPrefix = strings.Repeat("p", 63) + ":"

// nameBytes is what a key of n bytes takes on the heap: the allocator's size
// classes round strings of 32 to 256 bytes up to a multiple of 16.
func nameBytes(n int) int64 { return int64(n+15) &^ 15 }

// liveHeap returns the bytes of live heap objects, after collecting garbage.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// heapMargin is the slack the memory tests allow over the documented
// budget: a collection leaves a little of the test's own garbage behind.
const heapMargin = 1.05

// fillLimit is the limit fill's buckets are taken from: one token spent at a
// fixed instant, so none is full and none can be reclaimed.
var fillLimit = Limit{Rate: 1, Burst: 10}

// fill spends a token of distinct store keys' buckets at now until b holds
// maxKeys of them: the hash fills some shards before others, so that takes
// more than maxKeys keys.
func fill(b *Buckets, maxKeys int, prefix string, now time.Time) {
	i := 0
	for n := b.Len(); n < maxKeys; n = b.Len() {
		for range maxKeys - n {
			b.AllowN(storeKey(prefix, i), fillLimit, now, 1)
			i++
		}
	}
}

// TestHeapWithinBudget fills buckets to their bound with store keys and
// checks that the heap grew by at most the documented budget, KeyOverhead
// plus the key's own bytes per key, with heapMargin to spare. DefaultMaxKeys
// takes too long to fill under the race detector, so the per-key figure is
// what is checked: at 65,536 keys (1,024 a shard) and at 57,696, the size of
// those tried (2,000 to 2 million keys) where a key cost the most, just after
// the shards' maps grew. BenchmarkSweep reports the figure at DefaultMaxKeys.
func TestHeapWithinBudget(t *testing.T) {
	tests := []struct {
		maxKeys int
		prefix  string
	}{
		{1 << 16, "sluice:"},
		{1 << 16, longPrefix},
		{57696, "sluice:"},
	}
	for _, tt := range tests {
		keyLen := len(storeKey(tt.prefix, 0))
		t.Run(fmt.Sprintf("%d keys of %d bytes", tt.maxKeys, keyLen), func(t *testing.T) {
			before := liveHeap()
			b := mustNew(t, Options{MaxKeys: tt.maxKeys})
			fill(b, tt.maxKeys, tt.prefix, time.Now())
			grown := liveHeap() - before
			perKey := KeyOverhead + nameBytes(keyLen)
			budget := int64(tt.maxKeys) * perKey
			t.Logf("heap grew %d bytes, %.1f per key; budget %d per key",
				grown, float64(grown)/float64(tt.maxKeys), perKey)
			if float64(grown) > float64(budget)*heapMargin {
				t.Errorf("heap grew %d bytes for %d keys of %d bytes; want <= %d (%d per key) + %.0f%%",
					grown, tt.maxKeys, keyLen, budget, perKey, (heapMargin-1)*100)
			}
			runtime.KeepAlive(b)
		})
	}
}

// Once every bucket has refilled, one Sweep gives the memory back: the
// keys, the shards' slots and maps.
func TestSweepReleasesMemory(t *testing.T) {
	const maxKeys = 1 << 16
	before := liveHeap()
	b := mustNew(t, Options{MaxKeys: maxKeys})
	t0 := time.Now()
	fill(b, maxKeys, longPrefix, t0)
	full := liveHeap() - before
	refilled := t0.Add(time.Second) // one token at 1 a second
	if n := b.Sweep(refilled); n != maxKeys {
		t.Fatalf("Sweep(t0+1s) = %d; want %d", n, maxKeys)
	}
	left := liveHeap() - before
	t.Logf("heap: %d bytes full, %d after Sweep", full, left)
	if left > full/20 {
		t.Errorf("after Sweep dropped every bucket the heap holds %d of the %d bytes the full buckets held; want <= 5%%", left, full)
	}
	// The shards, emptied and remade, take new keys again.
	fill(b, maxKeys, "again:", refilled)
	runtime.KeepAlive(b)
}
