package localbucket

import (
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"
)

func TestSweep(t *testing.T) {
	t0 := time.Now()
	perSec := Limit{Rate: 1, Burst: 2} // refills a token a second
	never := Limit{Burst: 2}           // never refills
	type spend struct {
		key string
		lim Limit
		n   float64
	}
	tests := []struct {
		name   string
		spends []spend            // at t0
		at     time.Duration      // Sweep's now, from t0
		want   int                // dropped
		kept   map[string]float64 // key → tokens left at t0+at
	}{
		{name: "empty", at: time.Hour},
		{name: "untouched is full", spends: []spend{{"a", perSec, 0}}, at: 0, want: 1},
		{name: "spent", spends: []spend{{"a", perSec, 1}}, at: 0, kept: map[string]float64{"a": 1}},
		{name: "refilling", spends: []spend{{"a", perSec, 2}}, at: 1500 * time.Millisecond, kept: map[string]float64{"a": 1.5}},
		{name: "refilled", spends: []spend{{"a", perSec, 2}}, at: 2 * time.Second, want: 1},
		{name: "never refills", spends: []spend{{"a", never, 1}}, at: time.Hour, kept: map[string]float64{"a": 1}},
		{name: "denied request spends nothing", spends: []spend{{"a", perSec, 3}}, at: 0, want: 1},
		{
			name:   "some of many",
			spends: []spend{{"a", perSec, 1}, {"b", perSec, 2}, {"c", never, 2}, {"d", perSec, 0}},
			at:     time.Second, want: 2, kept: map[string]float64{"b": 1, "c": 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := mustNew(t, Options{MaxKeys: 64, Shards: 1}) // one shard: no key evicts another
			lims := map[string]Limit{}
			for _, s := range tt.spends {
				b.AllowN(s.key, s.lim, t0, s.n)
				lims[s.key] = s.lim
			}
			now := t0.Add(tt.at)
			if got := b.Sweep(now); got != tt.want {
				t.Errorf("Sweep(t0+%v) = %d; want %d", tt.at, got, tt.want)
			}
			if got := b.Len(); got != len(tt.kept) {
				t.Errorf("Len() = %d after Sweep; want %d", got, len(tt.kept))
			}
			for key, tokens := range tt.kept {
				if got := probe(b, key, lims[key], now); got != tokens {
					t.Errorf("%s has %v tokens after Sweep; want %v", key, got, tokens)
				}
			}
		})
	}
}

// A full bucket is in the state of a key never seen, so dropping it changes
// no answer: buckets swept at random instants decide a random sequence of
// requests exactly as buckets never swept, as long as the clock moves
// forward and each key keeps its limit.
func TestSweepChangesNoAnswer(t *testing.T) {
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 0x5eed))
		swept := mustNew(t, Options{MaxKeys: 1000, Shards: 4})
		kept := mustNew(t, Options{MaxKeys: 1000, Shards: 4})
		lims := make([]Limit, 20)
		for i := range lims {
			lims[i] = Limit{Rate: 1 + rng.Float64()*100, Burst: 1 + float64(rng.IntN(10))}
		}
		t0 := time.Now()
		var clock time.Duration
		for step := range 2000 {
			clock += time.Duration(rng.Int64N(int64(50 * time.Millisecond)))
			now := t0.Add(clock)
			if rng.IntN(20) == 0 {
				swept.Sweep(now)
				continue
			}
			k := rng.IntN(len(lims))
			key, n := "k"+strconv.Itoa(k), float64(rng.IntN(4))
			if rng.IntN(4) == 0 {
				swept.ReturnN(key, lims[k], now, n)
				kept.ReturnN(key, lims[k], now, n)
				continue
			}
			got, want := swept.AllowN(key, lims[k], now, n), kept.AllowN(key, lims[k], now, n)
			if got != want {
				t.Fatalf("seed %d step %d: AllowN(%s, n=%v) = %+v after sweeps; %+v without", seed, step, key, n, got, want)
			}
		}
	}
}

// checkShard checks that s's map and slots name the same buckets.
func checkShard(t *testing.T, s *shard) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.index) != len(s.buckets) {
		t.Fatalf("map holds %d keys, slots %d", len(s.index), len(s.buckets))
	}
	for i := range s.buckets {
		if j, ok := s.index[s.buckets[i].key]; !ok || int(j) != i {
			t.Fatalf("slot %d (%q): the map has %d, %v", i, s.buckets[i].key, j, ok)
		}
	}
	if n := len(s.buckets); n > 0 && (s.clock >= n || s.sweep >= n) {
		t.Fatalf("hands at %d and %d of %d slots", s.clock, s.sweep, n)
	}
}

// Between two of a sweep's lock holds, callers add, spend, return and evict
// buckets, among them the one the sweep resumes from.
func TestSweepResumesAfterChanges(t *testing.T) {
	const size = 3 * sweepChunk
	lim := Limit{Rate: 1, Burst: 1}
	tests := []struct {
		name    string
		change  func(b *Buckets, s *shard, now time.Time)
		wantLen int
	}{
		{"next spent", func(b *Buckets, s *shard, now time.Time) {
			b.AllowN(s.buckets[s.pass-1].key, lim, now, 1)
		}, 1},
		{"next returned to full", func(b *Buckets, s *shard, now time.Time) {
			b.ReturnN(s.buckets[s.pass-1].key, lim, now, 1)
		}, 0},
		{"new keys", func(b *Buckets, _ *shard, now time.Time) {
			for i := range sweepChunk {
				b.AllowN("new-"+strconv.Itoa(i), lim, now, 1)
			}
		}, sweepChunk},
		{"keys swept and not yet swept spent", func(b *Buckets, _ *shard, now time.Time) {
			for i := 0; i < size; i += 10 {
				b.AllowN("k"+strconv.Itoa(i), lim, now, 1)
			}
		}, (size + 9) / 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := mustNew(t, Options{MaxKeys: 4 * size, Shards: 1})
			s := &b.shards[0]
			t0 := time.Now()
			for i := range size {
				// Half drained, half never touched but by a request for 0:
				// at t0+1s every one is full.
				b.AllowN("k"+strconv.Itoa(i), lim, t0, float64(i%2))
			}
			now := t0.Add(time.Second)
			tnow := int64(now.Sub(b.base))
			s.mu.Lock()
			_, more := s.sweepSome(tnow, true)
			s.mu.Unlock()
			if !more {
				t.Fatalf("one lock hold swept a shard of %d buckets; want at most %d", size, sweepChunk)
			}
			tt.change(b, s, now)
			for more {
				s.mu.Lock()
				_, more = s.sweepSome(tnow, false)
				s.mu.Unlock()
			}
			checkShard(t, s)
			if got := b.Len(); got != tt.wantLen {
				t.Errorf("Len() = %d after the sweep; want %d", got, tt.wantLen)
			}
		})
	}
}

// A sweep that shrinks a shard leaves its hands in range, and new keys fill
// it up to its bound again.
func TestInsertAfterSweep(t *testing.T) {
	const maxKeys = 1000
	b := mustNew(t, Options{MaxKeys: maxKeys, Shards: 1})
	lim := Limit{Rate: 1, Burst: 1}
	t0 := time.Now()
	for i := range 3 * maxKeys { // past the bound: the clock hand goes round
		b.AllowN("k"+strconv.Itoa(i), lim, t0, 1)
	}
	b.AllowN("spent", lim, t0.Add(time.Hour), 1)
	if got := b.Sweep(t0.Add(time.Hour)); got != maxKeys-1 {
		t.Fatalf("Sweep = %d; want %d", got, maxKeys-1)
	}
	checkShard(t, &b.shards[0])
	now := t0.Add(time.Hour)
	for i := range 3 * maxKeys {
		b.AllowN("n"+strconv.Itoa(i), lim, now, 1)
	}
	checkShard(t, &b.shards[0])
	if got := b.Len(); got != maxKeys {
		t.Errorf("Len() = %d; want %d", got, maxKeys)
	}
}

func TestSweepDoesNotAllocate(t *testing.T) {
	b := mustNew(t, Options{MaxKeys: 1000})
	lim := Limit{Rate: 1, Burst: 10}
	now := time.Now()
	for i := range 1000 {
		b.AllowN("k"+strconv.Itoa(i), lim, now, 1)
	}
	if n := testing.AllocsPerRun(10, func() { b.Sweep(now) }); n != 0 {
		t.Errorf("Sweep keeping every bucket allocates %v times; want 0", n)
	}
}

// Run under -race: sweeps while callers spend and return tokens on more keys
// than fit, and two Sweeps at once.
func TestSweepConcurrentUse(t *testing.T) {
	const maxKeys = 256
	b := mustNew(t, Options{MaxKeys: maxKeys, Shards: 4})
	lim := Limit{Rate: 1000, Burst: 5}
	t0 := time.Now()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 3000 {
				now := t0.Add(time.Duration(i) * time.Millisecond)
				key := "k" + strconv.Itoa((g*1000+i)%300)
				if i%5 == 0 {
					b.ReturnN(key, lim, now, 1)
				} else {
					b.AllowN(key, lim, now, 1)
				}
			}
		})
	}
	for range 2 {
		wg.Go(func() {
			for i := range 300 {
				b.Sweep(t0.Add(time.Duration(10*i) * time.Millisecond))
			}
		})
	}
	wg.Wait()
	for i := range b.shards {
		checkShard(t, &b.shards[i])
	}
	if got := b.Len(); got > maxKeys {
		t.Errorf("Len() = %d; want <= %d", got, maxKeys)
	}
}
