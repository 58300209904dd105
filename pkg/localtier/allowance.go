package localtier

import (
	"time"

	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/lrumap"
)

// allowanceLapse is how many of the intervals at which a key is reported
// (a flush interval, or longer for a key asked for seldom) an allowance is
// good for without a new answer, allowanceKept at most; allowanceKept is
// also how long a key's entry outlives its last answer, so that a key that
// went quiet is decided as before again.
const (
	allowanceLapse = 3
	allowanceKept  = time.Second
)

// allowances are the sidecar's allowances on tight keys (pkg/share): per
// key, the units it may still admit until the upstream answers its next
// report. A key with a bound entry admits only within it: when the
// allowance lapses (no answer within allowanceLapse of its reporting
// intervals) it admits nothing more until an answer, so a stale allowance
// never admits. An answer that says a bound key is not tight unbinds it:
// the key is decided as before, and what it admits is still counted
// (spent), so that an answer that binds it again is taken less what was
// admitted while it was on its way (at each window's start a flood's key
// is loose for a cycle, and one server in cached mode admitted 1.07 ×
// exact before). The entry goes allowanceKept after the last answer.
// They hold at most max keys, the least recently answered dropped first
// (those keys are decided as before), on pkg/lrumap.
type allowances struct {
	m *lrumap.Map[allowance]
}

type allowance struct {
	bound    bool    // admits only within left
	left     float64 // units it may still admit
	spent    float64 // units admitted on the key since its entry was made
	until    int64   // ns (Tier.base): after it, left counts as 0
	answered int64   // ns: the last answer for the key
	reported int64   // ns: the last report of the key, for its demand rate
}

// allowanceBytes bounds the table's memory: far above max keys of
// fixed-length store keys, so that the key count binds.
const allowanceBytes = 1 << 30

func newAllowances(max int) *allowances {
	m, err := lrumap.New[allowance](lrumap.Options{MaxKeys: max, MaxBytes: allowanceBytes})
	if err != nil {
		panic(err) // max is positive (Tier's defaults): cannot happen
	}
	return &allowances{m: m}
}

// take takes each non-shadow item's cost from its key's allowance, where
// it is bound, and counts it spent where it has an entry, all or nothing
// at now (ns): it reports false, taking nothing, when an item's allowance
// is short, and marks in short which.
func (a *allowances) take(b *limiter.Batch, now int64, short *took) bool {
	var done took
	for i, it := range b.Items {
		if it.Shadow || it.Cost <= 0 {
			continue
		}
		ok := true
		found := a.m.Get(it.Key, func(al *allowance) {
			if al.bound {
				if ok = now < al.until && al.left >= float64(it.Cost); !ok {
					return
				}
				al.left -= float64(it.Cost)
			}
			al.spent += float64(it.Cost)
		})
		if !ok {
			*short |= 1 << i
			a.giveBack(b, done)
			return false
		}
		if found {
			done |= 1 << i
		}
	}
	return true
}

// refuse marks the items in short as refused by their allowances: a
// retry can succeed once the next answer brings a new one.
func (t *Tier) refuse(b *limiter.Batch, short took) {
	for i := range b.Items {
		if short&(1<<i) != 0 {
			r := &b.Results[i]
			r.Allowed, r.Remaining, r.RetryAfter = false, 0, microsFromDuration(t.opts.FlushInterval)
		}
	}
}

// giveBack returns what take took from the items in set.
func (a *allowances) giveBack(b *limiter.Batch, set took) {
	for i, it := range b.Items {
		if set&(1<<i) != 0 {
			a.m.Get(it.Key, func(al *allowance) {
				if al.bound {
					al.left += float64(it.Cost)
				}
				al.spent -= float64(it.Cost)
			})
		}
	}
}

// spentOf is what key has admitted since its entry was made, and what is
// left of its allowance: taken when its hits are drained for a report, spent
// given back to set with the answer, held reported with the hits
// (rls.HeldKey).
func (a *allowances) spentOf(key string) (spent, held float64) {
	a.m.Get(key, func(al *allowance) {
		spent = al.spent
		if al.bound {
			held = max(0, al.left)
		}
	})
	return spent, held
}

// set applies the upstream's answer for key at now (ns) to a report whose
// hits were drained when the key's allowances had admitted spent
// (spentOf): units it may admit until it reports again (good for lapse
// ns), or, below zero, none: the key is decided as before (unbound, its
// entry kept if it has one).
//
// The answer's units are a share of what the limit had left when the
// report came, which does not count what the key's last allowance admitted
// since the report's hits were drained: those are in the next report. So
// they are taken from the units. Without that, a sidecar whose answers
// take a round trip longer than its flush interval spends the rest of its
// last allowance and the whole new one, and three async sidecars admitted
// up to 1.10 × an exact limiter on sliding logs and fixed windows (the
// model, pkg/share: 1.07 at a 20 ms round trip, 1.01 with this).
func (a *allowances) set(key string, units, spent float64, now, lapse int64) {
	if units < 0 {
		a.m.Get(key, func(al *allowance) { al.bound, al.answered = false, now })
		return
	}
	a.m.Update(key, func(al *allowance, found bool) int64 {
		// What the last allowance left unused, up to one unit, is kept: on
		// a key several sidecars share, a share of a small pool is a
		// fraction of a unit, rounded up now and then, and a sidecar asked
		// for the key only now and then would find each unit replaced
		// before its request came, refusing what the limit had room for. A
		// unit a sidecar holds unused is still in the store's pool, so at
		// most one unit a sidecar can be handed twice; a flood spends its
		// allowance and keeps none.
		carry := 0.0
		if found {
			// An entry made since the report (dropped and made anew)
			// counts from 0: nothing known spent in flight.
			units = max(0, units-max(0, al.spent-spent))
			if al.bound && now < al.until {
				carry = min(max(al.left, 0), carryUnits)
			}
		}
		al.bound, al.left, al.until, al.answered = true, units+carry, now+lapse, now
		return 0
	})
}

// unbind decides key on the local bucket until its next answer, as an
// answer that finds it loose does: a refund (Tier.giveBack) gave units
// back to a pool its allowance was taken of without them, so until an
// answer counts them it would refuse what the limit has room for.
func (a *allowances) unbind(key string) {
	a.m.Get(key, func(al *allowance) { al.bound = false })
}

// carryUnits is the most of an unused allowance an answer keeps (set).
const carryUnits = 1

// since returns how long ago (ns) key was last reported, at least
// interval, and marks it reported at now.
func (a *allowances) since(key string, now, interval int64) int64 {
	d := interval
	a.m.Get(key, func(al *allowance) {
		d = max(interval, now-al.reported)
		al.reported = now
	})
	return d
}

// prune drops the entries answered last before now − allowanceKept: set
// makes the answered key the most recent, so they are at the end.
func (a *allowances) prune(now int64) {
	a.m.Sweep(func(al *allowance) bool { return now-al.answered > int64(allowanceKept) })
}

// len is the keys held.
func (a *allowances) len() int { return a.m.Len() }
