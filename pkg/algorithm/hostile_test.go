package algorithm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestForceDebtIsBounded: what a Force records is bounded by one window's
// refill of debt, so however large the cost a caller records, and however
// often, the key admits again within one window and one unit's refill
// (the finding: 2^32 hits recorded on a 20/minute key meant a Retry-After
// of 408 years; see also debt_test.go).
func TestForceDebtIsBounded(t *testing.T) {
	t0 := int64(1_780_000_020) * sec
	for k := Kind(0); k < numKinds; k++ {
		t.Run(k.String(), func(t *testing.T) {
			p := Params{k, 20, 60 * sec, 20, 0, ""}
			var s State
			var r Result
			for range 10 {
				s, r = Decide(s, p, t0, 1<<32, Force)
			}
			bound := debtBound(p, 1)
			if r.Allowed || r.RetryAfter <= 0 || r.RetryAfter > bound {
				t.Fatalf("after 10 × Force 2^32: %+v; want denied for at most %d µs", r, bound)
			}
			if _, next := Decide(s, p, t0+r.RetryAfter, 1, Take); !next.Allowed {
				t.Errorf("denied at its RetryAfter %d: %+v", r.RetryAfter, next)
			}
		})
	}
}

// TestDurationsBounded: limits at every extreme the config allows, with
// every cost a request can carry, report durations within
// [0, MaxDuration]: nothing overflows into a negative wait or a
// time.Duration that wraps.
func TestDurationsBounded(t *testing.T) {
	const maxWindow = int64(100*365*24*3600) * sec
	t0 := int64(1_780_000_020) * sec
	for k := Kind(0); k < numKinds; k++ {
		for _, p := range []Params{
			{k, 1, maxWindow, math.MaxUint32, 0, "h"},
			{k, math.MaxUint32, maxWindow, math.MaxUint32, 0, "h"},
			{k, 1, 1, 1, 0, "h"},
			{k, math.MaxUint32, 1, 1, 0, "h"},
		} {
			if k == SlidingLog || k == Concurrency {
				p.Limit = min(p.Limit, 10000)
			}
			for _, cost := range []int64{0, 1, math.MaxUint32, 1 << 32} {
				for _, mode := range []Mode{Take, Force} {
					s, r := Decide(State{}, p, t0, cost, mode)
					_, r2 := Decide(s, p, t0+1, cost, mode)
					for _, r := range []Result{r, r2} {
						for _, d := range []int64{r.RetryAfter, r.ResetAfter} {
							if d < 0 || d > MaxDuration {
								t.Fatalf("%+v cost %d mode %d: %+v; want durations in [0, %d]", p, cost, mode, r, int64(MaxDuration))
							}
						}
					}
				}
			}
		}
	}
}

// naiveDecide is Decide on naiveLog.
func naiveDecide(log []int64, p Params, now, cost int64, mode Mode) ([]int64, Result) {
	if mode == Force {
		log, _ = naiveLog(log, p, now, cost, Force)
		_, r := naiveLog(log, p, now, 0, Take)
		return log, r
	}
	return naiveLog(log, p, now, cost, Take)
}

// naiveLog is the sliding log as one timestamp per unit: the definition
// slidingLog's runs must agree with.
func naiveLog(log []int64, p Params, now, cost int64, mode Mode) ([]int64, Result) {
	if k := len(log); k > 0 && log[k-1] > now {
		now = log[k-1]
	}
	drop := 0
	for drop < len(log) && log[drop] <= now-p.Window {
		drop++
	}
	log = append([]int64(nil), log[drop:]...)
	count := int64(len(log))
	n := need(cost)
	allowed := count+n <= p.Limit
	var retry int64
	switch {
	case allowed:
	case n > p.Limit || count == 0:
		retry = p.Window
		if count > 0 {
			retry = log[count-1] + p.Window - now
		}
	default:
		retry = log[count+n-p.Limit-1] + p.Window - now
	}
	if (allowed || mode == Force) && cost > 0 {
		for add := min(cost, max(0, 2*p.Limit-count)); add > 0; add-- {
			log = append(log, now)
		}
	}
	count = int64(len(log))
	r := Result{Allowed: allowed, Remaining: max(0, p.Limit-count), Left: float64(max(0, p.Limit-count)), RetryAfter: retry}
	if count > 0 {
		r.ResetAfter = log[count-1] + p.Window - now
	}
	return log, r
}

// TestSlidingLogRunsAgreeWithNaive runs random sequences (costs, forces,
// clocks that step back, instants repeated) through the run-length log and
// the one-timestamp-per-unit definition and demands equal results, with
// one run per instant at most.
func TestSlidingLogRunsAgreeWithNaive(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 11))
			p := Params{Kind: SlidingLog, Limit: 1 + rng.Int64N(30), Window: (1 + rng.Int64N(10)) * sec}
			now := int64(1_780_000_020)*sec + rng.Int64N(sec)
			var s State
			var naive []int64
			for step := range 2000 {
				switch r := rng.IntN(10); {
				case r == 0:
					now -= rng.Int64N(sec / 2)
				case r < 3:
					// the same instant again
				default:
					now += rng.Int64N(p.Window / 4)
				}
				cost := rng.Int64N(p.Limit/2 + 2)
				mode := Take
				if rng.IntN(10) == 0 {
					mode, cost = Force, rng.Int64N(3*p.Limit)
				}
				var got, want Result
				prev := s
				s, got = Decide(s, p, now, cost, mode)
				naive, want = naiveDecide(naive, p, now, cost, mode)
				if got != want {
					t.Fatalf("step %d %+v at %d cost %d mode %d from %v: runs %+v; naive %+v", step, p, now, cost, mode, prev.Log, got, want)
				}
				if logUnits(s.Log) != int64(len(naive)) || int64(len(s.Log)) > 2*p.Limit {
					t.Fatalf("step %d: %d units in %d runs; naive %d", step, logUnits(s.Log), len(s.Log), len(naive))
				}
				for i := 1; i < len(s.Log); i++ {
					if s.Log[i].T <= s.Log[i-1].T || s.Log[i].Total != s.Log[i-1].Total+s.Log[i].N {
						t.Fatalf("step %d: runs out of order or totals off: %v", step, s.Log)
					}
				}
			}
		})
	}
}

// TestSlidingLogCostIsOneRun: a request's cost takes one run whatever its
// size, so memory follows requests, not units.
func TestSlidingLogCostIsOneRun(t *testing.T) {
	p := Params{Kind: SlidingLog, Limit: 10000, Window: 3600 * sec}
	s, r := Decide(State{}, p, 1_780_000_020*sec, 10000, Take)
	if !r.Allowed || len(s.Log) != 1 || cap(s.Log) > 4 {
		t.Fatalf("cost 10000: %+v with %d runs (cap %d); want one run", r, len(s.Log), cap(s.Log))
	}
}
