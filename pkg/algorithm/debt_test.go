package algorithm

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// debtBound is the longest a key may be held back after any Force or
// Count charge, for a request of cost (its need: 1 for the zero-cost check
// a Force answers with): one window plus that request's refill time,
// W + cost·W/L, rounded up to the µs, and 1 µs of floating-point slack (a
// quotient landing within a rounding error above a whole µs). A sliding
// log and a fixed window repay what a Force recorded past their limit (in
// the window after, or as room appears), so with forced hits two windows.
func debtBound(p Params, cost int64, forced bool) int64 {
	if forced && (p.Kind == SlidingLog || p.Kind == FixedWindow) {
		return 2 * p.Window
	}
	return p.Window + ceilPos(float64(need(cost))*float64(p.Window)/float64(p.Limit)) + 1
}

// TestDebtAttackersCharge is finding 8 of issue 21 with the attacker's
// numbers: 2^32 hits charged on a token bucket of 1 a day with a burst of
// 100 (count_refused, and recorded as a sidecar's Force) answered a
// Retry-After of 101 days. The debt is now capped at one window's refill,
// so the key is held back two days (one window, plus the day the next unit
// takes to refill) and admits at its RetryAfter.
func TestDebtAttackersCharge(t *testing.T) {
	const day = 24 * 3600 * sec
	t0 := int64(1_780_000_020) * sec
	for _, k := range []Kind{TokenBucket, GCRA} {
		for _, mode := range []Mode{Count, Force} {
			t.Run(fmt.Sprintf("%v/%s", k, map[Mode]string{Count: "count", Force: "force"}[mode]), func(t *testing.T) {
				p := Params{Kind: k, Limit: 1, Window: day, Burst: 100}
				s, r := Decide(State{}, p, t0, 1<<32, mode)
				if bound := debtBound(p, 1, mode == Force); r.Allowed || r.RetryAfter <= 0 || r.RetryAfter > bound {
					t.Fatalf("Decide(2^32, mode %d) = %+v; want denied, RetryAfter in (0, %d µs]: W + one unit's refill (%.1f days)",
						mode, r, bound, float64(bound)/float64(day))
				}
				if _, next := Decide(s, p, t0+r.RetryAfter, 1, Take); !next.Allowed {
					t.Errorf("Take(1) at its RetryAfter %d µs = %+v; want admitted", r.RetryAfter, next)
				}
			})
		}
	}
}

// debtParams are limits whose burst is below, equal to and far above
// their rate per window, with awkward quotients.
func debtParams(k Kind) []Params {
	return []Params{
		{Kind: k, Limit: 1, Window: 24 * 3600 * sec, Burst: 100},
		{Kind: k, Limit: 7, Window: 3 * sec, Burst: 5},
		{Kind: k, Limit: 100, Window: 60 * sec, Burst: 100},
		{Kind: k, Limit: 3, Window: sec, Burst: 1},
		{Kind: k, Limit: 20, Window: 60 * sec, Burst: 1000},
		{Kind: k, Limit: 9, Window: 7 * sec, Burst: 13, Origin: 123_457},
	}
}

// TestDebtBound: random sequences of takes, Forces and Counts (costs up
// to 2^32, the clock moving forward or standing still) on every algorithm:
// after any Force or Count the key is held back at most one window plus
// one unit's refill (the Result), a later request of any admissible cost c
// at most one window plus c's refill (two windows for a sliding log or a
// fixed window with forced hits, which they repay), and a unit is
// admitted at the RetryAfter given. Without Forces, the one-window bound
// holds for every algorithm.
func TestDebtBound(t *testing.T) {
	for _, forced := range []bool{true, false} {
		for k := Kind(0); k < numKinds; k++ {
			for i, p := range debtParams(k) {
				t.Run(fmt.Sprintf("%v/%d/forced=%v", k, i, forced), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(k), uint64(i)))
					now := int64(1_780_000_020)*sec + rng.Int64N(sec)
					modes := []Mode{Take, Take, Count, Count}
					if forced {
						modes = []Mode{Take, Take, Force, Count}
					}
					var s State
					for step := range 3000 {
						if rng.IntN(3) > 0 {
							now += rng.Int64N(p.Window/4 + 1)
						}
						mode := modes[rng.IntN(4)]
						cost := rng.Int64N(MaxCost(p) + 1)
						if rng.IntN(4) == 0 {
							cost = rng.Int64N(1<<32) + 1
						}
						prev := s
						var r Result
						s, r = Decide(s, p, now, cost, mode)
						if mode == Take || cost == 0 {
							continue
						}
						if r.RetryAfter > debtBound(p, 1, forced) {
							t.Fatalf("step %d: Decide(%+v, %+v, %d, cost %d, mode %d) = %+v; want RetryAfter ≤ %d µs",
								step, prev, p, now, cost, mode, r, debtBound(p, 1, forced))
						}
						c := 1 + rng.Int64N(MaxCost(p))
						if _, next := Decide(s, p, now, c, Take); next.RetryAfter > debtBound(p, c, forced) {
							t.Fatalf("step %d: after %d (mode %d) from %+v, Take(%d) = %+v; want RetryAfter ≤ %d µs",
								step, cost, mode, prev, c, next, debtBound(p, c, forced))
						}
						if !r.Allowed && r.RetryAfter > 0 {
							if _, next := Decide(s, p, now+r.RetryAfter, 1, Take); !next.Allowed {
								t.Fatalf("step %d: Take(1) at the RetryAfter %d µs = %+v; want admitted", step, r.RetryAfter, next)
							}
						}
					}
				})
			}
		}
	}
}
