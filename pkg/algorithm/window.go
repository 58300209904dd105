package algorithm

// windowStart is the epoch-aligned start of the window holding now: the
// windows envoyproxy/ratelimit uses (now / divider * divider), in µs.
func windowStart(now, window int64) int64 {
	r := now % window
	if r < 0 {
		r += window
	}
	return now - r
}

// fixedWindow keeps one counter per epoch-aligned window. It admits up to
// twice the limit across a boundary; that is its documented flaw.
func fixedWindow(s State, p Params, now, cost int64, mode Mode) (State, Result) {
	start := windowStart(now, p.Window)
	var count int64
	if s.Exists && s.T >= start {
		// s.T > start only when the clock went back: keep the later
		// window and its count rather than start afresh.
		start, count = s.T, s.A
	}
	n := need(cost)
	allowed := count+n <= p.Limit
	if allowed || mode == Force {
		count = max(count, min(count+cost, 2*p.Limit)) // debt: see Decide
	}
	left := start + p.Window - now
	r := Result{Allowed: allowed, Remaining: max(0, p.Limit-count)}
	if !allowed {
		r.RetryAfter = left
	}
	if count > 0 {
		r.ResetAfter = left
	}
	return State{Exists: true, T: start, A: count}, r
}

// slidingWindow estimates the hits in the last Window as the current
// window's count plus the previous window's count weighted by the share
// of the previous window still inside the rolling window.
func slidingWindow(s State, p Params, now, cost int64, mode Mode) (State, Result) {
	start := windowStart(now, p.Window)
	var curr, prev int64
	if s.Exists {
		switch {
		case s.T >= start: // same window, or the clock went back
			start, curr, prev = s.T, s.A, s.B
		case s.T == start-p.Window:
			prev = s.A
		}
	}
	elapsed := max(0, now-start)
	left := start + p.Window - now
	w := float64(p.Window)
	estimate := float64(prev)*float64(p.Window-elapsed)/w + float64(curr)
	n := need(cost)
	allowed := estimate+float64(n) <= float64(p.Limit)
	var retry int64
	if !allowed {
		room := p.Limit - n - curr
		switch {
		case n > p.Limit:
			retry = left + p.Window
		case room >= 0:
			// Wait for the previous window's weight to shrink enough.
			retry = ceilPos(float64(left) - float64(room)*w/float64(prev))
		default:
			// Wait into the next window, where this window's count
			// becomes the weighted previous one.
			retry = left + ceilPos(w-float64(p.Limit-n)*w/float64(curr))
		}
	}
	if allowed || mode == Force {
		added := max(0, min(cost, 2*p.Limit-curr)) // debt: see Decide
		curr += added
		estimate += float64(added)
	}
	r := Result{
		Allowed:    allowed,
		Remaining:  floorNonNeg(float64(p.Limit) - estimate),
		RetryAfter: retry,
	}
	switch {
	case curr > 0:
		r.ResetAfter = left + p.Window
	case prev > 0:
		r.ResetAfter = left
	}
	return State{Exists: true, T: start, A: curr, B: prev}, r
}
