package algorithm

// windowStart is the start of the window holding now, the windows
// starting at origin + k × window: with origin 0, epoch-aligned, the
// windows envoyproxy/ratelimit uses (now / divider * divider), in µs.
func windowStart(now, window, origin int64) int64 {
	r := (now - origin) % window
	if r < 0 {
		r += window
	}
	return now - r
}

// fixedWindow keeps one counter per epoch-aligned window. It admits up to
// twice the limit across a boundary; that is its documented flaw.
//
// Hits a Force records past the limit (a local tier admitted them) are
// carried into the next window (fixedWindowAt), as a late record's are
// (fixedWindowRecord): a window repays what was admitted past it, or a
// flood of async sidecars takes the limit and their excess again in every
// window (1.030-1.033 of an exact limiter, issue 22). What Count records
// past the limit (refused hits, envoyproxy/ratelimit's counting) is not
// kept: it changes no answer in its window, and the reference starts every
// window afresh.
func fixedWindow(s State, p Params, now, cost int64, mode Mode) (State, Result) {
	start, count, prev := fixedWindowAt(s, p, now)
	n := need(cost)
	allowed := count+n <= p.Limit
	switch {
	case allowed || mode == Force:
		count = max(count, min(count+cost, p.Limit+maxDebt(twoLimits(p), p.Limit))) // see Decide
	case mode == Count:
		count = max(count, min(count+cost, p.Limit))
	}
	left := start + p.Window - now
	r := Result{Allowed: allowed, Remaining: max(0, p.Limit-count)}
	r.Left = float64(r.Remaining)
	// What the next window starts with: it too must pass before a request
	// that does not fit beside it.
	carry := max(0, count-p.Limit)
	if !allowed {
		r.RetryAfter = left
		if carry+n > p.Limit {
			r.RetryAfter += p.Window
		}
	}
	if count > 0 {
		r.ResetAfter = left
		if carry > 0 {
			r.ResetAfter += p.Window
		}
	}
	return State{Exists: true, Time: start, Count: count, PrevCount: prev}, r
}

// fixedWindowAt is s brought to now's window: its start, its count and
// the previous window's (kept for records that arrive late, Record). A
// previous window past its limit carries the excess into this one.
func fixedWindowAt(s State, p Params, now int64) (start, count, prev int64) {
	start = windowStart(now, p.Window, p.Origin)
	switch {
	case !s.Exists:
	case s.Time >= start:
		// s.Time > start only when the clock went back: keep the later
		// window and its count rather than start afresh.
		start, count, prev = s.Time, s.Count, s.PrevCount
	case s.Time == start-p.Window:
		count, prev = max(0, s.Count-p.Limit), min(s.Count, p.Limit)
	}
	return start, count, prev
}

// fixedWindowRecord places cost admitted at `at` (at most a window before
// now) in the window that held it: the current one as a Force does, or
// the previous one, which takes what fits below its limit and carries the
// rest into the current window (within the debt cap).
func fixedWindowRecord(s State, p Params, now, at, cost int64) State {
	start, count, prev := fixedWindowAt(s, p, now)
	if windowStart(at, p.Window, p.Origin) >= start {
		s, _ = fixedWindow(s, p, now, cost, Force)
		return s
	}
	// What takes the closed window over its limit; a window already in
	// debt carries all of it.
	over := min(cost, max(0, prev+cost-p.Limit))
	prev = min(prev+cost, p.Limit)
	count = max(count, min(count+over, p.Limit+maxDebt(twoLimits(p), p.Limit)))
	return State{Exists: true, Time: start, Count: count, PrevCount: prev}
}

// fixedWindowKeep keeps a window's state through the next window, where a
// record that arrives late still needs its count.
func fixedWindowKeep(p Params, reset int64) int64 {
	if reset > 0 {
		return reset + p.Window
	}
	return reset
}

// fixedWindowRefund takes cost off the window a take at taken counted it
// in, if that window is still the key's.
func fixedWindowRefund(s State, p Params, taken, cost int64) State {
	if s.Exists && s.Time == windowStart(taken, p.Window, p.Origin) {
		s.Count = max(0, s.Count-cost)
	}
	return s
}

// limitSize is the largest cost a window or log admits: its limit.
func limitSize(p Params) int64 { return p.Limit }

// twoLimits is the most a fixed window admits at once: its limit at the
// end of one window and again at the start of the next.
func twoLimits(p Params) int64 { return 2 * p.Limit }

func oneWindow(p Params) int64 { return p.Window }
