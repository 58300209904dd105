package share

import (
	"errors"
	"math"
	"math/rand/v2"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/pkg/lrumap"
)

// DefaultMaxBytes is a Tracker's default byte budget.
const DefaultMaxBytes = 64 << 20

// DefaultMaxSidecars is how many sidecars one key remembers by default.
const DefaultMaxSidecars = 64

// Options bound a Tracker. Zero values take the defaults given. A plain
// value, safe to share between goroutines.
type Options struct {
	// MaxBytes bounds the tracker's memory: its keys, their reports and
	// the names in them (least recently reported keys dropped first).
	// Default DefaultMaxBytes.
	MaxBytes int64
	// MaxSidecars is how many sidecars one key remembers (the stalest
	// dropped first). Default DefaultMaxSidecars.
	MaxSidecars int
	// Replicas, if set, is how many trackers hand shares of the same
	// limits without seeing each other's reports (the servers of cached
	// mode, each allotting to its own tier): each divides the pool by it.
	// Unset, the tracker sees every report.
	Replicas func() int
}

// Tracker remembers, per key, the latest report and allowance of each
// sidecar, and applies the rule. It is safe for concurrent use.
type Tracker struct {
	keys        *lrumap.Map[keyState]
	maxSidecars int
	replicas    func() int
}

type keyState struct {
	reports []entry
	// expires is when the last of its reports goes stale (ns).
	expires int64
}

// entry is one sidecar's latest report for a key.
type entry struct {
	peer, sidecar string
	rate          float64
	interval      time.Duration
	at            int64   // ns, when the report came
	gap           int64   // ns since the sidecar's report before it; 0: none
	granted       float64 // the allowance the report was answered with
	held          float64 // Report.Held, at most peak+heldSlack
	// hold is the units of a loose key it may keep unrecorded for holdFor
	// after the answer (AllotHold); 0: none.
	hold    float64
	holdFor time.Duration
	// peak is the most it was allowed at an answer within spendable of
	// peakAt (ns).
	peak   float64
	peakAt int64
}

// entryBytes is what one report costs a key: the entry and its names.
func entryBytes(e *entry) int64 {
	return int64(unsafe.Sizeof(*e)) + int64(len(e.peer)+len(e.sidecar))
}

// spendable is how long (ns) after its answer e's allowance may be spent
// without the store knowing: lapse of its sidecar's reporting intervals,
// and one more for the answer's way back, a second at most
// (pkg/localtier).
func (e *entry) spendable() int64 {
	return min(lapse*max(int64(e.interval), e.gap)+int64(e.interval), int64(time.Second))
}

// heldSlack is what a sidecar may hold beyond the allowances it was given:
// the unit of an unused one it keeps (pkg/localtier).
const heldSlack = 1

// fresh is how long e counts for: lapse intervals of its sidecar, the
// interval being the shorter of what it says and the gap seen between its
// last two reports of the key, and at least a second, so that the demand
// of a sidecar that asks for a key seldom does not vanish from the total
// between its reports.
func (e *entry) fresh() int64 {
	iv := int64(e.interval)
	if e.gap > 0 {
		iv = min(iv, e.gap)
	} else {
		iv = 0
	}
	return max(lapse*iv, int64(time.Second), e.holding())
}

// holding is how long (ns) after its answer e's sidecar may keep hits of
// the key unrecorded under a hold, and the answer's way back; 0 without one.
func (e *entry) holding() int64 {
	if e.hold <= 0 {
		return 0
	}
	return int64(e.holdFor + e.interval)
}

// New returns a Tracker.
func New(o Options) (*Tracker, error) {
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxSidecars == 0 {
		o.MaxSidecars = DefaultMaxSidecars
	}
	if o.MaxBytes < 0 || o.MaxSidecars < 0 {
		return nil, errors.New("share: MaxBytes and MaxSidecars must not be negative")
	}
	keys, err := lrumap.New[keyState](lrumap.Options{MaxBytes: o.MaxBytes})
	if err != nil {
		return nil, err
	}
	return &Tracker{keys: keys, maxSidecars: o.MaxSidecars, replicas: o.Replicas}, nil
}

// Allot records r for key, reported at now with pool left in the limit
// after its hits, and returns the sidecar's allowance, or -1 for none
// (also for a report outside the bounds). lim caps what each peer's
// demand weighs (MaxShareWeight).
func (t *Tracker) Allot(key string, r Report, pool float64, lim Limit, now time.Time) float64 {
	g, _ := t.AllotHold(key, r, pool, lim, now)
	return g
}

// AllotHold is Allot, and on a key that is not tight and whose pool
// covers HoldMargin times the sidecars' demand over r.Hold, the units of
// it the sidecar may keep unrecorded for r.Hold (0 when r.Hold is 0): its
// demand's share of HoldShare of the pool, in whole units rounded down,
// so that the holds of all the sidecars of a key stay within HoldShare of
// what it had left at their answers. While a hold may run, the units count
// as the sidecar's in the pool the others' allowances are taken of once
// the key is tight (granted).
func (t *Tracker) AllotHold(key string, r Report, pool float64, lim Limit, now time.Time) (allowance, hold float64) {
	if !r.Valid() || math.IsNaN(pool) {
		return -1, 0
	}
	whole, replicas := pool, 1
	if t.replicas != nil {
		replicas = max(1, t.replicas())
		pool /= float64(replicas)
	}
	at := now.UnixNano()
	g := -1.0
	t.keys.Update(key, func(ks *keyState, _ bool) int64 {
		e := entry{peer: r.Peer, sidecar: r.Sidecar, rate: r.Rate, interval: r.Interval, at: at}
		holds := 0.0 // the most this sidecar may still admit of its answers
		live := ks.reports[:0]
		at0 := -1 // this sidecar's report, if it has one
		for _, x := range ks.reports {
			if at-x.at > x.fresh() { // stale: forgotten
				continue
			}
			if x.peer == e.peer && x.sidecar == e.sidecar {
				e.gap = at - x.at
				at0 = len(live)
				// It cannot hold more than it was given of late, and the
				// one unit it may keep unused (pkg/localtier).
				e.peak, e.peakAt = x.peak, x.peakAt
				e.held = min(r.Held, x.peak+heldSlack)
				// What it may still admit: its last answer while that may
				// be spent, or what it says it holds unspent, if more. Not
				// the most it was given of late (peak): what it spent of
				// that is recorded, so in the pool, and on a sliding log
				// at 1.5x the limit, whose freed units come in small
				// grants with now and then a larger one, that peak held
				// three cached servers back in each wave (0.969-0.979 of
				// exact; 0.985-0.988 without).
				if at-x.at < x.spendable() {
					holds = x.granted
				}
				holds = max(holds, e.held)
			}
			live = append(live, x)
		}
		clear(ks.reports[len(live):])
		ks.reports = live
		e.rate = r.rate(e.gap)
		switch {
		case at0 >= 0:
			ks.reports[at0] = e
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
		mine, total, exposure := weigh(ks.reports, e.peer, e.sidecar, lim.Rate*MaxShareWeight, lim.Capacity/(2*Tightness))
		g = Allot(pool, mine, total, exposure, rand.Float64())
		if g < 0 && r.Hold > 0 && total > 0 && pool >= HoldMargin*total*r.Hold.Seconds() {
			hold = math.Floor(pool * HoldShare * mine / total)
		}
		if g > 0 {
			// Never more than is truly left: the pool less what the others
			// were allowed and have not reported since (spent, but not yet
			// in the store: they report at their own phases).
			free := pool - granted(ks.reports, e.peer, e.sidecar, at)
			if replicas > 1 {
				// The other replicas hand out shares of the same limit, which
				// this tracker does not see: each is taken to hold the most
				// this one's sidecar may still admit of its answers, so that
				// a pool that shrinks (a window's end) is not handed out again
				// while theirs are spent (three servers in cached mode
				// admitted 1.06-1.085 × exact so).
				free = min(free, whole-float64(replicas-1)*holds-granted(ks.reports, e.peer, e.sidecar, at))
			}
			if g > free {
				g = roundRandom(max(0, free), rand.Float64())
			}
		}
		for i := range ks.reports {
			if x := &ks.reports[i]; x.peer == e.peer && x.sidecar == e.sidecar {
				x.granted = max(0, g)
				x.hold, x.holdFor = hold, r.Hold
				if x.granted >= x.peak || at-x.peakAt > x.spendable() {
					x.peak, x.peakAt = x.granted, at
				}
			}
		}
		size := int64(cap(ks.reports)) * int64(unsafe.Sizeof(entry{}))
		ks.expires = 0
		for i := range ks.reports {
			x := &ks.reports[i]
			size += int64(len(x.peer) + len(x.sidecar))
			ks.expires = max(ks.expires, x.at+x.fresh())
		}
		return size
	})
	return g, hold
}

// Sweep drops the keys whose reports have all gone stale by now (a key
// reported within the last MaxInterval×lapse may wait for the next sweep),
// so that memory held for sidecars that went away is given back without a
// new report of the same key. The owner calls it on a timer.
func (t *Tracker) Sweep(now time.Time) int {
	at := now.UnixNano()
	return t.keys.Sweep(func(ks *keyState) bool { return ks.expires <= at })
}

// Len is the keys held; Bytes the memory they are counted to hold.
func (t *Tracker) Len() int     { return t.keys.Len() }
func (t *Tracker) Bytes() int64 { return t.keys.Bytes() }
