package cache

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
// pkg/limiter/key.go): prefix + "{" + 32 hex digits + "}".
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
	runtime.GC() // a second cycle frees what the first one's finalizers released
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// fill adds flags for distinct store keys until c holds size of them: the
// hash fills some shards before others, so that takes more than size keys.
func fill(c *OverLimit, size int, prefix string, until time.Time) {
	i := 0
	for n := c.Len(); n < size; n = c.Len() {
		for range size - n {
			c.Add(storeKey(prefix, i), until)
			i++
		}
	}
}

// heapMargin is the slack the memory tests allow over the documented
// budget: a collection leaves a little of the test's own garbage behind.
const heapMargin = 1.05

// TestHeapWithinBudget fills a cache to its bound with store keys and checks
// that the heap grew by at most the documented budget, KeyOverhead plus the
// key's own bytes per key, with heapMargin to spare: at DefaultSize, the
// figure the README states, and at 14,726, the size of those tried (2,000 to
// 200,000 keys) where a flag cost the most, just after the shards' maps grew.
func TestHeapWithinBudget(t *testing.T) {
	tests := []struct {
		size   int
		prefix string
	}{
		{DefaultSize, "sluice:"},
		{DefaultSize, longPrefix},
		{14726, "sluice:"},
	}
	for _, tt := range tests {
		keyLen := len(storeKey(tt.prefix, 0))
		t.Run(fmt.Sprintf("%d keys of %d bytes", tt.size, keyLen), func(t *testing.T) {
			before := liveHeap()
			c, err := New(tt.size)
			if err != nil {
				t.Fatal(err)
			}
			fill(c, tt.size, tt.prefix, time.Now().Add(time.Hour))
			grown := liveHeap() - before
			perKey := KeyOverhead + nameBytes(keyLen)
			budget := int64(tt.size) * perKey
			t.Logf("heap grew %d bytes, %.1f per key; budget %d per key",
				grown, float64(grown)/float64(tt.size), perKey)
			if float64(grown) > float64(budget)*heapMargin {
				t.Errorf("heap grew %d bytes for %d keys of %d bytes; want <= %d (%d per key) + %.0f%%",
					grown, tt.size, keyLen, budget, perKey, (heapMargin-1)*100)
			}
			runtime.KeepAlive(c)
		})
	}
}

// After every flag has expired, one Sweep gives the memory back: the
// entries, the keys and the shards' maps.
func TestSweepReleasesMemory(t *testing.T) {
	const size = 1 << 16
	before := liveHeap()
	c, err := New(size)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	fill(c, size, longPrefix, t0.Add(time.Second))
	full := liveHeap() - before
	if n := c.Sweep(t0.Add(time.Second)); n != size {
		t.Fatalf("Sweep(t0+1s) = %d; want %d", n, size)
	}
	left := liveHeap() - before
	t.Logf("heap: %d bytes full, %d after Sweep", full, left)
	if left > full/20 {
		t.Errorf("after Sweep dropped every flag the heap holds %d of the %d bytes the full cache held; want <= 5%%", left, full)
	}
	runtime.KeepAlive(c)
}
