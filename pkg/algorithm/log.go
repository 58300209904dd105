package algorithm

// slidingLog is exact: it keeps the time of every accepted unit of cost in
// the last Window, so its memory grows with Limit (the config caps it).
// A hit at time t counts while t > now-Window.
func slidingLog(s State, p Params, now, cost int64, mode Mode) (State, Result) {
	log := s.Log
	if k := len(log); k > 0 && log[k-1] > now {
		now = log[k-1] // the clock went back: judge at the newest hit
	}
	drop := 0
	for drop < len(log) && log[drop] <= now-p.Window {
		drop++
	}
	log = log[drop:]
	count := int64(len(log))
	n := need(cost)
	allowed := count+n <= p.Limit
	var retry int64
	if !allowed {
		if n > p.Limit || count == 0 {
			retry = p.Window
			if count > 0 {
				retry = log[count-1] + p.Window - now
			}
		} else {
			// The oldest count+n-Limit hits must leave the window.
			retry = log[count+n-p.Limit-1] + p.Window - now
		}
	}
	if (allowed || mode == Force) && cost > 0 {
		// A Force of more than Limit records Limit: that many hits at now
		// already deny everything until now+Window, when they all leave
		// together, exactly as more would, and the log stays bounded
		// whatever cost a caller sends.
		add := min(cost, p.Limit)
		// Copy rather than append in place: s.Log may be shared.
		grown := make([]int64, len(log), len(log)+int(add))
		copy(grown, log)
		for i := int64(0); i < add; i++ {
			grown = append(grown, now)
		}
		log = grown
		count += add
	}
	r := Result{Allowed: allowed, Remaining: max(0, p.Limit-count), RetryAfter: retry}
	if count > 0 {
		r.ResetAfter = log[count-1] + p.Window - now
	}
	return State{Exists: count > 0, Log: log}, r
}
