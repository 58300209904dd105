package algorithm

// spec is everything one algorithm is. Adding an algorithm means a Go file
// with these functions, a Lua file mirroring decide and refund
// (pkg/global/lua/<name>.lua, defining the module <name>; see common.lua
// there), and a row of kinds; the Lua scripts are assembled from the
// table, and the differential tests run every row against its Lua.
type spec struct {
	name     string
	hasBurst bool
	// decide is the decision (see Decide).
	decide func(s State, p Params, now, cost int64, mode Mode) (State, Result)
	// refund gives back what a Take of cost at taken (the `now` it was
	// decided at) consumed (see Refund).
	refund func(s State, p Params, taken, cost int64) State
	// giveBack gives cost back to s at now (see GiveBack), and says how
	// much of it it gave back.
	giveBack func(s State, p Params, now, cost int64) (State, float64)
	// record forces cost admitted at `at`, a window ago at most, into s at
	// now (see Record); nil: charged at now, as a Force (the buckets, whose
	// refill since at the charge only makes conservative).
	record func(s State, p Params, now, at, cost int64) State
	// keep is how long a store keeps a state whose ResetAfter is reset:
	// longer than reset where a late record still needs the state (see
	// Keep); nil: reset.
	keep func(p Params, reset int64) int64
	// capacity is the most that any run of requests the algorithm admits
	// can spend at once (see Capacity).
	capacity func(p Params) int64
	// maxCost is the largest cost a request can ever be admitted with.
	maxCost func(p Params) int64
	// stateBytes bounds the memory a key's state may hold.
	stateBytes func(p Params) int64
	// remembers is how long a hit affects later decisions, in µs.
	remembers func(p Params) int64
	// validate checks the algorithm's own rules, beyond Params.Validate's.
	validate func(p Params) error
}

var kinds = [numKinds]spec{
	TokenBucket:   {"token_bucket", true, tokenBucket, tokenBucketRefund, tokenBucketGiveBack, nil, nil, burstSize, burstSize, stringStateBytes, refillTime, nil},
	GCRA:          {"gcra", true, gcra, gcraRefund, gcraGiveBack, nil, nil, burstSize, burstSize, stringStateBytes, refillTime, nil},
	SlidingWindow: {"sliding_window", false, slidingWindow, slidingWindowRefund, slidingWindowGiveBack, slidingWindowRecord, nil, limitSize, limitSize, stringStateBytes, twoWindows, nil},
	FixedWindow:   {"fixed_window", false, fixedWindow, fixedWindowRefund, fixedWindowGiveBack, fixedWindowRecord, fixedWindowKeep, twoLimits, limitSize, stringStateBytes, oneWindow, nil},
	SlidingLog:    {"sliding_log", false, slidingLog, slidingLogRefund, slidingLogGiveBack, slidingLogRecord, nil, limitSize, limitSize, slidingLogStateBytes, oneWindow, validateSlidingLog},
	Concurrency:   {"concurrency", false, concurrency, concurrencyRefund, concurrencyGiveBack, nil, nil, limitSize, limitSize, concurrencyStateBytes, oneWindow, validateConcurrency},
}

// Record forces cost units that a local tier admitted age µs before now
// into s, as Decide's Force does, but in the window that held their
// admission: a hit admitted at t and recorded later counts against the
// window (or, for the sliding window, the previous window) that held t,
// and a record that arrives after that window closed is carried into the
// current one only by the amount that takes the closed window over its
// limit (what it could not have admitted). An age is clamped to [0,
// Window]: a record never reaches back further than one window, and a
// negative age (a caller's mistake) is taken as 0. The buckets charge at
// now whatever the age, which only makes them stricter (the refill since
// the admission would have absorbed part of it). The Result is Force's:
// the key as the next request finds it at now. p must be valid.
func Record(s State, p Params, now, age, cost int64) (State, Result) {
	age = min(max(age, 0), p.Window)
	if rec := kinds[p.Kind].record; rec != nil && age > 0 && cost > 0 {
		s = rec(s, p, now, now-age, cost)
	} else {
		s, _ = decide(s, p, now, cost, Force)
	}
	_, r := decide(s, p, now, 0, Take)
	return s, r
}

// Keep is how long a store must keep a state whose Result's ResetAfter is
// reset: reset, except for fixed_window, whose count a record arriving in
// the next window still needs (Record), so it is kept one window longer.
// p must be valid.
func Keep(p Params, reset int64) int64 {
	if k := kinds[p.Kind].keep; k != nil {
		return k(p, reset)
	}
	return reset
}

// Refund gives back to s what a Take of cost decided at taken consumed, for
// a request whose other limits were decided apart and refused it (Redis
// Cluster: take, then refund). What other requests consumed meanwhile
// stays; a state that has moved past taken (a new window, the hits gone
// from the log) is left as it is. p must be valid.
func Refund(s State, p Params, taken, cost int64) State {
	if cost <= 0 {
		return s
	}
	return kinds[p.Kind].refund(s, p, taken, cost)
}

// Capacity is the most that any run of requests p's algorithm admits can
// spend at once: the burst of the buckets, the limit of the sliding
// window and the log, twice the limit for the fixed window (its limit at
// the end of one window and again at the start of the next). A local
// token bucket of this capacity refilling at p's rate never rejects what
// the algorithm admits. p must be valid.
func Capacity(p Params) int64 { return kinds[p.Kind].capacity(p) }

// MaxCost is the largest cost a request can ever be admitted with under p:
// a costlier one is refused however long it waits. p must be valid.
func MaxCost(p Params) int64 { return kinds[p.Kind].maxCost(p) }

// StateBytes bounds the memory one key's state holds under p, in bytes:
// a few numbers, or a sliding log's runs. p must be valid.
func StateBytes(p Params) int64 { return kinds[p.Kind].stateBytes(p) }

// Remembers is how long a hit affects later decisions under p, in µs: a
// bucket refills it within burst/rate, a window forgets it when the window
// has passed (two for the sliding window's weighted previous one). Hits
// recorded later than that (held through an outage) would put a key into
// a debt nobody ran up. p must be valid.
func Remembers(p Params) int64 { return kinds[p.Kind].remembers(p) }
