package algorithm

import (
	"math"
)

// GiveBack decides a refund (Envoy's is_negative_hits): cost units go
// back to s as the key is at now, at most what it holds as consumed. The
// refund names no charge and no time, so it applies to the current state
// only: tokens back into the bucket up to its burst (and no further, so no
// credit is banked above the limit), a GCRA's arrival time back to now at
// most, the current window's count down to zero (never the previous
// window's: a refund arriving after its charge's window closed does not
// enlarge the next one), a sliding log's newest units. A debt is consumed
// too, and is given back first.
//
// The Result is a zero-cost check of the key after the refund, the limit's
// remaining then, always Allowed: a refund is never refused; its Given is
// what the refund gave back of its cost (the rest is clipped). p must be
// valid.
func giveBack(s State, p Params, now, cost int64) (State, Result) {
	var given float64
	if cost > 0 {
		s, given = kinds[p.Kind].giveBack(s, p, now, cost)
	}
	_, r := decide(s, p, now, 0, Take)
	r.Allowed, r.RetryAfter, r.Given = true, 0, given
	return s, r
}

func tokenBucketGiveBack(s State, p Params, now, cost int64) (State, float64) {
	if !s.Exists {
		return s, 0 // a fresh key is a full bucket
	}
	s, _ = tokenBucket(s, p, now, 0, Take) // refilled to now
	old := s.Level
	s.Level = math.Min(float64(p.Burst), s.Level+float64(cost))
	return s, math.Max(0, s.Level-old)
}

func gcraGiveBack(s State, p Params, now, cost int64) (State, float64) {
	if !s.Exists || s.Level <= float64(now) {
		return s, 0 // nothing consumed
	}
	interval := float64(p.Window) / float64(p.Limit)
	old := s.Level
	s.Level = math.Max(float64(now), s.Level-float64(float64(cost)*interval))
	return s, (old - s.Level) / interval
}

func fixedWindowGiveBack(s State, p Params, now, cost int64) (State, float64) {
	if !s.Exists {
		return s, 0
	}
	start, count, prev := fixedWindowAt(s, p, now)
	return State{Exists: true, Time: start, Count: max(0, count-cost), PrevCount: prev}, float64(min(count, cost))
}

func slidingWindowGiveBack(s State, p Params, now, cost int64) (State, float64) {
	if !s.Exists {
		return s, 0
	}
	start := windowStart(now, p.Window, p.Origin)
	var curr, prev int64
	switch {
	case s.Time >= start: // same window, or the clock went back
		start, curr, prev = s.Time, s.Count, s.PrevCount
	case s.Time == start-p.Window:
		prev = s.Count
	}
	return State{Exists: true, Time: start, Count: max(0, curr-cost), PrevCount: prev}, float64(min(curr, cost))
}

// slidingLogGiveBack gives back the log's debt first, then its newest
// cost units still in its window (newest first, so that its times stay in
// order). It never writes to an element of s.Log.
func slidingLogGiveBack(s State, p Params, now, cost int64) (State, float64) {
	asked := cost
	log, debt, _ := logAt(s, p, now)
	given := min(cost, debt)
	debt -= given
	cost -= given
	for cost > 0 && len(log) > 0 {
		last := log[len(log)-1]
		if last.N > cost {
			grown := make([]Run, len(log), len(log)+1)
			copy(grown, log)
			grown[len(log)-1] = Run{T: last.T, N: last.N - cost, Total: last.Total - cost}
			log = grown
			cost = 0
			break
		}
		cost -= last.N
		log = log[: len(log)-1 : len(log)-1] // what is appended next must not overwrite it
	}
	return logState(log, debt), float64(asked - cost)
}
