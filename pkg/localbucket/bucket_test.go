package localbucket

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

const sec = int64(time.Second)

func TestTake(t *testing.T) {
	lim := Limit{Rate: 2, Burst: 4} // 2 tokens/s, capacity 4
	type step struct {
		at            int64 // nanoseconds on the bucket's clock
		n             float64
		lim           *Limit // nil: lim
		wantAllowed   bool
		wantRemaining float64
		wantRetry     time.Duration
	}
	tests := []struct {
		name  string
		start state
		steps []step
	}{
		{name: "burst then deny", start: fresh(lim, 0), steps: []step{
			{at: 0, n: 3, wantAllowed: true, wantRemaining: 1},
			{at: 0, n: 1, wantAllowed: true, wantRemaining: 0},
			{at: 0, n: 1, wantRemaining: 0, wantRetry: 500 * time.Millisecond},
			{at: 0, n: 3, wantRemaining: 0, wantRetry: 1500 * time.Millisecond},
		}},
		{name: "lazy refill", start: state{tokens: 0, last: 0}, steps: []step{
			{at: sec / 4, n: 1, wantRemaining: 0.5, wantRetry: 250 * time.Millisecond},
			{at: sec / 2, n: 1, wantAllowed: true, wantRemaining: 0},
		}},
		{name: "capped at burst", start: state{tokens: 0, last: 0}, steps: []step{
			{at: 100 * sec, n: 0, wantAllowed: true, wantRemaining: 4},
		}},
		{name: "clock backwards refills nothing", start: state{tokens: 1, last: 10 * sec}, steps: []step{
			{at: 5 * sec, n: 0, wantAllowed: true, wantRemaining: 1},
			{at: 5 * sec, n: 2, wantRemaining: 1, wantRetry: 5*time.Second + 500*time.Millisecond},
			{at: 10 * sec, n: 0, wantAllowed: true, wantRemaining: 1}, // the 5 s are not credited twice
			{at: 11 * sec, n: 0, wantAllowed: true, wantRemaining: 3},
		}},
		{name: "more than burst: never, retry when full", start: state{tokens: 1, last: 0}, steps: []step{
			{at: 0, n: 5, wantRemaining: 1, wantRetry: 1500 * time.Millisecond},
			{at: 10 * sec, n: 5, wantRemaining: 4, wantRetry: 0},
		}},
		{name: "rate zero never refills", start: state{tokens: 1, last: 0}, steps: []step{
			{at: 0, n: 1, lim: &Limit{Burst: 4}, wantAllowed: true, wantRemaining: 0},
			{at: 1000 * sec, n: 1, lim: &Limit{Burst: 4}, wantRemaining: 0, wantRetry: InfDuration},
		}},
		{name: "zero, negative and NaN cost spend nothing", start: state{tokens: 0, last: 0}, steps: []step{
			{at: 0, n: 0, wantAllowed: true},
			{at: 0, n: -3, wantAllowed: true},
			{at: 0, n: math.NaN(), wantAllowed: true},
		}},
		{name: "infinite cost is never allowed", start: fresh(lim, 0), steps: []step{
			{at: 0, n: math.Inf(1), wantRemaining: 4},
		}},
		{name: "fractional cost", start: fresh(lim, 0), steps: []step{
			{at: 0, n: 2.5, wantAllowed: true, wantRemaining: 1.5},
			{at: 0, n: 2, wantRemaining: 1.5, wantRetry: 250 * time.Millisecond},
		}},
		{name: "reload lowers burst: tokens capped", start: fresh(lim, 0), steps: []step{
			{at: 0, n: 0, lim: &Limit{Rate: 2, Burst: 1}, wantAllowed: true, wantRemaining: 1},
			{at: 10 * sec, n: 0, wantAllowed: true, wantRemaining: 4}, // back to the old limit: refills to 4
		}},
		{name: "reload raises burst: refills at the new rate", start: state{tokens: 4, last: 0}, steps: []step{
			{at: sec, n: 0, lim: &Limit{Rate: 10, Burst: 20}, wantAllowed: true, wantRemaining: 14},
		}},
		{name: "negative and NaN limits count as zero", start: state{tokens: 3, last: 0}, steps: []step{
			{at: sec, n: 0, lim: &Limit{Rate: math.NaN(), Burst: -1}, wantAllowed: true, wantRemaining: 0},
			{at: 2 * sec, n: 1, lim: &Limit{Rate: -1, Burst: 1}, wantRemaining: 0, wantRetry: InfDuration},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.start
			for i, st := range tt.steps {
				l := lim
				if st.lim != nil {
					l = *st.lim
				}
				var d Decision
				s, d = take(s, l.sanitize(), st.at, st.n)
				want := Decision{Allowed: st.wantAllowed, Remaining: st.wantRemaining, RetryAfter: st.wantRetry}
				if d != want {
					t.Errorf("step %d: take(at %v, n %v) = %+v; want %+v", i, time.Duration(st.at), st.n, d, want)
				}
			}
		})
	}
}

func TestWait(t *testing.T) {
	tests := []struct {
		tokens, want, rate float64
		out                time.Duration
	}{
		{0, 1, 1, time.Second},
		{0.5, 1, 1, 500 * time.Millisecond},
		{1, 1, 1, 0},
		{2, 1, 1, 0},
		{0, 1, 0, InfDuration},
		{0, 1, 3, 333333334 * time.Nanosecond}, // rounded up
		{0, 1e30, 1e-30, InfDuration},          // overflows a Duration
		{0, math.Inf(1), 1, InfDuration},
	}
	for _, tt := range tests {
		if got := wait(tt.tokens, tt.want, tt.rate); got != tt.out {
			t.Errorf("wait(%v, %v, %v) = %v; want %v", tt.tokens, tt.want, tt.rate, got, tt.out)
		}
	}
}

func TestFull(t *testing.T) {
	lim := Limit{Rate: 1, Burst: 2}
	s := state{tokens: 1, last: 0}
	if s.full(lim, sec-1) {
		t.Errorf("full 1ns before refilled = true; want false")
	}
	if !s.full(lim, sec) {
		t.Errorf("full when refilled = false; want true")
	}
	if s.full(Limit{Burst: 2}, 1000*sec) {
		t.Errorf("full with rate 0 and tokens short = true; want false")
	}
	if !(state{}).full(Limit{}, 0) {
		t.Errorf("full with burst 0 = false; want true")
	}
}

// Rounding in need/rate·1e9 leaves the refill an ulp short about once in
// 3000 draws; wait must cover those too.
func TestWaitIsEnough(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		rate := math.Exp(rng.Float64()*20 - 10)
		want := math.Round(rng.Float64()*100) + 1
		tokens := rng.Float64() * want
		if rng.IntN(3) == 0 {
			tokens = math.Floor(tokens)
		}
		d := wait(tokens, want, rate)
		s := state{tokens: tokens}
		if got := s.level(Limit{Rate: rate, Burst: want}, int64(d)); got < want {
			t.Fatalf("wait(%v, %v, %v) = %v; level then %v < %v", tokens, want, rate, d, got, want)
		}
	}
}
