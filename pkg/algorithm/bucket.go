package algorithm

import "math"

// tokenBucket refills lazily at Limit/Window tokens per µs up to Burst.
// A fresh key is a full bucket. When now is before the last update the
// bucket neither refills nor moves its clock back.
func tokenBucket(s State, p Params, now, cost int64, mode Mode) (State, Result) {
	rate := float64(p.Limit) / float64(p.Window)
	capacity := float64(p.Burst)
	tokens, updated := capacity, now
	if s.Exists {
		tokens, updated = s.F, s.T
	}
	if now > updated {
		tokens = math.Min(capacity, tokens+float64(float64(now-updated)*rate))
		updated = now
	}
	n := float64(need(cost))
	allowed := tokens+epsilon >= n
	var retry int64
	if !allowed {
		if n > capacity {
			// Never admissible: say when the bucket is full, the best
			// it will ever be.
			retry = ceilPos((capacity - tokens) / rate)
		} else {
			retry = ceilPos((n - tokens) / rate)
		}
	}
	if allowed || mode == Force {
		// Debt stops at one bucket below empty (see Decide); never raise
		// tokens, though, should an earlier, larger burst have left more.
		tokens = math.Min(tokens, math.Max(tokens-float64(cost), -capacity))
	}
	reset := ceilPos((capacity - tokens) / rate)
	return State{Exists: true, F: tokens, T: updated}, Result{
		Allowed:    allowed,
		Remaining:  floorNonNeg(tokens),
		RetryAfter: retry,
		ResetAfter: reset,
	}
}

// gcra is the generic cell rate algorithm: the same contract as the token
// bucket, with one timestamp of state, the theoretical arrival time (TAT).
// The emission interval is Window/Limit µs and the tolerance Burst of them.
// A TAT at or before now is a full bucket.
func gcra(s State, p Params, now, cost int64, mode Mode) (State, Result) {
	interval := float64(p.Window) / float64(p.Limit)
	tolerance := float64(float64(p.Burst) * interval)
	fnow := float64(now)
	tat := fnow
	if s.Exists && s.F > fnow {
		tat = s.F
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
	if allowed || mode == Force {
		// Debt stops at one burst past the tolerance (see Decide).
		tat = math.Max(tat, math.Min(tat+float64(float64(cost)*interval), fnow+2*tolerance))
	}
	return State{Exists: true, F: tat}, Result{
		Allowed:    allowed,
		Remaining:  floorNonNeg((tolerance - (tat - fnow)) / interval),
		RetryAfter: retry,
		ResetAfter: ceilPos(tat - fnow),
	}
}

// epsilon absorbs the rounding of fractional refills (0.1 s at 10/s is
// 0.9999999999999999 tokens in float64), so that whole tokens are whole when
// decided and reported. It is far below any allowance a limit can express.
const epsilon = 1e-9

// floorNonNeg rounds a token count down for reporting.
func floorNonNeg(x float64) int64 {
	x += epsilon
	if x <= 0 {
		return 0
	}
	return int64(math.Floor(x))
}
