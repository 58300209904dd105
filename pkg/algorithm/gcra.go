package algorithm

import "math"

// gcra is the generic cell rate algorithm: the same contract as the token
// bucket, with one timestamp of state, the theoretical arrival time (TAT).
// The emission interval is Window/Limit µs and the tolerance Burst of them.
// A TAT at or before now is a full bucket.
func gcra(s State, p Params, now, cost int64, mode Mode) (State, Result) {
	interval := float64(p.Window) / float64(p.Limit)
	tolerance := float64(float64(p.Burst) * interval)
	fnow := float64(now)
	tat := fnow
	if s.Exists && s.Level > fnow {
		tat = s.Level
	}
	n := need(cost)
	allowAt := tat + float64(float64(n)*interval) - tolerance
	allowed := fnow >= allowAt
	var retry int64
	if !allowed {
		if n > p.Burst {
			retry = ceilPos(tat - fnow)
		} else {
			retry = ceilPos(allowAt - fnow)
		}
	}
	if allowed || mode != Take {
		// Debt stops at min(Burst, Limit) emission intervals past the
		// tolerance, what one window refills at most (see Decide).
		most := fnow + tolerance + float64(float64(maxDebt(burstSize(p), p.Limit))*interval)
		tat = math.Max(tat, math.Min(tat+float64(float64(cost)*interval), most))
	}
	left := (tolerance - (tat - fnow)) / interval
	return State{Exists: true, Level: tat}, Result{
		Allowed:    allowed,
		Remaining:  floorNonNeg(left),
		Left:       max(0, left),
		RetryAfter: retry,
		ResetAfter: ceilPos(tat - fnow),
	}
}

// gcraRefund moves the theoretical arrival time back by the cost a take
// at taken added.
func gcraRefund(s State, p Params, _, cost int64) State {
	if s.Exists {
		s.Level -= float64(float64(cost) * (float64(p.Window) / float64(p.Limit)))
	}
	return s
}
