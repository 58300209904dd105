package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/algorithm"
)

// Unit is the time unit of a limit. The zero value is no unit: it is what an
// unlimited limit carries.
//
// Units are plain values, safe to share between goroutines.
type Unit uint8

// The units envoyproxy/ratelimit accepts, in its order of size.
const (
	UnitSecond Unit = iota + 1
	UnitMinute
	UnitHour
	UnitDay
	UnitWeek
	UnitMonth
	UnitYear
)

var unitNames = [...]string{"", "second", "minute", "hour", "day", "week", "month", "year"}

// unitSeconds are envoyproxy/ratelimit's dividers (src/utils/utilities.go
// UnitToDivider): a month is 30 days and a year 365 days, never calendar
// lengths, so that fixed windows start at the same epoch-aligned instants as
// the reference's and a migrating fleet counts in the same windows.
var unitSeconds = [...]int64{0, 1, 60, 60 * 60, 60 * 60 * 24, 60 * 60 * 24 * 7, 60 * 60 * 24 * 30, 60 * 60 * 24 * 365}

// String returns the unit's lower-case name, as written in config files.
func (u Unit) String() string {
	if int(u) < len(unitNames) && u != 0 {
		return unitNames[u]
	}
	return "Unit(" + strconv.Itoa(int(u)) + ")"
}

// Duration returns the unit's length as envoyproxy/ratelimit defines it;
// zero for the zero Unit or an unknown one.
func (u Unit) Duration() time.Duration {
	if int(u) < len(unitSeconds) {
		return time.Duration(unitSeconds[u]) * time.Second
	}
	return 0
}

// ParseUnit parses a unit name case-insensitively, as the reference does
// (it upper-cases the name and looks it up in the proto enum).
func ParseUnit(s string) (Unit, error) {
	for u := UnitSecond; u <= UnitYear; u++ {
		if strings.EqualFold(s, unitNames[u]) {
			return u, nil
		}
	}
	return 0, fmt.Errorf("unknown unit %s (want second, minute, hour, day, week, month or year)", Quote(s))
}

// MaxSlidingLogLimit caps requests_per_unit for sliding_log limits
// (algorithm.MaxSlidingLogLimit): the log keeps an entry per admitted
// request in the window, so a key's memory grows with the limit.
const MaxSlidingLogLimit = algorithm.MaxSlidingLogLimit

// MaxWindow caps unit × unit_multiplier. It keeps every window, and "now"
// plus a couple of windows in nanoseconds, well inside an int64 so that no
// algorithm or store TTL overflows.
const MaxWindow = algorithm.MaxWindow * time.Microsecond

// CheckWindow reports whether unit × multiplier is a window sluice can
// count: a known unit, a multiplier of at least 1, at most MaxWindow in all.
// It multiplies in seconds, so no multiplier overflows the check. The config
// files and Envoy's per-request limit overrides are held to it alike.
func CheckWindow(u Unit, multiplier uint32) error {
	secs := int64(u.Duration() / time.Second)
	switch {
	case secs == 0:
		return fmt.Errorf("unknown unit %v", u)
	case multiplier == 0:
		return errors.New("unit_multiplier must be at least 1")
	case uint64(multiplier)*uint64(secs) > uint64(MaxWindow/time.Second):
		return fmt.Errorf("window %d × %s is longer than the maximum of %v", multiplier, u, MaxWindow)
	}
	return nil
}

// CheckAlgorithm reports whether requestsPerUnit (and burst) suit the
// algorithm's own rules (a sliding log's cap, say): algorithm.Params.Validate,
// with a window that is valid.
func CheckAlgorithm(k algorithm.Kind, requestsPerUnit, burst uint32) error {
	if requestsPerUnit == 0 {
		return nil // blocks: never decided
	}
	p := algorithm.Params{Kind: k, Limit: int64(requestsPerUnit), Window: 1, Burst: int64(burst)}
	if !k.HasBurst() {
		p.Burst = 0
	}
	if k == algorithm.Concurrency {
		p.Holder = "h" // each request names its own
	}
	return p.Validate()
}

// Validate checks a limit built outside Parse (an Envoy override applied
// to a configured limit, say) against the rules Parse holds files to.
func (r RateLimit) Validate() error {
	if r.Unlimited {
		return nil
	}
	if err := CheckWindow(r.Unit, r.UnitMultiplier); err != nil {
		return err
	}
	return CheckAlgorithm(r.Algorithm, r.RequestsPerUnit, r.Burst)
}

// RateLimit is the resolved rate_limit block of a descriptor.
//
// For an Unlimited limit, Unit, RequestsPerUnit and Burst are zero,
// UnitMultiplier is 1 and Algorithm is the zero value: nothing is counted.
// Otherwise RequestsPerUnit, UnitMultiplier and Burst are at least 1.
//
// A plain value, safe to copy and to read from many goroutines.
type RateLimit struct {
	Name            string // `name` from the file; may be empty
	Unit            Unit
	UnitMultiplier  uint32 // >= 1
	RequestsPerUnit uint32
	Unlimited       bool
	Algorithm       algorithm.Kind
	// AlgorithmSet: the file names the algorithm (Algorithm is otherwise
	// the default, a token bucket).
	AlgorithmSet bool
	Burst        uint32 // token_bucket and gcra capacity; defaults to RequestsPerUnit
	// CountRefused: the hits of a refused request count too (a charge
	// known after the fact, such as a response's LLM tokens): the key goes
	// into debt, up to one window's refill (the limit, or the burst if
	// smaller), and is refused until it is repaid.
	CountRefused bool
	// Holder (concurrency, where it is required): the request's value of
	// the limit's own descriptor entry names the holder of the units it
	// takes and its refund frees (algorithm.Params.Holder); every value
	// counts on one counter.
	Holder bool
	// Calendar, if set, aligns a fixed window on this zone's calendar:
	// months from the 1st at midnight, days from midnight, weeks from
	// Monday (CalendarPeriod), in place of epoch-aligned windows of 30-day
	// months and 24-hour days.
	Calendar *time.Location
}

// Blocks reports whether the limit denies every request: the reference's
// requests_per_unit: 0. Such a limit needs no state and no store call.
func (r RateLimit) Blocks() bool { return !r.Unlimited && r.RequestsPerUnit == 0 }

// Window returns the limit's window, Unit.Duration() × UnitMultiplier; zero
// for an unlimited limit. Parse guarantees it is at most MaxWindow.
func (r RateLimit) Window() time.Duration {
	return r.Unit.Duration() * time.Duration(r.UnitMultiplier)
}

// HasBurst reports whether the algorithm has a burst of its own
// (token_bucket, gcra); the others admit RequestsPerUnit per window.
func (r RateLimit) HasBurst() bool { return r.Algorithm.HasBurst() }

// Params are the algorithm's parameters for the limit: RequestsPerUnit per
// Window, with its Burst. For a limit that blocks or is unlimited they are
// not valid: such limits are never decided.
func (r RateLimit) Params() algorithm.Params {
	return algorithm.Params{
		Kind:   r.Algorithm,
		Limit:  int64(r.RequestsPerUnit),
		Window: r.Window().Microseconds(),
		Burst:  int64(r.Burst),
	}
}

// Entry is one (key, value) pair of a request's descriptor. It is comparable
// and is used directly as a map key, so matching builds no strings.
//
// A plain value, safe to share between goroutines.
type Entry struct{ Key, Value string }

// Limit is one descriptor node that carries a rate_limit, as matched.
// Limits are shared by every request that matches them: never modify one.
//
// Being read only, a Limit is safe for concurrent use.
type Limit struct {
	Domain string
	// Path identifies the configured node; see the package documentation for
	// its form. It is unique within a Config.
	Path      string
	RateLimit RateLimit
	// ShadowMode: evaluate and count, but always answer OK.
	ShadowMode bool
	// QuotaMode (the reference's quota_mode): a quota descriptor. Its being
	// over limit is reported in its status, but fails the request only when
	// every quota descriptor of the request is over limit and no other
	// limit is; it never holds the request's other limits back.
	QuotaMode bool
	// Shared holds, per entry of the descriptors the limit matches, the
	// wildcard value all of whose matches count on one counter
	// (share_threshold), or "" where the entry's own value counts; nil
	// when no entry is shared.
	Shared []string
	// Metric, when a descriptor on the limit's path sets value_to_metric,
	// says per entry what the limit's metrics carry for it; nil otherwise.
	Metric []MetricEntry
	// Metadata is the descriptor's metadata, as JSON-like values
	// (map[string]any, []any, string, float64, bool, nil), returned in the
	// response's dynamic metadata for a request it admits. Read only.
	Metadata map[string]any
	// DetailedMetric asks for metrics named after the request's own entries
	// (the reference appends each entry's key_value) rather than after Path.
	DetailedMetric bool
	// Replaces lists the names of limits this one replaces: when one request
	// matches both, the replaced limits are not evaluated (README "Replaces").
	Replaces []string
	File     string // the file that defines it, as named to Load or Parse
	Line     int    // the line of its descriptor in File
}

// MetricEntry is what a limit's metrics carry for one request entry when
// value_to_metric asks for the request's values: key_Value, or the key
// alone when Value is "" (matched by key only); with Runtime, key_ and the
// request's own value.
//
// A plain value, safe to share between goroutines.
type MetricEntry struct {
	Runtime bool
	Value   string
}

// PolicyName returns the name used in headers, reasons and metrics:
// RateLimit.Name if set, else Path.
func (l *Limit) PolicyName() string {
	if l.RateLimit.Name != "" {
		return l.RateLimit.Name
	}
	return l.Path
}

// Error is a config error at a place in a file. Line is 1-based; it is 0
// when the error concerns a file as a whole.
//
// A plain value, safe to share between goroutines once returned.
type Error struct {
	File   string
	Line   int
	Reason string
}

// Error formats the error as "file:line: reason", the form editors and
// terminals turn into a link.
func (e *Error) Error() string {
	if e.Line <= 0 {
		return e.File + ": " + e.Reason
	}
	return e.File + ":" + strconv.Itoa(e.Line) + ": " + e.Reason
}
