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
// The log holds at most 2 × Limit units (Limit and a debt of Limit, see
// Decide): a Force (hits a local tier already admitted) records what fits
// below that and drops the rest. A log holding Limit units at now already
// denies everything until now+Window, so the units dropped would change no
// answer within that Window; the cap bounds a key's memory and debt
// whatever cost a caller sends.
func slidingLog(s State, p Params, now, cost int64, mode Mode) (State, Result) {
	log := s.Log
	if k := len(log); k > 0 && log[k-1].T > now {
		now = log[k-1].T // the clock went back: judge at the newest hit
	}
	log = log[sort.Search(len(log), func(i int) bool { return log[i].T > now-p.Window }):]
	count := logUnits(log)
	n := need(cost)
	allowed := count+n <= p.Limit
	var retry int64
	if !allowed {
		if n > p.Limit || count == 0 {
			retry = p.Window
			if count > 0 {
				retry = log[len(log)-1].T + p.Window - now
			}
		} else {
			// The oldest k = count+n-Limit units must leave the window: wait
			// for the run holding the k-th.
			k := count + n - p.Limit
			base := log[0].Total - log[0].N
			j := sort.Search(len(log), func(i int) bool { return log[i].Total-base >= k })
			retry = log[j].T + p.Window - now
		}
	}
	if (allowed || mode == Force) && cost > 0 {
		if add := min(cost, max(0, p.Limit+maxDebt(limitSize(p), p.Limit)-count)); add > 0 {
			log = appendRun(log, now, add)
			count += add
		}
	}
	r := Result{Allowed: allowed, Remaining: max(0, p.Limit-count), RetryAfter: retry}
	r.Left = float64(r.Remaining)
	if count > 0 {
		r.ResetAfter = log[len(log)-1].T + p.Window - now
	}
	return State{Exists: count > 0, Log: log}, r
}

// slidingLogRecord places cost admitted at `at` (at most a window before
// now) at its own time, or at the newest run's if that is later (a log's
// times never decrease, and a later time only keeps the units longer),
// within the log's cap as a Force.
func slidingLogRecord(s State, p Params, now, at, cost int64) State {
	log := s.Log
	if k := len(log); k > 0 && log[k-1].T > now {
		now = log[k-1].T // the clock went back, as in slidingLog
	}
	log = log[sort.Search(len(log), func(i int) bool { return log[i].T > now-p.Window }):]
	place := max(at, now-p.Window+1)
	if k := len(log); k > 0 {
		place = max(place, log[k-1].T)
	}
	if add := min(cost, max(0, p.Limit+maxDebt(limitSize(p), p.Limit)-logUnits(log))); add > 0 {
		log = appendRun(log, place, add)
	}
	return State{Exists: len(log) > 0, Log: log}
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

// slidingLogRefund gives back the cost a take at taken added: the run at
// taken loses cost units (and goes when it has none left), and every later
// run's running total drops by as much. It copies the log: a refund is rare
// (a request across Cluster slots that another slot refused).
func slidingLogRefund(s State, _ Params, taken, cost int64) State {
	j := len(s.Log) - 1
	for j >= 0 && s.Log[j].T > taken {
		j--
	}
	if j < 0 || s.Log[j].T != taken {
		return s // left the log since, or never in it
	}
	log := make([]Run, 0, len(s.Log))
	log = append(log, s.Log[:j]...)
	if r := s.Log[j]; r.N > cost {
		log = append(log, Run{T: r.T, N: r.N - cost, Total: r.Total - cost})
	}
	for _, r := range s.Log[j+1:] {
		log = append(log, Run{T: r.T, N: r.N, Total: r.Total - cost})
	}
	return State{Exists: len(log) > 0, Log: log}
}
