package rls

import (
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/global"
)

// smallRequest is how many descriptors a request may carry and still have
// its decision, slices included, in one allocation, and its reply in
// another; Envoy's routes mostly send one or two. Larger requests allocate
// their slices apart.
const smallRequest = 2

// decision is what one request resolved to.
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
	// tier decided the request; empty when no limit applied.
	tier string

	// The slices' backing arrays for a small request.
	small struct {
		paths       [smallRequest]string
		basePaths   [smallRequest]string
		matched     [smallRequest]*config.Limit
		itemOf      [smallRequest]int
		items       [smallRequest]global.Item
		limits      [smallRequest]*config.Limit
		descriptors [smallRequest]*ratelimitv3.RateLimitDescriptor
		results     [smallRequest]global.Result
		overridden  [smallRequest]bool
	}
}

// plan matches each descriptor and builds the batch of items to decide.
// With paths (a sidecar's recorded hits: one per descriptor, see
// LimitPathKey), each descriptor's limit is the one its path names, and no
// limit replaces another.
func (s *Service) plan(cfg *config.Config, req *rlsv3.RateLimitRequest, paths []string) *decision {
	domain := req.GetDomain()
	ds := req.GetDescriptors()
	d := &decision{cfg: cfg, batch: Batch{Domain: domain}}
	var matched []*config.Limit
	var basePaths []string // per descriptor, the configured limit it matched
	if n := len(ds); n <= smallRequest {
		matched, d.itemOf, basePaths = d.small.matched[:n], d.small.itemOf[:n], d.small.basePaths[:n]
		d.batch.Items, d.batch.Limits = d.small.items[:0], d.small.limits[:0]
		d.batch.Descriptors, d.overridden = d.small.descriptors[:0], d.small.overridden[:0]
		d.batch.Paths = d.small.paths[:0]
	} else {
		matched, d.itemOf, basePaths = make([]*config.Limit, n), make([]int, n), make([]string, n)
	}
	var overrides uint64 // bit i: descriptor i's limit is an override (MaxDescriptors ≤ 64)
	entries := make([]config.Entry, 0, MaxEntries)
	for i, desc := range ds {
		var l *config.Limit
		if paths != nil {
			l = cfg.LimitAt(domain, paths[i])
		}
		if l == nil && (paths == nil || paths[i] != "") {
			entries = entries[:0]
			for _, e := range desc.GetEntries() {
				// Matched on the value as sent, however long or whatever its
				// bytes, so padding cannot move it off a rule; counted by
				// EntryValue (appendKey).
				entries = append(entries, config.Entry{Key: e.GetKey(), Value: e.GetValue()})
			}
			l = cfg.Match(domain, entries)
		}
		if l != nil {
			basePaths[i] = l.Path
		}
		if o := desc.GetLimit(); o != nil && cfg.HasDomain(domain) {
			l = withOverride(domain, l, o)
			overrides |= 1 << i
		}
		if l != nil && !l.RateLimit.Unlimited {
			matched[i] = l
		}
	}
	if paths == nil {
		dropReplaced(matched)
	}

	reqCost := int64(req.GetHitsAddend())
	if reqCost == 0 {
		reqCost = 1
	}
	var buf [128]byte
	n := 0
	// Limits to decide first, then the blocking ones.
	for pass := 0; pass < 2; pass++ {
		for i, l := range matched {
			if pass == 0 {
				d.itemOf[i] = -1
			}
			if l == nil || l.RateLimit.Blocks() != (pass == 1) {
				continue
			}
			desc := ds[i]
			cost := reqCost
			if h := desc.GetHitsAddend(); h != nil {
				cost = int64(h.GetValue()) // an explicit 0 checks without consuming
			}
			p := l.RateLimit.Params()
			key := s.appendKey(buf[:0], domain, l, p, desc)
			d.itemOf[i] = len(d.batch.Items)
			d.batch.Items = append(d.batch.Items, global.Item{Key: string(key), Params: p, Cost: cost, Shadow: l.ShadowMode})
			d.batch.Limits = append(d.batch.Limits, l)
			d.batch.Descriptors = append(d.batch.Descriptors, desc)
			d.batch.Paths = append(d.batch.Paths, basePaths[i])
			d.overridden = append(d.overridden, overrides&(1<<i) != 0)
		}
		if pass == 0 {
			n = len(d.batch.Items)
		}
	}
	if len(d.batch.Items) <= smallRequest {
		d.batch.Results = d.small.results[:len(d.batch.Items)]
	} else {
		d.batch.Results = make([]global.Result, len(d.batch.Items))
	}
	for j := n; j < len(d.batch.Items); j++ {
		w := d.batch.Items[j].Params.Window
		d.batch.Results[j] = global.Result{RetryAfter: w, ResetAfter: w}
		if !d.batch.Items[j].Shadow {
			d.blocked = true
		}
	}
	if d.blocked {
		for j := 0; j < n; j++ {
			d.batch.Results[j] = global.Result{Allowed: true} // not asked
		}
	}
	d.store = Batch{
		Domain:      domain,
		Items:       d.batch.Items[:n],
		Limits:      d.batch.Limits[:n],
		Descriptors: d.batch.Descriptors[:n],
		Paths:       d.batch.Paths[:n],
		Results:     d.batch.Results[:n],
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
// limit's config path and algorithm, and the request's entries.
func (s *Service) appendKey(dst []byte, domain string, l *config.Limit, p algorithm.Params, desc *ratelimitv3.RateLimitDescriptor) []byte {
	var buf [256]byte
	name := global.NewKeyName(buf[:]).Add(domain).Add(l.Path).Add(p.Kind.String())
	for _, e := range desc.GetEntries() {
		name = name.Add(e.GetKey()).Add(EntryValue(e.GetValue()))
	}
	return name.AppendKey(dst, s.opts.KeyPrefix)
}
