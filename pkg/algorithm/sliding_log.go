package algorithm

import (
	"fmt"
	"sort"
	"unsafe"
)

// Run is one entry of a sliding log: N units of cost accepted at time T
// (µs), Total being the units accepted up to and including them since the
// log's oldest entry was written (a running sum, so that the k-th oldest
// unit is found by binary search). A log is oldest first; its times never
// decrease and each run holds at least one unit.
//
// A plain value, safe to copy and to read from many goroutines.
type Run struct {
	T, N, Total int64
}

// slidingLog is exact: it keeps the time of every accepted unit of cost in
// the last Window, as runs of units accepted at one instant, so a request
// of any cost adds at most one run and a decision reads O(log runs) of
// them. A unit accepted at time t counts while t > now-Window.
//
// What a Force or a late record adds past a full log (Limit units) is the
// log's debt: an exact log would have accepted those units only as room
// appeared, so they enter it as its oldest units leave (slide), and count
// a window from then. Without it a log repaid its excess by nothing: a
// flood of async sidecars, whose records land a few milliseconds after
// their admissions, took the limit and their excess again in every window
// (1.02-1.03 of an exact limiter, issue 22). A key in debt is held back
// at most two windows: the debt enters within one, and counts one.
//
// The log and its debt hold at most 2 × Limit units: a Force records what
// fits below that and drops the rest, which bounds a key's memory and the
// wait it imposes whatever cost a caller sends.
func slidingLog(s State, p Params, now, cost int64, mode Mode) (State, Result) {
	log, debt, now := logAt(s, p, now)
	n := need(cost)
	allowed := logUnits(log)+debt+n <= p.Limit
	var retry int64
	if !allowed {
		retry = logWait(log, debt, p, now, n)
	}
	switch {
	case cost == 0:
	case allowed || mode == Force:
		log, debt = logAdd(log, debt, p, now, cost)
	case mode == Count:
		// Refused hits counted (envoyproxy/ratelimit's counting): at now,
		// within the cap, never as debt, which would hold the key longer.
		if add := min(cost, max(0, p.Limit+maxDebt(limitSize(p), p.Limit)-logUnits(log)-debt)); add > 0 {
			log = appendRun(log, now, add)
		}
	}
	return logState(log, debt), logResult(log, debt, p, now, allowed, retry)
}

// logAt is s's runs and debt at now, and now: taken to the newest run's
// time if the clock went back (a log judges at its newest hit), the runs
// gone by then dropped and the debt moved into the room they left (slide).
func logAt(s State, p Params, now int64) ([]Run, int64, int64) {
	log, debt := splitDebt(s.Log)
	if k := len(log); k > 0 && log[k-1].T > now {
		now = log[k-1].T
	}
	log, debt = slide(log, debt, p, now)
	return log, debt, now
}

// logWait is how long a request of n units, refused, waits on log and
// debt at now: for the oldest units to leave, the first of them making
// room for the debt; past the log's units, for the debt, which enters by
// the time its last unit's place leaves (slide), to leave a window later.
func logWait(log []Run, debt int64, p Params, now, n int64) int64 {
	count := logUnits(log)
	if n > p.Limit || count == 0 {
		if count == 0 {
			return p.Window
		}
		return log[len(log)-1].T + p.Window - now
	}
	k := count + debt + n - p.Limit
	if k <= count {
		return log[unitRun(log, k)].T + p.Window - now
	}
	return log[unitRun(log, logExcess(log, p)+debt)].T + 2*p.Window - now
}

// logResult is the Result of a decision that leaves log and debt at now.
func logResult(log []Run, debt int64, p Params, now int64, allowed bool, retry int64) Result {
	count := logUnits(log)
	r := Result{Allowed: allowed, Remaining: max(0, p.Limit-count-debt), RetryAfter: retry}
	r.Left = float64(r.Remaining)
	switch {
	case debt > 0:
		r.ResetAfter = log[unitRun(log, logExcess(log, p)+debt)].T + 2*p.Window - now
	case count > 0:
		r.ResetAfter = log[len(log)-1].T + p.Window - now
	}
	return r
}

// logAdd adds cost units at t, the log's newest time or later: what fits
// below the limit to the log, the rest to its debt, within 2 × Limit.
func logAdd(log []Run, debt int64, p Params, t, cost int64) ([]Run, int64) {
	count := logUnits(log)
	if add := min(cost, max(0, p.Limit-count-debt)); add > 0 {
		log = appendRun(log, t, add)
		count += add
		cost -= add
	}
	if cost > 0 {
		debt += min(cost, max(0, p.Limit+maxDebt(limitSize(p), p.Limit)-count-debt))
	}
	return log, debt
}

// slide drops the runs of log that left the window at now, and moves as
// much of debt as their leaving makes room for into the log: at the time
// the newest unit it replaces left (each would have entered as one left;
// later, never earlier), and not at all if that is a window ago already.
// A log holding more than Limit units (an older server's) first sheds the
// excess.
func slide(log []Run, debt int64, p Params, now int64) ([]Run, int64) {
	i := sort.Search(len(log), func(i int) bool { return log[i].T > now-p.Window })
	kept := log[i:]
	if debt == 0 || i == 0 {
		return kept, debt
	}
	left := logUnits(log) - logUnits(kept)
	excess := logExcess(log, p)
	c := min(debt, left-excess)
	if c <= 0 {
		return kept, debt
	}
	at := log[unitRun(log, excess+c)].T + p.Window
	if k := len(kept); k > 0 {
		at = max(at, kept[k-1].T)
	}
	if at > now-p.Window {
		kept = appendRun(kept, at, c)
	}
	return kept, debt - c
}

// logExcess is how many units log holds past the limit.
func logExcess(log []Run, p Params) int64 { return max(0, logUnits(log)-p.Limit) }

// unitRun is the index of the run of log holding its k-th oldest unit
// (1 ≤ k ≤ its units).
func unitRun(log []Run, k int64) int {
	base := log[0].Total - log[0].N
	return sort.Search(len(log), func(i int) bool { return log[i].Total-base >= k })
}

// splitDebt is a stored log's runs and its debt. The debt is stored as a
// last run at the time of the run before it: runs at one instant merge
// (appendRun), so two in a row at one time mark the debt, and a server of
// an older version, which knows no debt, reads it as units accepted then,
// as it recorded its own excess: a rolling upgrade loses no unit. The runs
// returned end before the debt's place, so appending to them never writes
// over it.
func splitDebt(log []Run) ([]Run, int64) {
	if k := len(log); k >= 2 && log[k-1].T == log[k-2].T {
		return log[: k-1 : k-1], log[k-1].N
	}
	return log, 0
}

// logState is the state of log and its debt (splitDebt). A debt with no
// run to follow cannot be: it enters a log once the log has room.
func logState(log []Run, debt int64) State {
	if k := len(log); k > 0 && debt > 0 {
		last := log[k-1]
		log = append(log, Run{T: last.T, N: debt, Total: last.Total + debt})
	}
	return State{Exists: len(log) > 0, Log: log}
}

// slidingLogRecord places cost admitted at `at` (at most a window before
// now) at its own time, or at the newest run's if that is later (a log's
// times never decrease, and a later time only keeps the units longer):
// what fits below the limit, the rest as debt, as a Force's.
func slidingLogRecord(s State, p Params, now, at, cost int64) State {
	log, debt, now := logAt(s, p, now)
	place := max(at, now-p.Window+1)
	if k := len(log); k > 0 {
		place = max(place, log[k-1].T)
	}
	return logState(logAdd(log, debt, p, place, cost))
}

// logUnits is the units a log holds.
func logUnits(log []Run) int64 {
	if len(log) == 0 {
		return 0
	}
	return log[len(log)-1].Total - (log[0].Total - log[0].N)
}

// appendRun adds n units at t, the log's newest time, to log. It never
// writes to an element of log: it appends past its length (the backing
// array beyond a slice's length belongs to whoever appends next, so states
// derived from one another share it safely) or, when t is the newest run's
// time, copies the log to grow that run.
func appendRun(log []Run, t, n int64) []Run {
	k := len(log)
	if k > 0 && log[k-1].T == t {
		grown := make([]Run, k, k+1)
		copy(grown, log)
		grown[k-1].N += n
		grown[k-1].Total += n
		return grown
	}
	var total int64
	if k > 0 {
		total = log[k-1].Total
	}
	return append(log, Run{T: t, N: n, Total: total + n})
}

// MaxSlidingLogLimit caps a sliding log's limit: its key holds up to 2 ×
// Limit runs of Run's size, so at the cap about 480 KB. Larger limits
// should use sliding_window, which keeps two counters.
const MaxSlidingLogLimit = 10_000

func validateSlidingLog(p Params) error {
	if p.Limit > MaxSlidingLogLimit {
		return fmt.Errorf("sliding_log keeps an entry per request, so requests_per_unit (its limit) may be at most %d (got %d); use sliding_window for larger limits", MaxSlidingLogLimit, p.Limit)
	}
	return nil
}

// slidingLogStateBytes bounds a log key's memory: 2 × Limit runs.
func slidingLogStateBytes(p Params) int64 {
	return 64 + 2*p.Limit*int64(unsafe.Sizeof(Run{}))
}

// slidingLogRefund gives back the cost a take at taken added: from the
// debt first (the room the take's units leave is the debt's at once), then
// the run at taken loses what is left of cost (and goes when it has none
// left), and every later run's running total drops by as much. It copies
// the log: a refund is rare (a request across Cluster slots that another
// slot refused).
func slidingLogRefund(s State, _ Params, taken, cost int64) State {
	runs, debt := splitDebt(s.Log)
	given := min(cost, debt)
	debt -= given
	cost -= given
	j := len(runs) - 1
	for j >= 0 && runs[j].T > taken {
		j--
	}
	if cost == 0 || j < 0 || runs[j].T != taken {
		// left the log since, or never in it
		return logState(runs, debt)
	}
	log := make([]Run, 0, len(runs)+1)
	log = append(log, runs[:j]...)
	if r := runs[j]; r.N > cost {
		log = append(log, Run{T: r.T, N: r.N - cost, Total: r.Total - cost})
	}
	for _, r := range runs[j+1:] {
		log = append(log, Run{T: r.T, N: r.N, Total: r.Total - cost})
	}
	return logState(log, debt)
}
