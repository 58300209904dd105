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
			bound := debtBound(p, 1, true)
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

// naive is the sliding log as one timestamp per unit, and its debt: the
// definition slidingLog's runs must agree with.
type naive struct {
	log  []int64
	debt int64
}

// naiveDecide is Decide on naive.
func naiveDecide(s naive, p Params, now, cost int64, mode Mode) (naive, Result) {
	if mode == Force {
		s, _ = naiveLog(s, p, now, cost, Force)
		_, r := naiveLog(s, p, now, 0, Take)
		return s, r
	}
	return naiveLog(s, p, now, cost, Take)
}

// naiveSlide drops the units that left the window at now (the clock
// taken back to the newest unit's, as slidingLog does), and moves debt
// into the room: as units leave, past those the log held over its limit,
// all at the time the newest of the units it replaces left.
func naiveSlide(s naive, p Params, now int64) (naive, int64) {
	log, debt := s.log, s.debt
	if k := len(log); k > 0 && log[k-1] > now {
		now = log[k-1]
	}
	drop := 0
	for drop < len(log) && log[drop] <= now-p.Window {
		drop++
	}
	kept := append([]int64(nil), log[drop:]...)
	if excess := max(0, int64(len(log))-p.Limit); debt > 0 && int64(drop) > excess {
		c := min(debt, int64(drop)-excess)
		at := log[excess+c-1] + p.Window
		if k := len(kept); k > 0 {
			at = max(at, kept[k-1])
		}
		for range c {
			if at > now-p.Window {
				kept = append(kept, at)
			}
		}
		debt -= c
	}
	return naive{kept, debt}, now
}

// naiveAdd adds cost units at t: below the limit to the log, the rest to
// the debt, within twice the limit.
func naiveAdd(s naive, p Params, t, cost int64) naive {
	count := int64(len(s.log))
	add := min(cost, max(0, p.Limit-count-s.debt))
	for range add {
		s.log = append(s.log, t)
	}
	count += add
	s.debt += min(cost-add, max(0, 2*p.Limit-count-s.debt))
	return s
}

// naiveRecord is Record on naive.
func naiveRecord(s naive, p Params, now, age, cost int64) (naive, Result) {
	age = min(max(age, 0), p.Window)
	if age == 0 || cost == 0 {
		return naiveDecide(s, p, now, cost, Force)
	}
	s, now2 := naiveSlide(s, p, now)
	place := max(now-age, now2-p.Window+1)
	if k := len(s.log); k > 0 {
		place = max(place, s.log[k-1])
	}
	s = naiveAdd(s, p, place, cost)
	_, r := naiveLog(s, p, now, 0, Take)
	return s, r
}

func naiveLog(s naive, p Params, now, cost int64, mode Mode) (naive, Result) {
	s, now = naiveSlide(s, p, now)
	log, debt := s.log, s.debt
	count := int64(len(log))
	excess := max(0, count-p.Limit)
	n := need(cost)
	allowed := count+debt+n <= p.Limit
	var retry int64
	switch k := count + debt + n - p.Limit; {
	case allowed:
	case n > p.Limit || count == 0:
		retry = p.Window
		if count > 0 {
			retry = log[count-1] + p.Window - now
		}
	case k <= count:
		retry = log[k-1] + p.Window - now
	default:
		retry = log[excess+debt-1] + 2*p.Window - now
	}
	if (allowed || mode == Force) && cost > 0 {
		s = naiveAdd(naive{log, debt}, p, now, cost)
		log, debt, count = s.log, s.debt, int64(len(s.log))
	}
	excess = max(0, count-p.Limit)
	r := Result{Allowed: allowed, Remaining: max(0, p.Limit-count-debt), RetryAfter: retry}
	r.Left = float64(r.Remaining)
	switch {
	case debt > 0:
		r.ResetAfter = log[excess+debt-1] + 2*p.Window - now
	case count > 0:
		r.ResetAfter = log[count-1] + p.Window - now
	}
	return naive{log, debt}, r
}

// TestSlidingLogRunsAgreeWithNaive runs random sequences (costs, forces,
// late records, clocks that step back, instants repeated) through the run-length log and
// the one-timestamp-per-unit definition and demands equal results, with
// one run per instant at most.
func TestSlidingLogRunsAgreeWithNaive(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 11))
			p := Params{Kind: SlidingLog, Limit: 1 + rng.Int64N(30), Window: (1 + rng.Int64N(10)) * sec}
			now := int64(1_780_000_020)*sec + rng.Int64N(sec)
			var s State
			var want naive
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
				mode, age := Take, int64(-1)
				switch rng.IntN(10) {
				case 0:
					mode, cost = Force, rng.Int64N(3*p.Limit)
				case 1:
					// admitted a while ago by a local tier
					mode, cost, age = Force, rng.Int64N(2*p.Limit), rng.Int64N(p.Window+2)-1
				}
				var got, wantR Result
				prev := s
				if age >= 0 {
					s, got = Record(s, p, now, age, cost)
					want, wantR = naiveRecord(want, p, now, age, cost)
				} else {
					s, got = Decide(s, p, now, cost, mode)
					want, wantR = naiveDecide(want, p, now, cost, mode)
				}
				if got != wantR {
					t.Fatalf("step %d %+v at %d cost %d mode %d from %v: runs %+v; naive %+v", step, p, now, cost, mode, prev.Log, got, wantR)
				}
				runs, debt := splitDebt(s.Log)
				if logUnits(runs) != int64(len(want.log)) || debt != want.debt || int64(len(s.Log)) > 2*p.Limit+1 {
					t.Fatalf("step %d: %d units in %d runs and a debt of %d; naive %d and %d", step, logUnits(runs), len(runs), debt, len(want.log), want.debt)
				}
				if logUnits(s.Log) > 2*p.Limit {
					t.Fatalf("step %d: %d units with the debt; want at most twice the limit", step, logUnits(s.Log))
				}
				for i := 1; i < len(s.Log); i++ {
					if (s.Log[i].T <= s.Log[i-1].T && (i < len(runs) || debt == 0)) || s.Log[i].Total != s.Log[i-1].Total+s.Log[i].N {
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
