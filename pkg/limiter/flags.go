package limiter

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/config"
)

// The flag cache in front of the decider (Options.Cache): which keys it
// holds over limit, when it answers a request alone, and when a new config
// or a refund makes its flags stale.

// flagsFollow purges the flag cache when cfg, the current config, is not
// the one its flags were decided under: a reload that raises a limit takes
// effect at once rather than when the flags expire. Requests still on an
// older snapshot never purge (nor add flags, see flag).
func (s *Service) flagsFollow(cfg *config.Config) {
	if s.opts.Cache == nil || s.flagsCfg.Load() == cfg || s.opts.Config() != cfg {
		return
	}
	s.flagsMu.Lock()
	defer s.flagsMu.Unlock()
	if s.flagsCfg.Load() != cfg {
		if s.flagsCfg.Load() != nil {
			s.opts.Cache.Purge()
		}
		s.flagsCfg.Store(cfg)
	}
}

// refundAlone decides d's refunds on their own, for a request a limit of
// 0 refuses without asking the store about its other limits: a refund
// settles an earlier charge, which that refusal does not undo. A store that
// fails loses the refund (the answer, refused by the config, stands).
func (s *Service) refundAlone(ctx context.Context, d *decision) {
	sub := Batch{Request: d.store.Request, Paths: d.store.Paths}
	var at []int
	for j := range d.store.Items {
		if d.store.Items[j].Mode == algorithm.GiveBack {
			at = append(at, j)
			sub.Items = append(sub.Items, d.store.Items[j])
			sub.Limits = append(sub.Limits, d.store.Limits[j])
			sub.Descriptors = append(sub.Descriptors, d.store.Descriptors[j])
		}
	}
	sub.Results = make([]algorithm.Result, len(sub.Items))
	if err := s.opts.Decider.Decide(ctx, &sub); err != nil {
		return
	}
	for k, j := range at {
		d.store.Results[j] = sub.Results[k]
	}
	d.storeRefunds = sub.Source == ""
	s.flag(d.cfg, &sub, s.opts.Now())
}

// Refunds is how many of b's items give back (algorithm.GiveBack:
// Envoy's is_negative_hits).
func (b *Batch) Refunds() int {
	n := 0
	for i := range b.Items {
		if b.Items[i].Mode == algorithm.GiveBack {
			n++
		}
	}
	return n
}

// fromCache answers the request from the flag cache when one of its
// non-shadow keys is flagged over limit: the store would reject it, and
// all-or-nothing means the other limits would consume nothing.
func (s *Service) fromCache(d *decision, now time.Time) bool {
	c := s.opts.Cache
	if c == nil {
		return false
	}
	hit := false
	b := &d.store
	for i, it := range b.Items {
		if it.Shadow {
			// Never flagged, so not known: as below.
			b.Results[i] = algorithm.Result{Allowed: true}
			continue
		}
		if until, ok := c.Until(it.Key, now); ok {
			left := until.Sub(now).Microseconds()
			b.Results[i] = algorithm.Result{Allowed: false, RetryAfter: left, ResetAfter: left}
			hit = true
		} else {
			// Not known: reported as allowed with nothing to say about
			// what is left, since the store was not asked.
			b.Results[i] = algorithm.Result{Allowed: true}
		}
	}
	if hit {
		d.cached = true
		s.opts.Metrics.cacheHit()
	}
	return hit
}

// flag remembers the keys the decider found over limit until their retry
// time, so a flood from one client costs no more store calls. Only items
// denied on their own are flagged, never one the request's other limits
// vetoed, and never a shadow item; and only requests of one unit (a check
// of zero is judged as one), whose retry time is the key's for every later
// request: a costlier one refused can leave room for cheaper ones; and
// never a concurrency limit's.
func (s *Service) flag(cfg *config.Config, b *Batch, now time.Time) {
	c := s.opts.Cache
	if c == nil || b.Degraded {
		return
	}
	s.flagsMu.RLock()
	defer s.flagsMu.RUnlock()
	if s.flagsCfg.Load() != cfg {
		return // decided on a config that has since been replaced
	}
	for i, r := range b.Results {
		it := &b.Items[i]
		if it.Mode == algorithm.GiveBack {
			c.Remove(it.Key) // what was over limit may not be now
			continue
		}
		// A Force item's answer is already for the next unit. A
		// concurrency limit frees units when their holders' refunds come,
		// here or on another server, not at a time known now.
		if !r.Allowed && !it.Shadow && r.RetryAfter > 0 && (it.Cost <= 1 || it.Mode == algorithm.Force) && it.Params.Kind != algorithm.Concurrency {
			c.Add(it.Key, now.Add(time.Duration(r.RetryAfter)*time.Microsecond))
		}
	}
}
