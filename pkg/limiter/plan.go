package limiter

import (
	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/config"
)

// smallRequest is how many descriptors a request may carry and still have
// its decision, its answer and their slices in one allocation; Envoy's
// routes mostly send one or two. Larger requests allocate their slices
// apart.
const smallRequest = 2

// decision is what one request resolved to, and its answer.
type decision struct {
	// cfg is the config snapshot the request was matched on.
	cfg *config.Config
	// batch holds every limit that applies; store is its first part, the
	// limits that need deciding. The rest block everything
	// (requests_per_unit: 0) and are decided here without a store call.
	batch, store Batch
	// itemOf is, per descriptor, the index of its item in batch, or -1
	// when no limit applies.
	itemOf []int
	// overridden is, per item, whether its limit is Envoy's override
	// rather than one of cfg's.
	overridden []bool
	// blocked: a non-shadow limit blocks the request.
	blocked bool
	// cached: answered from the flag cache.
	cached bool
	// source decided the request; empty when no limit applied.
	source Source
	answer Answer

	// The slices' backing arrays for a small request.
	small struct {
		basePaths  [smallRequest]string
		matched    [smallRequest]*config.Limit
		itemOf     [smallRequest]int
		items      [smallRequest]algorithm.Item
		limits     [smallRequest]*config.Limit
		descs      [smallRequest]int
		results    [smallRequest]algorithm.Result
		overridden [smallRequest]bool
		statuses   [smallRequest]Status
		headers    [smallHeaders]Header
	}
}

// plan matches each descriptor and builds the batch of items to decide.
// With paths (a sidecar's recorded hits: one per descriptor, see
// DecideOptions.Paths), each descriptor's limit is the one its path names,
// and no limit replaces another.
func (s *Service) plan(cfg *config.Config, req Request, paths []string) *decision {
	domain := req.Domain()
	n := req.Len()
	d := &decision{cfg: cfg, batch: Batch{Request: req}}
	var matched []*config.Limit
	var basePaths []string // per descriptor, the configured limit it matched
	if n <= smallRequest {
		matched, d.itemOf, basePaths = d.small.matched[:n], d.small.itemOf[:n], d.small.basePaths[:n]
		d.batch.Items, d.batch.Limits = d.small.items[:0], d.small.limits[:0]
		d.batch.Descriptors, d.overridden = d.small.descs[:0], d.small.overridden[:0]
	} else {
		matched, d.itemOf, basePaths = make([]*config.Limit, n), make([]int, n), make([]string, n)
	}
	var overrides uint64 // bit i: descriptor i's limit is an override (MaxDescriptors ≤ 64)
	var entryBuf [MaxEntries]config.Entry
	for i := range n {
		var l *config.Limit
		if paths != nil {
			l = cfg.LimitAt(domain, paths[i])
		}
		if l == nil && (paths == nil || paths[i] != "") {
			entries := entryBuf[:0]
			for j := range req.Entries(i) {
				// Matched on the value as sent, however long or whatever its
				// bytes, so padding cannot move it off a rule; counted by
				// EntryValue (appendKey).
				k, v := req.Entry(i, j)
				entries = append(entries, config.Entry{Key: k, Value: v})
			}
			l = cfg.Match(domain, entries)
		}
		if l != nil {
			basePaths[i] = l.Path
		}
		if o, ok := req.Override(i); ok && cfg.HasDomain(domain) {
			l = withOverride(domain, l, o)
			overrides |= 1 << i
		}
		if l != nil && !l.RateLimit.Unlimited {
			matched[i] = l
		}
	}
	d.batch.Paths = basePaths
	if paths == nil {
		dropReplaced(matched)
	}

	reqCost := int64(req.Cost())
	if reqCost == 0 {
		reqCost = 1
	}
	var buf [128]byte
	stored := 0
	// Limits to decide first, then the blocking ones.
	for pass := range 2 {
		for i, l := range matched {
			if pass == 0 {
				d.itemOf[i] = -1
			}
			if l == nil || l.RateLimit.Blocks() != (pass == 1) {
				continue
			}
			cost := reqCost
			if c, set := req.DescriptorCost(i); set {
				cost = int64(c) // an explicit 0 checks without consuming
			}
			p := l.RateLimit.Params()
			if loc := l.RateLimit.Calendar; loc != nil {
				// This period of the calendar; the store rolls to the next
				// at this length if its clock is already past the end.
				start, end := config.CalendarPeriod(s.opts.Now(), l.RateLimit.Unit, loc)
				p.Origin, p.Window = start.UnixMicro(), end.Sub(start).Microseconds()
			}
			if s.opts.ReferenceCounting && !l.RateLimit.AlgorithmSet {
				p.Kind, p.Burst = algorithm.FixedWindow, p.Limit // the reference's only algorithm
			}
			key := s.appendKey(buf[:0], domain, l, p, req, i)
			d.itemOf[i] = len(d.batch.Items)
			// A quota limit never holds the others back (answer decides
			// whether quotas fail the request): the store treats it as a
			// shadow one.
			it := algorithm.Item{Key: string(key), Params: p, Cost: cost, Shadow: l.ShadowMode || l.QuotaMode || s.opts.QuotaAll}
			if s.opts.ReferenceCounting || l.RateLimit.CountRefused {
				it.Mode = algorithm.Count // a sidecar's records are Force (decide)
			}
			d.batch.Items = append(d.batch.Items, it)
			d.batch.Limits = append(d.batch.Limits, l)
			d.batch.Descriptors = append(d.batch.Descriptors, i)
			d.overridden = append(d.overridden, overrides&(1<<i) != 0)
		}
		if pass == 0 {
			stored = len(d.batch.Items)
		}
	}
	if len(d.batch.Items) <= smallRequest {
		d.batch.Results = d.small.results[:len(d.batch.Items)]
	} else {
		d.batch.Results = make([]algorithm.Result, len(d.batch.Items))
	}
	for j := stored; j < len(d.batch.Items); j++ {
		w := d.batch.Items[j].Params.Window
		d.batch.Results[j] = algorithm.Result{RetryAfter: w, ResetAfter: w}
		if !d.batch.Items[j].Shadow {
			d.blocked = true
		}
	}
	if d.blocked {
		for j := range stored {
			d.batch.Results[j] = algorithm.Result{Allowed: true} // not asked
		}
	}
	d.store = Batch{
		Request:     req,
		Items:       d.batch.Items[:stored],
		Limits:      d.batch.Limits[:stored],
		Descriptors: d.batch.Descriptors[:stored],
		Paths:       d.batch.Paths,
		Results:     d.batch.Results[:stored],
	}
	return d
}

// dropReplaced removes the limits that another matched limit replaces
// (envoyproxy/ratelimit's `replaces`).
func dropReplaced(limits []*config.Limit) {
	var replaced map[string]bool
	for _, l := range limits {
		if l == nil {
			continue
		}
		for _, name := range l.Replaces {
			if replaced == nil {
				replaced = make(map[string]bool)
			}
			replaced[name] = true
		}
	}
	if replaced == nil {
		return
	}
	for i, l := range limits {
		if l != nil && l.RateLimit.Name != "" && replaced[l.RateLimit.Name] {
			limits[i] = nil
		}
	}
}

// appendKey builds the store key of one limit instance: the domain, the
// limit's config path and algorithm, and descriptor i's entries as they are
// counted (EntryValue).
func (s *Service) appendKey(dst []byte, domain string, l *config.Limit, p algorithm.Params, req Request, i int) []byte {
	var buf [256]byte
	name := NewKeyName(buf[:]).Add(domain).Add(l.Path).Add(p.Kind.String())
	for j := range req.Entries(i) {
		k, v := req.Entry(i, j)
		if j < len(l.Shared) && l.Shared[j] != "" {
			// share_threshold: every value the wildcard matches counts here.
			name = name.Add(k).Add(l.Shared[j])
			continue
		}
		name = name.Add(k).Add(EntryValue(v))
	}
	return name.AppendKey(dst, s.opts.KeyPrefix)
}
