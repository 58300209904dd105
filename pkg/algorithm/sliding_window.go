package algorithm

// slidingWindow estimates the hits in the last Window as the current
// window's count plus the previous window's count weighted by the share
// of the previous window still inside the rolling window.
func slidingWindow(s State, p Params, now, cost int64, mode Mode) (State, Result) {
	start := windowStart(now, p.Window, p.Origin)
	var curr, prev int64
	if s.Exists {
		switch {
		case s.Time >= start: // same window, or the clock went back
			start, curr, prev = s.Time, s.Count, s.PrevCount
		case s.Time == start-p.Window:
			prev = s.Count
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
	if allowed || mode != Take {
		// Debt: the current window holds at most Limit (see Decide). What
		// it holds weighs on the whole next window, so a count of 2 × Limit
		// would hold the key back for up to one and a half windows.
		added := max(0, min(cost, p.Limit-curr))
		curr += added
		estimate += float64(added)
	}
	r := Result{
		Allowed:    allowed,
		Remaining:  floorNonNeg(float64(p.Limit) - estimate),
		Left:       max(0, float64(p.Limit)-estimate),
		RetryAfter: retry,
	}
	switch {
	case curr > 0:
		r.ResetAfter = left + p.Window
	case prev > 0:
		r.ResetAfter = left
	}
	return State{Exists: true, Time: start, Count: curr, PrevCount: prev}, r
}

// slidingWindowRecord places cost admitted at `at` (at most a window
// before now) in the window that held it: the current one as a Force
// does, or the previous one, which takes what fits below its limit and
// carries the rest into the current one (within its cap of Limit).
func slidingWindowRecord(s State, p Params, now, at, cost int64) State {
	start := windowStart(now, p.Window, p.Origin)
	if windowStart(at, p.Window, p.Origin) >= start {
		s, _ = slidingWindow(s, p, now, cost, Force)
		return s
	}
	var curr, prev int64
	if s.Exists {
		switch {
		case s.Time >= start:
			start, curr, prev = s.Time, s.Count, s.PrevCount
		case s.Time == start-p.Window:
			prev = s.Count
		}
	}
	// What takes the closed window over its limit; a window already in
	// debt carries all of it.
	over := min(cost, max(0, prev+cost-p.Limit))
	prev = max(prev, min(prev+cost, p.Limit))
	curr += max(0, min(over, p.Limit-curr))
	return State{Exists: true, Time: start, Count: curr, PrevCount: prev}
}

// slidingWindowRefund takes cost off the window a take at taken counted it
// in: the current one, or the previous one if a window has turned since.
func slidingWindowRefund(s State, p Params, taken, cost int64) State {
	if !s.Exists {
		return s
	}
	switch start := windowStart(taken, p.Window, p.Origin); s.Time {
	case start:
		s.Count = max(0, s.Count-cost)
	case start + p.Window:
		s.PrevCount = max(0, s.PrevCount-cost)
	}
	return s
}

func twoWindows(p Params) int64 { return 2 * p.Window }
