package lrumap

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
)

func set(m *Map[int], key string, v int, size int64) {
	m.Update(key, func(p *int, _ bool) int64 { *p = v; return size })
}

func get(m *Map[int], key string) (v int, ok bool) {
	ok = m.Get(key, func(p *int) { v = *p })
	return v, ok
}

func TestUpdateKeepsAndDrops(t *testing.T) {
	m, err := New[int](Options{MaxBytes: 1 << 20, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	set(m, "a", 1, 0)
	m.Update("a", func(p *int, found bool) int64 {
		if !found || *p != 1 {
			t.Errorf("Update(a) saw %d, found %v; want 1, true", *p, found)
		}
		*p = 2
		return 0
	})
	if v, ok := get(m, "a"); !ok || v != 2 {
		t.Errorf("Get(a) = %d, %v; want 2, true", v, ok)
	}
	m.Update("a", func(*int, bool) int64 { return -1 })
	if _, ok := get(m, "a"); ok || m.Len() != 0 || m.Bytes() != 0 {
		t.Errorf("after a drop: held %v, Len %d, Bytes %d; want nothing", ok, m.Len(), m.Bytes())
	}
	m.Update("b", func(*int, bool) int64 { return -1 }) // a new key dropped at once is never held
	if m.Len() != 0 {
		t.Errorf("Len = %d after dropping a new key; want 0", m.Len())
	}
}

// TestDelete: Delete drops a key held, and its bytes, and allocates
// nothing for a key not held.
func TestDelete(t *testing.T) {
	m, err := New[int](Options{MaxBytes: 1 << 20, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	set(m, "a", 1, 10)
	if !m.Delete("a") || m.Len() != 0 || m.Bytes() != 0 {
		t.Errorf("Delete(a): %d keys, %d bytes left; want none", m.Len(), m.Bytes())
	}
	if _, ok := get(m, "a"); ok {
		t.Error("a still held")
	}
	if m.Delete("a") {
		t.Error("Delete of a key not held reported true")
	}
	if n := testing.AllocsPerRun(100, func() { m.Delete("absent") }); n != 0 {
		t.Errorf("Delete of a key not held: %v allocations; want 0", n)
	}
}

func TestBoundsDropLeastRecentlyUsed(t *testing.T) {
	per := KeyOverhead[int]() + nameBytes(1)
	m, err := New[int](Options{MaxBytes: 4*per + 100, MaxKeys: 3, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range []string{"a", "b", "c"} {
		set(m, k, i, 0)
	}
	get(m, "a") // Get does not refresh
	set(m, "a", 9, 0)
	set(m, "d", 3, 0) // over MaxKeys: b, the least recently used, goes
	if _, ok := get(m, "b"); ok {
		t.Error("b held; want it dropped as the least recently used")
	}
	set(m, "e", 4, 2*per+50) // over MaxBytes: c and a go, not e itself
	for _, k := range []string{"c", "a"} {
		if _, ok := get(m, k); ok {
			t.Errorf("%s held after a large key came; want dropped", k)
		}
	}
	if m.Bytes() > 4*per+100 {
		t.Errorf("Bytes = %d; want at most %d", m.Bytes(), 4*per+100)
	}
	set(m, "huge", 5, 1<<30) // larger than the bound: held alone
	if v, ok := get(m, "huge"); !ok || v != 5 || m.Len() != 1 {
		t.Errorf("a key past the bound: held %v, Len %d; want held alone", ok, m.Len())
	}
}

func TestSweepStopsAtFirstKept(t *testing.T) {
	m, _ := New[int](Options{MaxBytes: 1 << 20, Shards: 1})
	for i := range 10 {
		set(m, fmt.Sprint(i), i, 0)
	}
	set(m, "2", 2, 0) // 2 is now the newest
	dropped := m.Sweep(func(v *int) bool { return *v < 5 })
	// From the oldest: 0 and 1 go, then 3 and 4; 5 stops the sweep.
	if dropped != 4 || m.Len() != 6 {
		t.Errorf("Sweep dropped %d, Len %d; want 4 and 6", dropped, m.Len())
	}
	if _, ok := get(m, "2"); !ok {
		t.Error("2, touched last, was swept")
	}
}

func TestConcurrentUpdates(t *testing.T) {
	m, _ := New[int](Options{MaxBytes: 1 << 20, MaxKeys: 100})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				m.Update(fmt.Sprint(i%150), func(p *int, _ bool) int64 { *p += g; return 8 })
			}
		})
	}
	wg.Wait()
	if m.Len() > 100 {
		t.Errorf("Len = %d; want at most MaxKeys 100", m.Len())
	}
}

// The byte bound holds in the heap: a map filled far past its bound holds
// no more than the bound (plus the empty map's own shards and their maps'
// spare groups, within a small factor).
func TestHeapWithinBound(t *testing.T) {
	if testing.Short() {
		t.Skip("fills 1M keys")
	}
	const bound = 16 << 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m, _ := New[[2]int64](Options{MaxBytes: bound})
	for i := range 1_000_000 {
		m.Update(fmt.Sprintf("key-%032d", i), func(p *[2]int64, _ bool) int64 { p[0] = int64(i); return 0 })
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	if m.Bytes() > bound {
		t.Errorf("Bytes = %d; want at most %d", m.Bytes(), bound)
	}
	if heap > bound*5/4 {
		t.Errorf("heap grew %d bytes for a %d-byte bound (%d keys held)", heap, bound, m.Len())
	}
	t.Logf("heap %d bytes, counted %d, %d keys", heap, m.Bytes(), m.Len())
	runtime.KeepAlive(m)
}
