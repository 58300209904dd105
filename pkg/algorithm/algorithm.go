// Package algorithm holds sluice's rate-limit algorithms as pure functions:
// each takes the previous state of one key, the limit, the time and the cost
// and returns the new state and the decision. It does no I/O, takes no locks
// and reads no clock, so the in-memory store, the Redis Lua scripts (which
// mirror these functions line for line) and the tests share one definition.
//
// Time is an int64 count of microseconds since the Unix epoch: the unit
// Redis's TIME returns, exact in a Lua number (a float64) until the year
// 2255. Fractional quantities are float64 and are computed in the same
// order as in the Lua scripts, with explicit conversions so the Go compiler
// cannot fuse a multiply and an add (which would round differently).
//
// This package must depend on nothing but the standard library.
package algorithm

import (
	"fmt"
	"math"
	"strings"
)

// Kind names an algorithm. The zero value is TokenBucket, the default.
// Everything an algorithm is (its name, decision, refund, validation and
// bounds) is one row of the table in kinds.go.
//
// Kinds are plain values, safe to share between goroutines.
type Kind uint8

const (
	TokenBucket Kind = iota
	GCRA
	SlidingWindow
	FixedWindow
	SlidingLog
	Concurrency
	numKinds
)

func (k Kind) String() string {
	if k < numKinds {
		return kinds[k].name
	}
	return fmt.Sprintf("Kind(%d)", k)
}

// ParseKind parses an algorithm's name, case-insensitively.
func ParseKind(s string) (Kind, error) {
	for k := range numKinds {
		if strings.EqualFold(s, kinds[k].name) {
			return k, nil
		}
	}
	names := make([]string, numKinds)
	for k := range numKinds {
		names[k] = kinds[k].name
	}
	return 0, fmt.Errorf("unknown algorithm %q (want %s)", s, strings.Join(names, ", "))
}

// Kinds lists every algorithm.
func Kinds() []Kind {
	out := make([]Kind, numKinds)
	for k := range numKinds {
		out[k] = k
	}
	return out
}

// HasBurst reports whether the algorithm has a capacity of its own
// (Params.Burst); the others admit Limit per Window.
func (k Kind) HasBurst() bool { return k < numKinds && kinds[k].hasBurst }

// Params describe one limit: Limit units of cost per Window microseconds.
// Burst is the capacity of the algorithms that have one (Kind.HasBurst);
// the others ignore it.
//
// A plain value, safe to copy and to read from many goroutines. The zero
// value is not a limit: Validate refuses it.
type Params struct {
	Kind   Kind
	Limit  int64
	Window int64
	Burst  int64
	// Origin, in µs, is where the windows of fixed_window and
	// sliding_window start: Origin + k × Window. 0 aligns them on the epoch,
	// as envoyproxy/ratelimit does; a calendar limit sets it to its
	// period's start (config.CalendarPeriod).
	Origin int64
	// Holder, for a concurrency limit, names who holds the units a
	// request takes and its refund frees: the request's own id (see
	// concurrency). The other algorithms ignore it.
	Holder string
}

// MaxWindow is the longest window, in µs: 100 years of 365 days.
const MaxWindow = 100 * 365 * 24 * 3600 * 1_000_000

// Validate reports whether p can be decided on: a known algorithm, a limit
// and a window of at least 1 (the window at most MaxWindow), a burst of at
// least 1 where the algorithm has one, and the algorithm's own rules.
// Stores refuse items whose Params do not validate.
func (p Params) Validate() error {
	switch {
	case p.Kind >= numKinds:
		return fmt.Errorf("unknown algorithm %d", p.Kind)
	case p.Limit < 1:
		return fmt.Errorf("limit %d: must be at least 1", p.Limit)
	case p.Window < 1 || p.Window > MaxWindow:
		return fmt.Errorf("window %dµs: must be 1µs to %dµs", p.Window, int64(MaxWindow))
	case p.Kind.HasBurst() && p.Burst < 1:
		return fmt.Errorf("burst %d: must be at least 1", p.Burst)
	case p.Origin < 0 || p.Origin > MaxDuration:
		return fmt.Errorf("origin %dµs: must be 0 to %dµs", p.Origin, int64(MaxDuration))
	}
	if v := kinds[p.Kind].validate; v != nil {
		return v(p)
	}
	return nil
}

// Mode says how a decision treats its cost.
//
// Modes are plain values, safe to share between goroutines.
type Mode uint8

const (
	// Take consumes the cost when it fits and nothing otherwise.
	Take Mode = iota
	// Force consumes the cost even when it does not fit, so the state can
	// go into debt: used to record hits that a local tier already admitted.
	// The debt is capped at min(capacity, Limit) units, one window's refill
	// (see Decide), so however large the cost, the key admits again within
	// Window + ⌈Window/Limit⌉ µs (two windows for fixed_window and
	// sliding_log, which repay it: in the next window, or as room appears). The Result then describes the key as the
	// next request finds it, as a zero-cost check right after recording
	// would: Allowed iff one more unit fits, RetryAfter until it does.
	Force
	// Count consumes the cost whether it fits or not, and judges the
	// request as Take would have: envoyproxy/ratelimit's counting, where
	// every hit counts, rejected ones included. The Result is Take's
	// verdict, with what is left after the hits (and, on a rejection, the
	// wait they impose for one more unit, at most Window + ⌈Window/Limit⌉
	// µs); the debt is capped as Force's.
	Count
	// GiveBack returns the cost to the key as it is now, at most what it
	// holds as consumed, and is never refused: Envoy's refunds
	// (is_negative_hits), which settle an earlier charge without naming
	// it. See giveBack for each algorithm's rule.
	GiveBack
)

// Result is one decision. Durations are in microseconds.
//
// A plain value, safe to copy and to read from many goroutines.
type Result struct {
	Allowed bool
	// Remaining is what is left after this decision, rounded down.
	Remaining int64
	// Left is what is left unrounded, never below 0: a bucket's refill
	// and a sliding window's weighted estimate are fractional. What the
	// sidecars' shares are taken of (pkg/share): rounding each answer's
	// pool down would lose up to a unit a report on a tight key.
	Left float64
	// RetryAfter is how long until the same request could be admitted;
	// zero when Allowed.
	RetryAfter int64
	// ResetAfter is how long until the key's state equals a fresh key's,
	// which is also how long the state must be kept; zero means the state
	// can be dropped now.
	ResetAfter int64
	// Given, for a refund (GiveBack), is what it gave back of its cost: at
	// most what the key held as consumed; the rest was clipped. Zero for
	// other decisions.
	Given float64
}

// State is the stored state of one key under any algorithm. Exists is
// false for a key with no state (a fresh key). The fields are shared:
//
//	token_bucket:   Level tokens,                 Time last update
//	gcra:           Level theoretical arrival time (µs, fractional)
//	fixed_window:   Time window start,            Count, PrevCount the previous window's
//	sliding_window: Time window start,            Count current, PrevCount previous
//	sliding_log:    Log runs of accepted units, oldest first (see Run)
//	concurrency:    Slots the units held, oldest first (see Slot)
//
// The Lua scripts store the same numbers as f, t, a and b.
//
// A State is owned by whoever holds the key (a store, under its lock): the
// functions here neither keep it nor share its Log, and a State is not safe
// for concurrent writes. The zero value is a fresh key.
type State struct {
	Exists           bool
	Level            float64
	Time             int64
	Count, PrevCount int64
	Log              []Run
	Slots            []Slot
}

// Decide runs p's algorithm; p must be valid (Params.Validate: stores
// check). A cost of zero checks without consuming: the
// decision is the one a cost of 1 would get, and the state is unchanged.
// now may go backwards between calls; no algorithm hands out allowance when
// it does.
//
// Decide never writes to an element of s.Log, but the returned state may
// append to its backing array past its length: of two states decided from
// one s, only the later may be decided on or stored (DecideAll and the
// stores keep one).
//
// Force and Count record at most one window's refill of debt, or one
// capacity where that is less: min(Burst, Limit) units below an empty
// bucket for token_bucket and gcra; Limit units past the limit for
// fixed_window and sliding_log (usage up to 2 × Limit; what Count records
// past the limit, refused hits, is never carried into the next window nor
// made a log's debt: the reference counts them, and starts every window
// afresh); for
// sliding_window a current window of at most Limit units (its estimate
// then exceeds Limit by at most the previous window's weight, itself at
// most Limit). They drop the rest, so what one caller records, and the
// wait it imposes on a key, is bounded whatever cost it sends: on a clock
// that does not go back, after any Force or Count the Result's RetryAfter
// is at most Window + ⌈Window/Limit⌉ µs (one window, plus the refill of
// the one unit it answers for), and a request of cost c ≤ MaxCost that
// follows waits at most Window + ⌈c × Window/Limit⌉ µs, each within 1 µs
// of floating-point rounding; after a Force on a fixed_window, which
// carries what is past its limit into the next window, or a sliding_log,
// whose debt enters the log as room appears and then counts a window as
// any unit does, both at most 2 × Window. Every duration in a Result is
// at most MaxDuration.
func Decide(s State, p Params, now, cost int64, mode Mode) (State, Result) {
	switch mode {
	case Force:
		return Record(s, p, now, 0, cost)
	case GiveBack:
		return giveBack(s, p, now, cost)
	case Count:
		_, verdict := decide(s, p, now, cost, Take)
		s, _ = decide(s, p, now, cost, Count)
		_, r := decide(s, p, now, 0, Take)
		r.Allowed = verdict.Allowed
		if r.Allowed {
			r.RetryAfter = 0
		}
		return s, r
	}
	return decide(s, p, now, cost, Take)
}

func decide(s State, p Params, now, cost int64, mode Mode) (State, Result) {
	return kinds[p.Kind].decide(s, p, now, cost, mode)
}

// maxDebt is the most a Force or Count records beyond what fits (see
// Decide), for an algorithm of this capacity (Capacity) and limit: one
// window's refill, the limit, or the capacity where that is less (only a
// bucket's burst can be). A debt of the limit is repaid within one window,
// so no charge holds a key back for longer than a window and the refill of
// the request that waits; a debt of a burst larger than the limit (100 on
// 1 a day) would hold it back for as many windows as the burst has units.
func maxDebt(capacity, limit int64) int64 { return min(capacity, limit) }

// need is the cost a decision is judged on: a zero-cost check asks whether
// one more unit would fit.
func need(cost int64) int64 {
	if cost < 1 {
		return 1
	}
	return cost
}

// MaxDuration bounds every duration a Result reports, in µs (2^53, about
// 285 years): exact in a float64 (and so in Lua), and still a valid
// time.Duration once converted to nanoseconds. Only limits whose burst is
// vastly larger than their rate come near it.
const MaxDuration = 1 << 53

// ceilPos rounds a positive duration up to whole µs, within MaxDuration.
func ceilPos(x float64) int64 {
	switch {
	case x <= 0:
		return 0
	case x >= MaxDuration:
		return MaxDuration
	}
	return int64(math.Ceil(x))
}
