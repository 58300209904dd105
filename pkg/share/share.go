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
// A key is tight when the demand of the next Tightness reporting
// intervals, summed over the sidecars that reported it recently, could
// take all that the limit has left (pool: what the store would admit now,
// after recording the report's hits). A sidecar's reporting interval is
// what it says: its flush interval, or, when its flushes run late or its
// calls are slow, the cycle it actually has plus a round trip, since it
// decides on one answer until the next reaches it. A key that is not tight gets no
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
// is spent after three of the intervals at which the sidecar reports the
// key (a flush interval, longer for a key it is asked for seldom; a second
// at most): the sidecar then refuses the key
// until a new answer (a stale allowance never admits). What a sidecar
// leaves unused stays in the store and enlarges the next pool, so the
// store's refill reaches the sidecars with one interval's delay.
//
// Sidecars report at their own phases, and their answers take a round
// trip to reach them, so each share is taken of a pool that does not yet
// count what the others admitted since their last report. So an allowance
// is never more than the pool less what the other sidecars may still admit
// without the store knowing: what they were allowed at their last answers,
// or what they said they still held of the one before if more, for as
// long as an allowance may be spent (three reporting intervals and one
// more). A sidecar in turn takes from each answer what it admitted while
// the answer was on its way (pkg/localtier). The pool itself is unrounded (a
// sliding window's estimate, a bucket's refill), and a sidecar keeps up to
// one unit of an allowance it did not spend (pkg/localtier), so that a
// sidecar asked for a key now and then is not refused while the limit has
// room. Everything admitted is recorded, so
// the store's debt holds the excess back in the next rounds. The model
// test (model_test.go) measures the rule over 3 to 100 sidecars.
//
// The Tracker keeps what it needs in memory, per server process, within a
// byte budget: with several server replicas behind one address, each sees
// a sidecar's reports in turn and knows only the allowances it gave
// itself. A report counts for three of the intervals at which its sidecar
// is actually seen reporting the key (at least a second, so that a
// sidecar that asks for a key seldom keeps its demand in the total in
// between), never for longer because the sidecar says it reports seldom.
package share

import (
	"errors"
	"math"
	"math/rand/v2"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/pkg/lrumap"
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
	MaxPeer      = 256
	MinInterval  = time.Millisecond
	MaxInterval  = 10 * time.Second
	MaxRate      = 1e9 // units per second
)

// What one peer's demand can weigh. A report is honoured only from an
// authenticated peer (pkg/peerauth), but a peer holding valid credentials
// can still claim any demand, under as many sidecar names as it likes. So
// the demands of one peer's sidecars on a key are summed and capped: in
// the shares at MaxShareWeight times the limit's rate, and in the
// tightness test so that one peer's claim alone makes a key tight only
// once half its capacity is used (Tightness intervals of the capped
// demand are half the capacity). Then, whatever one peer claims, every
// other peer's sidecar keeps at least half its demand-proportional share
// whenever the others' demand is at least the limit's rate (d/(d+rate) ≥
// 1/2), and a key that has more than half its capacity left is decided on
// the local buckets as before. Give each sidecar a name of its own (its
// own certificate or token): sidecars sharing one are one peer, and their
// floods are judged tight later.
const MaxShareWeight = 1

// What one report's demand can weigh against what backs it: a report's
// Rate counts for at most MaxAskedWeight times the units it says it was
// asked for (Report.Asked: the hits it records and those it refused) over
// the time since its sidecar last reported the key, as the server saw it
// or as the sidecar states its interval, the shorter. A report that
// records nothing and refused nothing claims no demand, whatever Rate it
// states; one that was asked for what it says loses nothing: the multiple
// covers reports that reach a server closer together or further apart
// than they were sent, or through one of several servers. Refusals are the
// sidecar's word, so this keeps honest sidecars' reports consistent and
// a faulty one's claims in check; against a peer that lies, the limit's
// rate caps its claim (MaxShareWeight).
const MaxAskedWeight = 4

// Allot is the rule for one sidecar: its allowance out of pool, given its
// demand's weight mine and the weight of all (total, mine included), or -1
// when the key is not tight, which is when pool covers Tightness times the
// exposure: the units the sidecars may admit on their local buckets
// within one of their reporting cycles. u is uniform in [0, 1): the share
// is rounded to whole units, up with the probability of its fraction, so
// that a sidecar whose share of a small pool is below one unit still gets
// its share over time.
func Allot(pool, mine, total, exposure, u float64) float64 {
	if total <= 0 || pool >= Tightness*exposure {
		return -1
	}
	return roundRandom(max(0, pool)*mine/total, u)
}

// roundRandom is x in whole units, rounded up with the probability of its
// fraction (u uniform in [0, 1)).
func roundRandom(x, u float64) float64 {
	whole := math.Floor(x)
	if u < x-whole {
		whole++
	}
	return whole
}

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
	return max(lapse*iv, int64(time.Second))
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
	if !r.Valid() || math.IsNaN(pool) {
		return -1
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
				if at-x.at < x.spendable() {
					holds = x.granted
				}
				if at-x.peakAt < x.spendable() {
					holds = max(holds, x.peak)
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
	return g
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
