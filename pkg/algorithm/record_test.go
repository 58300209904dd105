package algorithm

import (
	"math/rand/v2"
	"testing"
)

// admit takes n units one at a time at t and reports how many were admitted.
func admit(s *State, p Params, t int64, n int) int {
	ok := 0
	for range n {
		var r Result
		if *s, r = Decide(*s, p, t, 1, Take); r.Allowed {
			ok++
		}
	}
	return ok
}

// TestRecordLandsInItsWindow: hits a sidecar admitted in a window that has
// closed by the time they are recorded count against that window: they
// cost the current one only what the closed one could not have admitted.
func TestRecordLandsInItsWindow(t *testing.T) {
	for _, kind := range []Kind{FixedWindow, SlidingWindow} {
		p := Params{Kind: kind, Limit: 10, Window: sec}
		w0 := 1_780_000_000 * sec
		cases := []struct {
			name       string
			usedBefore int   // admitted in the closed window
			record     int64 // hits recorded late, admitted in the closed window
			wantLeft   int64 // remaining at the start of the next window, fixed window
		}{
			{"room in the closed window: nothing carried", 6, 3, 10},
			{"the closed window overflows: the excess carried", 8, 5, 7},
			{"the closed window was full: all carried", 10, 4, 6},
		}
		for _, c := range cases {
			t.Run(kind.String()+"/"+c.name, func(t *testing.T) {
				var s State
				if got := admit(&s, p, w0+100, c.usedBefore); got != c.usedBefore {
					t.Fatalf("admitted %d of %d", got, c.usedBefore)
				}
				now := w0 + sec + 5_000 // 5 ms into the next window
				s, r := Record(s, p, now, 20_000, c.record)
				if kind == FixedWindow && r.Remaining != c.wantLeft {
					t.Errorf("after the late record: %d left; want %d", r.Remaining, c.wantLeft)
				}
				// Charged now instead, the record would have cost the
				// current window all of it.
				var naive State
				admit(&naive, p, w0+100, c.usedBefore)
				_, nr := Record(naive, p, now, 0, c.record)
				if r.Remaining < nr.Remaining {
					t.Errorf("placed in its window: %d left; charged now: %d left; want at least as many", r.Remaining, nr.Remaining)
				}
				if kind == SlidingWindow && c.usedBefore+int(c.record) > 10 && r.Remaining > 10-int64(c.usedBefore+int(c.record)-10) {
					t.Errorf("sliding window: %d left after a closed window %d over its limit", r.Remaining, c.usedBefore+int(c.record)-10)
				}
			})
		}
	}
}

// TestRecordFixedWindowKept: a fixed window's state outlives its window
// by one (Keep), so that a late record in the next window finds its count.
func TestRecordFixedWindowKept(t *testing.T) {
	p := Params{Kind: FixedWindow, Limit: 10, Window: sec}
	if got := Keep(p, 300_000); got != 300_000+sec {
		t.Errorf("Keep(fixed_window, 300ms) = %d; want a window longer", got)
	}
	if got := Keep(p, 0); got != 0 {
		t.Errorf("Keep(fixed_window, 0) = %d; want 0 (nothing to keep)", got)
	}
	tb := Params{Kind: TokenBucket, Limit: 10, Window: sec, Burst: 10}
	if got := Keep(tb, 300_000); got != 300_000 {
		t.Errorf("Keep(token_bucket, 300ms) = %d; want 300ms", got)
	}
}

// TestRecordAgeBounded: an age is clamped to [0, Window]: a negative one
// records now, one past a window records a window ago, never further.
func TestRecordAgeBounded(t *testing.T) {
	p := Params{Kind: FixedWindow, Limit: 10, Window: sec}
	w0 := 1_780_000_000 * sec
	var full State
	admit(&full, p, w0+100, 10)
	now := w0 + 2*sec + 10 // two windows later: the full one is gone
	_, r := Record(full, p, now, 5*sec, 4)
	if r.Remaining != 10 {
		t.Errorf("an age of 5 windows: %d left; want 10 (placed a window ago, in the window after the full one, which had room)", r.Remaining)
	}
	_, neg := Record(State{}, p, now, -sec, 4)
	if neg.Remaining != 6 {
		t.Errorf("a negative age: %d left; want 6 (recorded now)", neg.Remaining)
	}
}

// TestRecordBucketsChargeNow: a bucket's refill since the admission would
// have absorbed part of a late record; it is charged now, whatever the
// age, which only makes it stricter.
func TestRecordBucketsChargeNow(t *testing.T) {
	for _, kind := range []Kind{TokenBucket, GCRA} {
		p := Params{Kind: kind, Limit: 10, Window: sec, Burst: 10}
		a, ra := Record(State{}, p, 5*sec, 800_000, 7)
		b, rb := Record(State{}, p, 5*sec, 0, 7)
		if a.Level != b.Level || a.Time != b.Time || ra != rb {
			t.Errorf("%s: aged %+v %+v; now %+v %+v; want the same", kind, a, ra, b, rb)
		}
	}
}

// TestRecordSlidingLogAtItsTime: units recorded late sit at their own
// time and leave the log a window after it, not a window after now.
func TestRecordSlidingLogAtItsTime(t *testing.T) {
	p := Params{Kind: SlidingLog, Limit: 10, Window: sec}
	now := 1_780_000_000 * sec
	s, _ := Record(State{}, p, now, 400_000, 10)
	if _, r := Decide(s, p, now+600_001, 1, Take); !r.Allowed {
		t.Errorf("a window after the units' own time: %+v; want admitted", r)
	}
	if _, r := Decide(s, p, now+599_000, 1, Take); r.Allowed {
		t.Errorf("within a window of the units' time: admitted; want refused")
	}
}

// TestRecordNeverExceedsForce: on random histories, a record placed in its
// window never leaves a key less room than the same record charged now,
// and never more than before the record.
func TestRecordNeverExceedsForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, kind := range Kinds() {
		p := Params{Kind: kind, Limit: 7, Window: 3 * sec, Burst: 5, Origin: 123_457}
		var s State
		now := 1_780_000_000 * sec
		for step := range 20_000 {
			now += rng.Int64N(sec / 3)
			if rng.IntN(3) > 0 {
				s, _ = Decide(s, p, now, rng.Int64N(3), Take)
				continue
			}
			cost, age := rng.Int64N(9), rng.Int64N(2*p.Window)
			_, before := Decide(s, p, now, 0, Take)
			placed, r := Record(s, p, now, age, cost)
			_, charged := Record(s, p, now, 0, cost)
			if r.Remaining < charged.Remaining {
				t.Fatalf("%s step %d: a record of %d (age %d) placed in its window left %d; charged now %d: want at least as much", kind, step, cost, age, r.Remaining, charged.Remaining)
			}
			if r.Remaining > before.Remaining {
				t.Fatalf("%s step %d: a record of %d (age %d) raised what is left from %d to %d", kind, step, cost, age, before.Remaining, r.Remaining)
			}
			s = placed
		}
	}
}

// TestFixedWindowRepaysForcedHits: a window of 10 a second that a
// sidecar's records took to 13 starts the next window with the 3 it owes,
// so the two windows admit 20, as an exact limiter would; the next
// window's requests wait for the window after once it is spent. What
// Count records past the limit (refused hits) is not carried: the
// reference starts every window afresh.
func TestFixedWindowRepaysForcedHits(t *testing.T) {
	p := Params{Kind: FixedWindow, Limit: 10, Window: sec}
	w0 := int64(1_780_000_000) * sec
	for _, tt := range []struct {
		mode Mode
		next int // admitted in the next window
	}{{Force, 7}, {Count, 10}} {
		s, _ := Decide(State{}, p, w0+100_000, 10, Take)
		s, r := Decide(s, p, w0+200_000, 3, tt.mode)
		if r.Allowed && tt.mode == Count {
			t.Fatalf("Count of 3 on a full window: %+v; want refused", r)
		}
		admitted := 0
		for i := range 20 {
			var r Result
			if s, r = Decide(s, p, w0+sec+int64(i)*10_000, 1, Take); r.Allowed {
				admitted++
			}
		}
		if admitted != tt.next {
			t.Errorf("mode %d: the next window admitted %d; want %d", tt.mode, admitted, tt.next)
		}
	}
	// Spent past the next window: a request waits for the window after.
	s, _ := Decide(State{}, p, w0, 19, Force)
	if _, r := Decide(s, p, w0+500_000, 2, Take); r.RetryAfter != 1_500_000 {
		t.Errorf("9 of the next window's 10 owed, a request of 2: retry after %d µs; want 1.5 s (this window's end and the next)", r.RetryAfter)
	}
}
