package topkeys

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// heapInUse is the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// fill refuses, on each of limits limits and in each of minutes minutes,
// keys distinct keys of keyLen bytes (distinct in their first bytes, so a
// key cut short would collide).
func fill(tr *Tracker, c *clock, limits, minutes, keys, keyLen int) {
	pad := strings.Repeat("x", keyLen)
	for m := range minutes {
		for l := range limits {
			name := fmt.Sprint("limit-", l)
			for k := range keys {
				key := fmt.Sprintf("user=%d-%d-%d-", m, l, k)
				tr.Refused(name, key+pad[:max(keyLen-len(key), 0)])
			}
		}
		c.ns.Add(int64(time.Minute))
	}
}

// TestBudgetHeap: filled to its bound (1,000 limits, every minute kept,
// each sketch full, with keys of 2 KiB and of MaxKeyBytes, the longest
// kept as sent), the tracker's heap stays within its byte budget, the
// default's and a smaller one's. The finding: the bound was 1,000 limits ×
// 5 minutes × 64 keys of any length, 956 MiB for 2 KB keys.
func TestBudgetHeap(t *testing.T) {
	for _, tt := range []struct {
		name   string
		budget int64
		keyLen int
	}{
		{"default budget, 2 KiB keys", 0, 2048},
		{"default budget, MaxKeyBytes keys", 0, MaxKeyBytes},
		{"8 MiB, MaxKeyBytes keys", 8 << 20, MaxKeyBytes},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &clock{}
			c.ns.Store(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC).UnixNano())
			before := heapInUse()
			tr := New(Options{MaxBytes: tt.budget, Now: c.now})
			c.ns.Add(-int64(4 * time.Minute))
			fill(tr, c, 1000, 5, 64, tt.keyLen)
			c.ns.Add(-int64(time.Minute)) // the last minute filled is now
			after := heapInUse()
			budget := tt.budget
			if budget == 0 {
				budget = DefaultMaxBytes
			}
			grew := int64(after) - int64(before)
			t.Logf("heap grew %.1f MiB; the tracker accounts %.1f MiB of its %.1f MiB budget", float64(grew)/(1<<20), float64(tr.used.Load())/(1<<20), float64(budget)/(1<<20))
			if grew > budget {
				t.Errorf("heap grew %d bytes; want at most the budget, %d", grew, budget)
			}
			if used := tr.used.Load(); used < budget*9/10 {
				t.Errorf("the tracker holds %d bytes of its %d: the test did not fill it", used, budget)
			}
			// Full, it still counts every refusal: in a limit's total, or
			// as untracked when the limit itself found no room.
			refused := tr.Untracked()
			for _, l := range tr.Top(1) {
				refused += l.Refused
			}
			if want := int64(1000 * 5 * 64); refused != want {
				t.Errorf("%d refusals counted; want %d", refused, want)
			}
			runtime.KeepAlive(tr)
		})
	}
}

// TestLongKeysByDigest: a key longer than MaxKeyBytes is kept as a digest
// of the whole key, so two long keys alike in their first bytes stay two;
// a key of MaxKeyBytes is kept as sent.
func TestLongKeysByDigest(t *testing.T) {
	tr := New(Options{})
	a := strings.Repeat("a", 2048)
	at := strings.Repeat("b", MaxKeyBytes)
	tr.Refused("l", a+"1")
	tr.Refused("l", a+"2")
	tr.Refused("l", a+"2")
	tr.Refused("l", at)
	keys := tr.Top(10)[0].Keys
	if len(keys) != 3 {
		t.Fatalf("keys %+v; want 3", keys)
	}
	if !strings.HasPrefix(keys[0].Key, "sha256:") || keys[0].Count != 2 || len(keys[0].Key) > MaxKeyBytes {
		t.Errorf("the long key refused twice: %+v; want it by digest, counted 2", keys[0])
	}
	if keys[1].Key != at && keys[2].Key != at {
		t.Errorf("a key of MaxKeyBytes was not kept as sent: %+v", keys)
	}
	if keys[1].Key == keys[2].Key {
		t.Errorf("two long keys share a form: %+v", keys)
	}
}

// TestBudgetReclaimed: with the budget used up, refusals are counted in
// totals only (Limit.Unattributed); once the minutes holding the keys
// have passed, their bytes return and new keys are counted again, on any
// limit, without the old limit being refused again.
func TestBudgetReclaimed(t *testing.T) {
	c := &clock{}
	c.ns.Store(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC).UnixNano())
	tr := New(Options{MaxBytes: 1 << 20, Now: c.now})
	fill(tr, c, 100, 1, 64, MaxKeyBytes)
	c.ns.Add(-int64(time.Minute))
	untracked := tr.Untracked()
	tr.Refused("late", "user=late")
	if l := findLimit(tr.Top(5), "late"); l.Unattributed != 1 && tr.Untracked() != untracked+1 {
		t.Fatalf("the budget used up: late %+v, %d more untracked; want its refusal counted unattributed or untracked", l, tr.Untracked()-untracked)
	}
	c.ns.Add(int64(5 * time.Minute)) // every kept minute has passed
	tr.Refused("late", "user=late")
	l := findLimit(tr.Top(5), "late")
	if len(l.Keys) != 1 || l.Keys[0].Key != "user=late" {
		t.Errorf("after the minutes passed: %+v; want user=late counted", l)
	}
}

func findLimit(top []Limit, name string) Limit {
	for _, l := range top {
		if l.Limit == name {
			return l
		}
	}
	return Limit{}
}

// TestBusiest: the page's list is the limits that refused most, each with
// its top keys, and how many more limits refused.
func TestBusiest(t *testing.T) {
	tr := New(Options{})
	for l := range 30 {
		for k := range l + 1 {
			tr.Refused(fmt.Sprint("limit-", l), fmt.Sprint("k", k))
		}
	}
	top, more := tr.Busiest(20, 3)
	if len(top) != 20 || more != 10 {
		t.Fatalf("%d limits, %d more; want 20, 10 more", len(top), more)
	}
	for i, l := range top {
		if want := fmt.Sprint("limit-", 29-i); l.Limit != want || l.Refused != int64(30-i) || len(l.Keys) != 3 {
			t.Errorf("limit %d: %s, %d refused, %d keys; want %s, %d refused, 3 keys", i, l.Limit, l.Refused, len(l.Keys), want, 30-i)
		}
	}
}

// TestCostsBoundHeap: what the tracker charges its budget bounds the heap
// it takes, for sparse and full sketches, short and long keys.
func TestCostsBoundHeap(t *testing.T) {
	for _, tt := range []struct{ limits, minutes, keys, keyLen int }{
		{1000, 5, 1, 8},
		{1000, 5, 8, 100},
		{1000, 1, 9, 17},
		{500, 5, 57, MaxKeyBytes},
		{300, 5, 64, 2048},
	} {
		t.Run(fmt.Sprintf("%d limits × %d minutes × %d keys of %d bytes", tt.limits, tt.minutes, tt.keys, tt.keyLen), func(t *testing.T) {
			c := &clock{}
			c.ns.Store(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC).UnixNano())
			before := heapInUse()
			tr := New(Options{MaxBytes: 1 << 30, Now: c.now})
			fill(tr, c, tt.limits, tt.minutes, tt.keys, tt.keyLen)
			grew := int64(heapInUse()) - int64(before)
			used := tr.used.Load()
			t.Logf("heap grew %d KiB, charged %d KiB (%.2f)", grew>>10, used>>10, float64(grew)/float64(used))
			if grew > used {
				t.Errorf("heap grew %d bytes; the budget was charged %d", grew, used)
			}
			runtime.KeepAlive(tr)
		})
	}
}

// TestSweepReleasesMinutes: a full tracker's minutes give their bytes back
// at the owner's Sweep once they are no longer kept, read off the heap,
// without another refusal; the limits stay tracked and count again.
func TestSweepReleasesMinutes(t *testing.T) {
	c := &clock{}
	c.ns.Store(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC).UnixNano())
	const budget = 8 << 20
	before := heapInUse()
	tr := New(Options{MaxBytes: budget, Now: c.now})
	fill(tr, c, 100, 1, 64, MaxKeyBytes)
	full, filled := tr.used.Load(), heapInUse()
	tr.Sweep(c.now()) // the minute filled is still kept
	if tr.used.Load() != full {
		t.Fatalf("a sweep within the kept minutes gave back %d bytes", full-tr.used.Load())
	}
	c.ns.Add(int64(DefaultMinutes) * int64(time.Minute))
	tr.Sweep(c.now())
	swept := heapInUse()
	rings := int64(100) * ringBytes("limit-00", DefaultMinutes)
	t.Logf("accounted %d bytes full, %d swept; heap grew %d full, %d swept", full, tr.used.Load(), int64(filled)-int64(before), int64(swept)-int64(before))
	if tr.used.Load() > rings {
		t.Errorf("after the minutes passed, %d bytes held; want only the limits' rings, %d", tr.used.Load(), rings)
	}
	if grew := int64(swept) - int64(before); grew > 2*rings+(1<<20) {
		t.Errorf("heap still %d bytes over the start after the sweep; want about the rings, %d", grew, rings)
	}
	tr.Refused("limit-0", "user=next")
	if l := findLimit(tr.Top(1), "limit-0"); len(l.Keys) != 1 || l.Keys[0].Key != "user=next" {
		t.Errorf("a refusal after the sweep: %+v; want user=next counted", l)
	}
	runtime.KeepAlive(tr)
}
