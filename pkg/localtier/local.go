package localtier

import (
	"math"
	"time"

	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/localbucket"
)

// localLimit is the local token bucket for a limit at share of it: the
// limit's rate, and the algorithm's capacity (algorithm.Capacity: the most
// any run of requests it admits can spend at once), so that at share 1 the
// local bucket never rejects what the global limit would admit (a proxy
// that alone emptied the local bucket has certainly used up the global
// limit; TestLocalNeverRejectsWhatGlobalAdmits checks it on random runs).
// A share below 1 splits the limit across proxies; the capacity is kept at
// least one request, so a small limit split many ways still admits.
func localLimit(p algorithm.Params, share float64) localbucket.Limit {
	perSecond := float64(p.Limit) * 1e6 / float64(p.Window)
	return localbucket.Limit{Rate: perSecond * share, Burst: max(1, float64(algorithm.Capacity(p))*share)}
}

// took is the set of items a local pass took tokens from: bit i for item
// i (a request has at most limiter.MaxDescriptors of them, 64).
type took uint64

// takeLocal decides b's items on the local buckets at share, all or nothing
// like every Decider: if a non-shadow item is denied, the tokens the others
// took are given back. It fills b.Results with the local view and reports
// whether the request was admitted, and if so which items took tokens. It
// does not allocate.
func (t *Tier) takeLocal(b *limiter.Batch, share float64, now time.Time) (took, bool) {
	var set took
	admitted := true
	asked := 0
	for i, it := range b.Items {
		lim := localLimit(it.Params, share)
		var d localbucket.Decision
		if it.Cost > algorithm.MaxCost(it.Params) {
			w := time.Duration(it.Params.Window) * time.Microsecond
			d = localbucket.Decision{RetryAfter: w}
		} else {
			d = t.local.AllowN(it.Key, lim, now, float64(it.Cost))
			if it.Cost == 0 && d.Remaining < 1 {
				// A check asks whether one more would fit.
				d.Allowed, d.RetryAfter = false, time.Duration(math.Ceil((1-d.Remaining)/lim.Rate*1e9))
			}
		}
		if d.Allowed && it.Cost > 0 {
			set |= 1 << i
		}
		b.Results[i] = result(d, lim, it.Params, share)
		asked = i + 1
		if !d.Allowed && !it.Shadow {
			admitted = false
			break
		}
	}
	if admitted {
		return set, true
	}
	t.returnLocal(b, share, now, set)
	for i := range asked {
		if set&(1<<i) != 0 {
			b.Results[i].Remaining += b.Items[i].Cost
		}
	}
	// Items after the one that denied were not asked: report them as the
	// local view without taking anything.
	for i := asked; i < len(b.Items); i++ {
		it := b.Items[i]
		lim := localLimit(it.Params, share)
		b.Results[i] = result(t.local.AllowN(it.Key, lim, now, 0), lim, it.Params, share)
	}
	return 0, false
}

// returnLocal gives back what a local pass at share took from the items in
// set, for a request a later tier (or another of its limits) rejected.
func (t *Tier) returnLocal(b *limiter.Batch, share float64, now time.Time, set took) {
	for i, it := range b.Items {
		if set&(1<<i) != 0 {
			t.local.ReturnN(it.Key, localLimit(it.Params, share), now, float64(it.Cost))
		}
	}
}

// result is a local decision as the reply reports it: against the limit's
// own size at share (what the global algorithm can hold, not the local
// bucket's larger capacity for fixed windows), so that RateLimit's r never
// exceeds what RateLimit-Policy's q allows.
func result(d localbucket.Decision, lim localbucket.Limit, p algorithm.Params, share float64) algorithm.Result {
	size := max(1, float64(algorithm.MaxCost(p))*share)
	left := min(d.Remaining, size)
	return algorithm.Result{
		Allowed:    d.Allowed,
		Remaining:  int64(max(0, math.Floor(left))),
		RetryAfter: microsFromDuration(d.RetryAfter),
		ResetAfter: int64(math.Ceil(max(0, size-left) / lim.Rate * 1e6)),
	}
}

// microsFromDuration is d in whole microseconds, rounded up so that a retry at that time
// succeeds.
func microsFromDuration(d time.Duration) int64 {
	us := int64(d / time.Microsecond)
	if d%time.Microsecond != 0 {
		us++
	}
	return us
}

// fallback decides b locally at the fallback share, without the upstream.
func (t *Tier) fallback(b *limiter.Batch, now time.Time) {
	b.Degraded, b.Source = true, limiter.SourceFallback
	_, ok := t.takeLocal(b, t.opts.Fraction*t.opts.FallbackShare, now)
	t.record(b, now, ok) // sent when the upstream returns, within MaxPending
}

func admitted(b *limiter.Batch) bool {
	for i, r := range b.Results {
		if !r.Allowed && !b.Items[i].Shadow {
			return false
		}
	}
	return true
}
