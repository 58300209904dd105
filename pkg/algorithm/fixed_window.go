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
func fixedWindow(s State, p Params, now, cost int64, mode Mode) (State, Result) {
	start := windowStart(now, p.Window, p.Origin)
	var count int64
	if s.Exists && s.T >= start {
		// s.T > start only when the clock went back: keep the later
		// window and its count rather than start afresh.
		start, count = s.T, s.A
	}
	n := need(cost)
	allowed := count+n <= p.Limit
	if allowed || mode == Force {
		count = max(count, min(count+cost, p.Limit+maxDebt(twoLimits(p), p.Limit))) // see Decide
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

// fixedWindowRefund takes cost off the window a take at taken counted it
// in, if that window is still the key's.
func fixedWindowRefund(s State, p Params, taken, cost int64) State {
	if s.Exists && s.T == windowStart(taken, p.Window, p.Origin) {
		s.A = max(0, s.A-cost)
	}
	return s
}

// limitSize is the largest cost a window or log admits: its limit.
func limitSize(p Params) int64 { return p.Limit }

// twoLimits is the most a fixed window admits at once: its limit at the
// end of one window and again at the start of the next.
func twoLimits(p Params) int64 { return 2 * p.Limit }

func oneWindow(p Params) int64 { return p.Window }
