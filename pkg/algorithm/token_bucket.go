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
		tokens, updated = s.Level, s.Time
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
	if allowed || mode != Take {
		// Debt stops at min(Burst, Limit) tokens below empty, what one
		// window refills at most (see Decide); never raise tokens, though,
		// should an earlier, larger burst have left more.
		tokens = math.Min(tokens, math.Max(tokens-float64(cost), -float64(maxDebt(burstSize(p), p.Limit))))
	}
	reset := ceilPos((capacity - tokens) / rate)
	return State{Exists: true, Level: tokens, Time: updated}, Result{
		Allowed:    allowed,
		Remaining:  floorNonNeg(tokens),
		Left:       max(0, tokens),
		RetryAfter: retry,
		ResetAfter: reset,
	}
}

// tokenBucketRefund gives back cost tokens a take at taken spent: the
// next decision caps the bucket at its burst again.
func tokenBucketRefund(s State, _ Params, _, cost int64) State {
	if s.Exists {
		s.Level += float64(cost)
	}
	return s
}

// burstSize is the most a bucket's admitted requests spend at once, and
// the largest cost it ever admits: its burst.
func burstSize(p Params) int64 { return p.Burst }

// refillTime is how long an empty bucket takes to refill: burst/rate.
func refillTime(p Params) int64 {
	return int64(float64(p.Window) * float64(p.Burst) / float64(p.Limit))
}

// stringStateBytes is what a key whose state is a few numbers holds.
func stringStateBytes(Params) int64 { return 64 }

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
