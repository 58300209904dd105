package topkeys

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

type clock struct{ ns atomic.Int64 }

func (c *clock) now() time.Time { return time.Unix(0, c.ns.Load()) }

// TestTopOnZipf: on a Zipf trace of refusals the reported top keys are
// the true top keys, each count within the sketch's stated error of the
// truth (at most the minute's refusals over its size).
func TestTopOnZipf(t *testing.T) {
	c := &clock{}
	c.ns.Store(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC).UnixNano())
	tr := New(Options{Size: 64, Now: c.now})
	rng := rand.New(rand.NewPCG(1, 2))
	z := rand.NewZipf(rng, 1.2, 1, 99_999)
	truth := map[string]int64{}
	const n = 200_000
	for range n {
		k := fmt.Sprint("client-", z.Uint64())
		truth[k]++
		tr.Refused("per-client", k)
	}
	top := tr.Top(10)
	if len(top) != 1 || top[0].Refused != n {
		t.Fatalf("top: %+v", top)
	}
	bound := int64(math.Ceil(float64(n) / 64))
	for i, k := range top[0].Keys {
		if k.Count < truth[k.Key] || k.Count-truth[k.Key] > k.Error || k.Error > bound {
			t.Errorf("key %d %s: reported %d (error %d), truly %d; want truth ≤ reported ≤ truth + error ≤ truth + %d", i, k.Key, k.Count, k.Error, truth[k.Key], bound)
		}
		if want := fmt.Sprint("client-", i); k.Key != want {
			t.Errorf("key %d is %s; want %s, the %d-th most refused", i, k.Key, want, i+1)
		}
	}
}

// TestMemoryFlat: a million distinct refused keys take no more memory
// than a few thousand.
func TestMemoryFlat(t *testing.T) {
	c := &clock{}
	c.ns.Store(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC).UnixNano())
	tr := New(Options{Now: c.now})
	heapAfter := func(n, from int) uint64 {
		for i := range n {
			tr.Refused("per-client", fmt.Sprint("client-", from+i))
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	small := heapAfter(5_000, 0)
	large := heapAfter(1_000_000, 5_000)
	if large > small+1<<20 {
		t.Errorf("heap %d KiB after 5,000 keys, %d KiB after 1,005,000: not flat", small>>10, large>>10)
	}
	t.Logf("heap %d KiB after 5,000 keys, %d KiB after 1,005,000", small>>10, large>>10)
}

// TestMinutesRoll: refusals older than the kept minutes drop out.
func TestMinutesRoll(t *testing.T) {
	c := &clock{}
	c.ns.Store(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC).UnixNano())
	tr := New(Options{Minutes: 2, Now: c.now})
	tr.Refused("l", "old")
	c.ns.Add(int64(time.Minute))
	tr.Refused("l", "new")
	if top := tr.Top(5); len(top) != 1 || top[0].Refused != 2 {
		t.Fatalf("two minutes kept: %+v", top)
	}
	c.ns.Add(int64(time.Minute))
	if top := tr.Top(5); len(top) != 1 || top[0].Refused != 1 || top[0].Keys[0].Key != "new" {
		t.Fatalf("after the old minute left: %+v", top)
	}
}

// TestConcurrentFlood: refusals from many goroutines at once never wait
// on each other; the total stays exact, the heaviest hitter stays first,
// and every count's guaranteed part (Count − Error) is at most the truth.
func TestConcurrentFlood(t *testing.T) {
	tr := New(Options{})
	const workers, each = 8, 50_000
	truth := make([]map[string]int64, workers)
	done := make(chan struct{})
	for w := range workers {
		truth[w] = map[string]int64{}
		go func() {
			defer func() { done <- struct{}{} }()
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			for range each {
				k := "client-0" // half the flood is one client
				if rng.IntN(2) == 0 {
					k = fmt.Sprint("client-", 1+rng.IntN(10_000))
				}
				truth[w][k]++
				tr.Refused("per-client", k)
			}
		}()
	}
	for range workers {
		<-done
	}
	all := map[string]int64{}
	for _, m := range truth {
		for k, n := range m {
			all[k] += n
		}
	}
	top := tr.Top(5)
	if len(top) != 1 || top[0].Refused != workers*each {
		t.Fatalf("top: %+v; want %d refusals", top, workers*each)
	}
	if top[0].Keys[0].Key != "client-0" {
		t.Errorf("first key %s; want client-0, half the flood", top[0].Keys[0].Key)
	}
	for _, k := range top[0].Keys {
		if k.Count-k.Error > all[k.Key] {
			t.Errorf("%s: count %d, error %d, truly %d: the guaranteed part exceeds the truth", k.Key, k.Count, k.Error, all[k.Key])
		}
	}
	t.Logf("%d refusals, %d sampled; client-0 counted %d (error %d), truly %d", top[0].Refused, top[0].Sampled, top[0].Keys[0].Count, top[0].Keys[0].Error, all["client-0"])
}
