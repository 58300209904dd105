package localbucket

import (
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

func mustNew(t testing.TB, opts Options) *Buckets {
	t.Helper()
	b, err := New(opts)
	if err != nil {
		t.Fatalf("New(%+v) = %v", opts, err)
	}
	return b
}

func TestNewOptions(t *testing.T) {
	tests := []struct {
		opts       Options
		wantErr    bool
		wantShards int
	}{
		{opts: Options{}, wantShards: DefaultShards},
		{opts: Options{MaxKeys: -1}, wantErr: true},
		{opts: Options{MaxKeys: 100, Shards: 3}, wantErr: true},
		{opts: Options{MaxKeys: 100, Shards: -4}, wantErr: true},
		{opts: Options{MaxKeys: 1 << 20}, wantShards: DefaultShards},
		{opts: Options{MaxKeys: 100, Shards: 8}, wantShards: 8},
		{opts: Options{MaxKeys: 5}, wantShards: 4},
		{opts: Options{MaxKeys: 1, Shards: 16}, wantShards: 1},
	}
	for _, tt := range tests {
		b, err := New(tt.opts)
		if (err != nil) != tt.wantErr {
			t.Errorf("New(%+v) error = %v; want error %v", tt.opts, err, tt.wantErr)
			continue
		}
		if err == nil && len(b.shards) != tt.wantShards {
			t.Errorf("New(%+v) has %d shards; want %d", tt.opts, len(b.shards), tt.wantShards)
		}
	}
}

func TestShardPadding(t *testing.T) {
	if size := unsafe.Sizeof(shard{}); size%128 != 0 {
		t.Errorf("sizeof(shard) = %d; want a multiple of 128 (update the padding)", size)
	}
}

func TestKeysAreIndependent(t *testing.T) {
	// One shard: with 100 keys over 64 shards, a shard holds one or two,
	// and two keys in one shard of one would evict each other.
	b := mustNew(t, Options{MaxKeys: 100, Shards: 1})
	lim := Limit{Rate: 1, Burst: 2}
	now := time.Now()
	for range 2 {
		if d := b.AllowN("a", lim, now, 1); !d.Allowed {
			t.Fatalf("AllowN(a) = %+v; want allowed", d)
		}
	}
	if d := b.AllowN("a", lim, now, 1); d.Allowed || d.RetryAfter != time.Second {
		t.Errorf("AllowN(a) = %+v; want denied, retry 1s", d)
	}
	if d := b.AllowN("b", lim, now, 1); !d.Allowed || d.Remaining != 1 {
		t.Errorf("AllowN(b) = %+v; want allowed, 1 remaining", d)
	}
	if d := b.AllowN("a", lim, now.Add(time.Second), 1); !d.Allowed {
		t.Errorf("AllowN(a, +1s) = %+v; want allowed", d)
	}
	if got := b.Len(); got != 2 {
		t.Errorf("Len() = %d; want 2", got)
	}
}

// A wall-clock step in the times passed in changes nothing when they carry a
// monotonic reading, as time.Now's do.
func TestMonotonicReading(t *testing.T) {
	b := mustNew(t, Options{MaxKeys: 10})
	lim := Limit{Rate: 1, Burst: 1}
	now := time.Now()
	b.AllowN("k", lim, now, 1)
	// now.Add keeps the monotonic reading; the wall clock "jumping" an hour
	// ahead would not show in Sub.
	if d := b.AllowN("k", lim, now.Add(time.Millisecond), 1); d.Allowed {
		t.Errorf("AllowN 1ms later = %+v; want denied", d)
	}
}

func TestMemoryIsBounded(t *testing.T) {
	lim := Limit{Rate: 1, Burst: 10}
	for _, opts := range []Options{
		{MaxKeys: 1},
		{MaxKeys: 7, Shards: 1},
		{MaxKeys: 100},
		{MaxKeys: 1000, Shards: 16},
		{MaxKeys: 4096},
	} {
		t.Run(strconv.Itoa(opts.MaxKeys), func(t *testing.T) {
			b := mustNew(t, opts)
			now := time.Now()
			for i := range 10 * opts.MaxKeys {
				// Drained buckets at a fixed now: nothing is full, every
				// insertion into a full shard must evict.
				b.AllowN("client-"+strconv.Itoa(i), lim, now, 10)
				if got := b.Len(); got > opts.MaxKeys {
					t.Fatalf("after %d keys Len() = %d; want <= %d", i+1, got, opts.MaxKeys)
				}
			}
		})
	}
}

// probe reads key's remaining tokens without spending any.
func probe(b *Buckets, key string, lim Limit, now time.Time) float64 {
	return b.AllowN(key, lim, now, 0).Remaining
}

func TestFullBucketsAreReclaimedFirst(t *testing.T) {
	b := mustNew(t, Options{MaxKeys: 3, Shards: 1})
	slow := Limit{Rate: 0, Burst: 5}    // never refills
	fast := Limit{Rate: 1000, Burst: 5} // full again 5 ms after draining
	now := time.Now()
	b.AllowN("slow-1", slow, now, 5)
	b.AllowN("slow-2", slow, now, 5)
	b.AllowN("fast", fast, now, 5)
	b.AllowN("slow-1", slow, now, 0) // used: the clock would spare it anyway
	later := now.Add(time.Second)
	b.AllowN("new", slow, later, 1) // must take the slot of the full "fast" bucket
	for _, key := range []string{"slow-1", "slow-2"} {
		if got := probe(b, key, slow, later); got != 0 {
			t.Errorf("%s has %v tokens; want 0 (evicted instead of a full bucket)", key, got)
		}
	}
	if got := probe(b, "new", slow, later); got != 4 {
		t.Errorf("new has %v tokens; want 4", got)
	}
	if got := b.Len(); got != 3 {
		t.Errorf("Len() = %d; want 3", got)
	}
}

func TestFullBucketsAreReclaimedBeforeGrowing(t *testing.T) {
	b := mustNew(t, Options{MaxKeys: 100, Shards: 1})
	lim := Limit{Rate: 1000, Burst: 1}
	now := time.Now()
	for i := range 1000 {
		// Each key is full again 1 ms after its one request.
		b.AllowN("once-"+strconv.Itoa(i), lim, now.Add(time.Duration(i)*time.Second), 1)
	}
	if got := b.Len(); got > 2 {
		t.Errorf("Len() = %d after one-off keys that refill; want <= 2", got)
	}
}

func TestClockEvictsUnusedFirst(t *testing.T) {
	b := mustNew(t, Options{MaxKeys: 3, Shards: 1})
	lim := Limit{Burst: 5} // never refills, so never full
	now := time.Now()
	for _, key := range []string{"a", "b", "c"} {
		b.AllowN(key, lim, now, 5)
	}
	b.AllowN("a", lim, now, 0)
	b.AllowN("c", lim, now, 0)
	b.AllowN("d", lim, now, 5) // evicts b, the one not used since insertion
	for _, key := range []string{"a", "c", "d"} {
		if got := probe(b, key, lim, now); got != 0 {
			t.Errorf("%s has %v tokens; want 0 (kept)", key, got)
		}
	}
	if got := probe(b, "b", lim, now); got != 5 {
		t.Errorf("b has %v tokens; want 5 (evicted, back as a full bucket)", got)
	}
}

// One-off keys evict each other, not the keys in steady use.
func TestScanResistance(t *testing.T) {
	b := mustNew(t, Options{MaxKeys: 10, Shards: 1})
	lim := Limit{Burst: 1}
	now := time.Now()
	hot := []string{"h0", "h1", "h2", "h3", "h4"}
	for _, key := range hot {
		b.AllowN(key, lim, now, 1)
	}
	for i := range 1000 {
		for _, key := range hot {
			if got := probe(b, key, lim, now); got != 0 {
				t.Fatalf("after %d one-off keys %s has %v tokens; want 0 (kept)", i, key, got)
			}
		}
		b.AllowN("scan-"+strconv.Itoa(i), lim, now, 1)
	}
}

func TestAllowNDoesNotAllocate(t *testing.T) {
	b := mustNew(t, Options{MaxKeys: 1000})
	lim := Limit{Rate: 10, Burst: 10}
	now := time.Now()
	key := "domain/descriptor/client-42"
	b.AllowN(key, lim, now, 1)
	if n := testing.AllocsPerRun(1000, func() { b.AllowN(key, lim, now, 1) }); n != 0 {
		t.Errorf("AllowN on a held key allocates %v times; want 0", n)
	}
	if n := testing.AllocsPerRun(1000, func() { b.Allow(key, lim, 1) }); n != 0 {
		t.Errorf("Allow on a held key allocates %v times; want 0", n)
	}
}

// Run under -race: one key's decisions are atomic, so parallel callers on a
// bucket that never refills admit exactly its burst.
func TestConcurrentCallersShareOneBucket(t *testing.T) {
	b := mustNew(t, Options{MaxKeys: 8})
	lim := Limit{Burst: 100}
	now := time.Now()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				if b.AllowN("one", lim, now, 1).Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if got := admitted.Load(); got != 100 {
		t.Errorf("parallel callers admitted %d on a bucket of 100; want 100", got)
	}
}

// Run under -race: many goroutines, more keys than room, eviction on every
// shard.
func TestConcurrentChurn(t *testing.T) {
	const maxKeys = 32
	b := mustNew(t, Options{MaxKeys: maxKeys, Shards: 4})
	lim := Limit{Rate: 100, Burst: 5}
	t0 := time.Now()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 5000 {
				now := t0.Add(time.Duration(i) * time.Millisecond)
				b.AllowN("k"+strconv.Itoa((g*1000+i)%200), lim, now, 1)
				if i%100 == 0 && b.Len() > maxKeys {
					t.Errorf("Len() = %d; want <= %d", b.Len(), maxKeys)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestReturnN(t *testing.T) {
	b := mustNew(t, Options{MaxKeys: 10})
	lim := Limit{Rate: 1, Burst: 3}
	now := time.Now()
	b.AllowN("k", lim, now, 3)
	b.ReturnN("k", lim, now, 2)
	if d := b.AllowN("k", lim, now, 0); d.Remaining != 2 {
		t.Fatalf("after taking 3 and returning 2: Remaining = %v; want 2", d.Remaining)
	}
	// Capped at the burst, also counting the refill since the take.
	b.ReturnN("k", lim, now.Add(500*time.Millisecond), 5)
	if d := b.AllowN("k", lim, now.Add(500*time.Millisecond), 0); d.Remaining != 3 {
		t.Errorf("returning past the burst: Remaining = %v; want 3", d.Remaining)
	}
	// Nothing for nothing, and nothing for a key not held.
	b.AllowN("k", lim, now.Add(time.Second), 3)
	for _, n := range []float64{0, -1, math.NaN()} {
		b.ReturnN("k", lim, now.Add(time.Second), n)
	}
	if d := b.AllowN("k", lim, now.Add(time.Second), 0); d.Remaining != 0 {
		t.Errorf("after ReturnN of 0, -1 and NaN: Remaining = %v; want 0", d.Remaining)
	}
	b.ReturnN("other", lim, now, 1)
	if b.Len() != 1 {
		t.Errorf("ReturnN on a key not held added it: Len() = %d; want 1", b.Len())
	}
	if avg := testing.AllocsPerRun(100, func() { b.ReturnN("k", lim, now, 1) }); avg != 0 {
		t.Errorf("ReturnN allocates %v times per call; want 0", avg)
	}
}
