package localtier

import (
	"math"
	"time"

	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/global"
	"github.com/sluicehq/sluice/pkg/localbucket"
	"github.com/sluicehq/sluice/pkg/rls"
)

// localLimit is the local token bucket for a limit at share of it: the
// limit's rate, and a capacity that holds the most any run of requests the
// global algorithm admits can spend at once, so that at share 1 the local
// bucket never rejects what the global limit would admit (a proxy that alone
// emptied the local bucket has certainly used up the global limit):
//
//   - token_bucket and gcra admit at most burst + rate·t over any t;
//   - sliding_log admits at most limit in any window, which a bucket of
//     capacity limit refilling at limit/window allows;
//   - sliding_window's estimate never lets more than that through either
//     (TestLocalNeverRejectsWhatGlobalAdmits checks it on random runs);
//   - fixed_window admits limit at the end of one window and limit again at
//     the start of the next: twice the limit at once.
//
// A share below 1 splits the limit across proxies; the capacity is kept at
// least one request, so a small limit split many ways still admits.
func localLimit(p algorithm.Params, share float64) localbucket.Limit {
	perSecond := float64(p.Limit) * 1e6 / float64(p.Window)
	capacity := float64(p.Limit)
	switch p.Kind {
	case algorithm.TokenBucket, algorithm.GCRA:
		capacity = float64(p.Burst)
	case algorithm.FixedWindow:
		capacity = 2 * float64(p.Limit)
	}
	return localbucket.Limit{Rate: perSecond * share, Burst: max(1, capacity*share)}
}

// admissible is the largest cost one request can have that the global
// algorithm may ever admit: a costlier request is rejected for good.
func admissible(p algorithm.Params) int64 {
	if p.Kind == algorithm.TokenBucket || p.Kind == algorithm.GCRA {
		return p.Burst
	}
	return p.Limit
}

// takeLocal decides b's items on the local buckets at share, all or nothing
// like every Decider: if a non-shadow item is denied, the tokens the others
// took are given back. It fills b.Results with the local view and reports
// whether the request was admitted. It does not allocate.
func (t *Tier) takeLocal(b *rls.Batch, share float64, now time.Time) bool {
	admitted := true
	taken := 0
	for i, it := range b.Items {
		lim := localLimit(it.Params, share)
		var d localbucket.Decision
		if it.Cost > admissible(it.Params) {
			w := time.Duration(it.Params.Window) * time.Microsecond
			d = localbucket.Decision{RetryAfter: w}
		} else {
			d = t.local.AllowN(it.Key, lim, now, float64(it.Cost))
			if it.Cost == 0 && d.Remaining < 1 {
				// A check asks whether one more would fit.
				d.Allowed, d.RetryAfter = false, time.Duration(math.Ceil((1-d.Remaining)/lim.Rate*1e9))
			}
		}
		b.Results[i] = result(d, lim)
		taken = i + 1
		if !d.Allowed && !it.Shadow {
			admitted = false
			break
		}
	}
	if admitted {
		return true
	}
	for i, it := range b.Items[:taken] {
		lim := localLimit(it.Params, share)
		if r := &b.Results[i]; r.Allowed && it.Cost > 0 {
			t.local.ReturnN(it.Key, lim, now, float64(it.Cost))
			r.Remaining += it.Cost
		}
	}
	// Items after the one that denied were not asked: report them as the
	// local view without taking anything.
	for i := taken; i < len(b.Items); i++ {
		it := b.Items[i]
		lim := localLimit(it.Params, share)
		b.Results[i] = result(t.local.AllowN(it.Key, lim, now, 0), lim)
	}
	return false
}

// returnLocal gives back what an admitting takeLocal at share took, for a
// request a later tier rejected.
func (t *Tier) returnLocal(b *rls.Batch, share float64, now time.Time) {
	for _, it := range b.Items {
		if it.Cost > 0 {
			t.local.ReturnN(it.Key, localLimit(it.Params, share), now, float64(it.Cost))
		}
	}
}

// result is a local decision as the reply reports it.
func result(d localbucket.Decision, lim localbucket.Limit) global.Result {
	return global.Result{
		Allowed:    d.Allowed,
		Remaining:  int64(max(0, math.Floor(d.Remaining))),
		RetryAfter: micros(d.RetryAfter),
		ResetAfter: int64(math.Ceil(max(0, lim.Burst-d.Remaining) / lim.Rate * 1e6)),
	}
}

// micros is d in whole microseconds, rounded up so that a retry at that time
// succeeds.
func micros(d time.Duration) int64 {
	us := int64(d / time.Microsecond)
	if d%time.Microsecond != 0 {
		us++
	}
	return us
}
