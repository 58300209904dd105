// Package share divides what a limit has left among the async sidecars
// that draw on it (pkg/localtier), in proportion to the demand each of
// them reports.
//
// An async sidecar admits from memory and records the hits it admitted
// with the server every flush interval. With each record it reports, per
// key, its demand: the units it was asked for per second since its last
// report, admitted or not. The server answers each key of the record with
// an allowance: the units this sidecar may admit for the key until its
// next report. Envoy's rate limit quota service (budgets pushed to proxies,
// usage reported back) and Gubernator's GLOBAL behaviour are the prior art.
//
// # The rule
//
// A key is tight when the demand of the next Tightness flush intervals,
// summed over the sidecars that reported it recently, could take all that
// the limit has left (pool: what the store would admit now, after
// recording the report's hits). A key that is not tight gets no
// allowance: the sidecar decides as before, on its local bucket alone, so
// keys far from their limits are never refused. The margin is wide on
// purpose: sidecars report at their own phases, and each goes on deciding
// on its local bucket until its own next report finds the key tight; and
// on a key this far from its limit an allowance covers several intervals
// of a sidecar's demand, so only a burst several times its usual rate
// meets a refusal the limit would not have made. On a tight key sidecar i
// gets
//
//	pool · dᵢ / D
//
// in whole units (rounded up with the probability of the fraction), dᵢ its
// demand and D the demand of all the sidecars that reported the key within
// the last second. An allowance replaces the last one at each answer and
// is spent after three flush intervals: the sidecar then refuses the key
// until a new answer (a stale allowance never admits). What a sidecar
// leaves unused stays in the store and enlarges the next pool, so the
// store's refill reaches the sidecars with one interval's delay.
//
// Sidecars report at their own phases, so each share is taken of a pool
// that does not yet count what the others admitted since their last
// report: over a round of reports the allowances can exceed the pool by
// what was admitted and not yet recorded, which on a tight key is about
// one interval of the limit's refill. Everything admitted is recorded, so
// the store's debt holds the excess back in the next rounds. The model
// test (model_test.go) measures the rule over 3 to 100 sidecars.
//
// The Tracker keeps what it needs in memory, per server process: with
// several server replicas behind one address, each sees a sidecar's
// reports in turn and knows only the allowances it gave itself.
package share

import (
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// Tightness is how many flush intervals of the reported demand the pool
// must cover for a key to go without allowances. Measured (model_test.go
// and the e2e flood tests), 2 let three sidecars admit up to 8 % over a
// fixed window at each window's start; 8 holds them within 4 %.
const Tightness = 8

// lapse is how many of its flush intervals an allowance or a report
// counts for.
const lapse = 3

// Bounds on what a report may carry; the server refuses (ignores) a report
// outside them.
const (
	MaxSidecarID = 64
	MinInterval  = time.Millisecond
	MaxInterval  = 10 * time.Second
	MaxRate      = 1e9 // units per second
)

// Report is one sidecar's report for one key.
//
// A plain value, safe to copy and to share between goroutines.
type Report struct {
	// Sidecar names the sidecar, the same in every report it makes.
	Sidecar string
	// Rate is the units it was asked for per second since its last report.
	Rate float64
	// Interval is how often it reports.
	Interval time.Duration
}

// Valid reports whether r is within the bounds.
func (r Report) Valid() bool {
	return r.Sidecar != "" && len(r.Sidecar) <= MaxSidecarID &&
		r.Interval >= MinInterval && r.Interval <= MaxInterval &&
		r.Rate >= 0 && r.Rate <= MaxRate // NaN fails both
}

// Allot is the rule for one sidecar: its allowance out of pool, given its
// demand rate mine, the demand rate of all (total, mine included) and the
// flush interval in seconds; or -1 when the key is not tight. u is uniform
// in [0, 1): the share is rounded to whole units, up with the probability
// of its fraction, so that a sidecar whose share of a small pool is below
// one unit still gets its share over time.
func Allot(pool, mine, total, interval, u float64) float64 {
	if total <= 0 || pool >= Tightness*total*interval {
		return -1
	}
	g := max(0, pool) * mine / total
	whole := math.Floor(g)
	if u < g-whole {
		whole++
	}
	return whole
}

// Options bound a Tracker. Zero values take the defaults given. A plain
// value, safe to share between goroutines.
type Options struct {
	// MaxKeys is how many keys the tracker remembers (least recently
	// reported dropped first). Default 100,000.
	MaxKeys int
	// MaxSidecars is how many sidecars one key remembers (the stalest
	// dropped first). Default 256.
	MaxSidecars int
}

// Tracker remembers, per key, the latest report and allowance of each
// sidecar, and applies the rule. It is safe for concurrent use.
type Tracker struct {
	keys        *lru.Cache[string, *keyState]
	maxSidecars int
}

type keyState struct {
	mu      sync.Mutex
	reports []entry // guarded by mu
}

// entry is one sidecar's latest report for a key.
type entry struct {
	Report
	at int64 // ns, when the report came
}

// fresh is how long a report of a sidecar reporting every interval counts
// for: a sidecar that asks for a key seldom reports it seldom, and its
// demand must not vanish from the total in between.
func fresh(interval time.Duration) int64 {
	return max(lapse*int64(interval), int64(time.Second))
}

// New returns a Tracker.
func New(o Options) (*Tracker, error) {
	if o.MaxKeys == 0 {
		o.MaxKeys = 100_000
	}
	if o.MaxSidecars == 0 {
		o.MaxSidecars = 256
	}
	if o.MaxKeys < 0 || o.MaxSidecars < 0 {
		return nil, errors.New("share: MaxKeys and MaxSidecars must not be negative")
	}
	keys, err := lru.New[string, *keyState](o.MaxKeys)
	if err != nil {
		return nil, err
	}
	return &Tracker{keys: keys, maxSidecars: o.MaxSidecars}, nil
}

// Allot records r for key, reported at now with pool left in the limit
// after its hits, and returns the sidecar's allowance, or -1 for none
// (also for a report outside the bounds).
func (t *Tracker) Allot(key string, r Report, pool float64, now time.Time) float64 {
	if !r.Valid() || math.IsNaN(pool) {
		return -1
	}
	ks, ok := t.keys.Get(key)
	if !ok {
		ks = &keyState{}
		if prev, found, _ := t.keys.PeekOrAdd(key, ks); found {
			ks = prev
		}
	}
	at := now.UnixNano()
	ks.mu.Lock()
	defer ks.mu.Unlock()
	mine, total := -1, 0.0
	live := ks.reports[:0]
	for _, e := range ks.reports {
		if at-e.at > fresh(e.Interval) { // stale: forgotten
			continue
		}
		live = append(live, e)
		if e.Sidecar == r.Sidecar {
			mine = len(live) - 1
			continue
		}
		total += e.Rate
	}
	clear(ks.reports[len(live):])
	ks.reports = live
	total += r.Rate
	g := Allot(pool, r.Rate, total, r.Interval.Seconds(), rand.Float64())
	e := entry{Report: r, at: at}
	switch {
	case mine >= 0:
		ks.reports[mine] = e
	case len(ks.reports) < t.maxSidecars:
		ks.reports = append(ks.reports, e)
	default: // full: the stalest report makes room
		oldest := 0
		for i, x := range ks.reports {
			if x.at < ks.reports[oldest].at {
				oldest = i
			}
		}
		ks.reports[oldest] = e
	}
	return g
}
