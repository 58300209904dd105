package localbucket

import (
	"math"
	"time"
)

// Limit is a token bucket's shape: it refills at Rate tokens per second up to a
// capacity of Burst tokens. A new key starts with a full bucket. Rate 0 means
// the bucket never refills; a negative or NaN Rate or Burst counts as 0.
//
// Callers may pass a different Limit for a key than last time (a configuration
// reload): the bucket keeps its tokens, capped at the new Burst, and refills at
// the new Rate from then on.
//
// A plain value, safe to copy and to read from many goroutines.
type Limit struct {
	Rate  float64 // tokens per second
	Burst float64 // capacity in tokens
}

// sanitize maps the limits the doc declares meaningless to 0, so that the
// arithmetic below never sees a NaN or a negative capacity.
func (l Limit) sanitize() Limit {
	if !(l.Rate > 0) {
		l.Rate = 0
	}
	if !(l.Burst > 0) {
		l.Burst = 0
	}
	return l
}

// InfDuration is the RetryAfter of a request that waiting cannot help: the
// bucket never refills (Rate 0) or the wait overflows a time.Duration.
const InfDuration = time.Duration(math.MaxInt64)

// Decision is the answer to one request. It is a value: returning it costs no
// allocation.
//
// Safe to share between goroutines.
type Decision struct {
	// Allowed reports whether the n tokens were available and taken.
	Allowed bool
	// Remaining is the number of tokens left in the bucket after the decision;
	// it may be fractional.
	Remaining float64
	// RetryAfter is 0 when Allowed. Otherwise it is the wait after which the
	// same request would be allowed if no other request spends tokens meanwhile,
	// rounded up to the nanosecond. A request for more than Burst tokens is
	// never allowed; its RetryAfter is then the time until the bucket is full
	// (0 if it already is). Waiting longer cannot help: callers should treat
	// that rejection as final for that cost.
	RetryAfter time.Duration
}

// state is one bucket's state: tokens as of last, in nanoseconds since the
// owning Buckets' base. last never decreases (see take).
type state struct {
	tokens float64
	last   int64
}

// fresh is the state of a key never seen at now: a full bucket.
func fresh(lim Limit, now int64) state {
	return state{tokens: lim.Burst, last: now}
}

// level returns s's tokens refilled up to now and capped at lim.Burst. take and
// full share it so that a bucket take would fill is exactly a bucket full
// reports as droppable.
func (s state) level(lim Limit, now int64) float64 {
	tokens := s.tokens
	if now > s.last && lim.Rate > 0 {
		tokens += float64(now-s.last) * lim.Rate / 1e9
	}
	return min(tokens, lim.Burst)
}

// full reports whether s, at now, is a full bucket for lim: the state of a key
// never seen, which can be forgotten without changing any answer (as long as
// the clock moves forward and the limit stays the same).
func (s state) full(lim Limit, now int64) bool {
	return s.level(lim, now) >= lim.Burst
}

// take decides a request for n tokens at now against a bucket in state s with
// the sanitized limit lim, and returns the new state. It is the package's one
// decision function: pure, no locks, no clock.
//
// A now before s.last (a clock that went backwards) refills nothing and leaves
// last where it was. golang.org/x/time/rate instead moves last back to now,
// which credits the interval between now and the old last a second time once
// the clock catches up; keeping last monotone credits every instant once.
//
// n below 0 or NaN counts as 0: a request that spends nothing, which is
// always allowed (giving tokens back is give's, not a negative take).
func take(s state, lim Limit, now int64, n float64) (state, Decision) {
	if !(n >= 0) {
		n = 0
	}
	s.tokens = s.level(lim, now)
	if now > s.last {
		s.last = now
	}
	if n <= s.tokens && !math.IsInf(n, 1) {
		s.tokens -= n
		return s, Decision{Allowed: true, Remaining: s.tokens}
	}
	want := n
	if n > lim.Burst {
		want = lim.Burst // never allowed: report when the bucket is full
	}
	d := Decision{Remaining: s.tokens, RetryAfter: wait(s.tokens, want, lim.Rate)}
	if now < s.last && d.RetryAfter != InfDuration {
		// The clock went back: refill resumes only from last.
		back := time.Duration(s.last - now)
		if back < 0 || d.RetryAfter > InfDuration-back {
			d.RetryAfter = InfDuration // overflow
		} else {
			d.RetryAfter += back
		}
	}
	return s, d
}

// give returns s with n more tokens at now, capped at lim.Burst: the inverse
// of a take of n, for ReturnN. Like take it refills up to now first and never
// moves last back.
func give(s state, lim Limit, now int64, n float64) state {
	s.tokens = min(s.level(lim, now)+n, lim.Burst)
	if now > s.last {
		s.last = now
	}
	return s
}

// wait returns how long a bucket holding tokens and refilling at rate takes to
// hold want tokens, rounded up so that a caller retrying after it finds the
// tokens there.
func wait(tokens, want, rate float64) time.Duration {
	need := want - tokens
	if !(need > 0) {
		return 0
	}
	if rate <= 0 {
		return InfDuration
	}
	ns := math.Ceil(need / rate * 1e9)
	// Rounding can leave the refill an ulp short of want at exactly ns; step
	// until the very sum level computes reaches it.
	for step := 1.0; tokens+ns*rate/1e9 < want && step <= 1<<20; step *= 2 {
		ns += step
	}
	if !(ns < math.MaxInt64) {
		return InfDuration
	}
	return time.Duration(ns)
}
