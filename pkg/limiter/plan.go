package limiter

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

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
	// storeRefunds: a store decided the request's refunds, so their
	// results say what each gave back (algorithm.Result.Given).
	storeRefunds bool
	answer       Answer

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

// plan matches each descriptor and builds the batch of items to decide,
// in steps each readable alone: match, dropReplaced, addItems,
// settleBlocked. With paths (a sidecar's recorded hits: one per
// descriptor, see DecideOptions.Paths), each descriptor's limit is the one
// its path names, and no limit replaces another.
func (s *Service) plan(cfg *config.Config, req Request, paths []string) *decision {
	d := s.decisions.Get().(*decision)
	*d = decision{cfg: cfg, batch: Batch{Request: req}}
	n := req.Len()
	var matched []*config.Limit
	if n <= smallRequest {
		matched, d.itemOf, d.batch.Paths = d.small.matched[:n], d.small.itemOf[:n], d.small.basePaths[:n]
		d.batch.Items, d.batch.Limits = d.small.items[:0], d.small.limits[:0]
		d.batch.Descriptors, d.overridden = d.small.descs[:0], d.small.overridden[:0]
	} else {
		matched, d.itemOf, d.batch.Paths = make([]*config.Limit, n), make([]int, n), make([]string, n)
	}
	overrides := match(cfg, req, paths, matched, d.batch.Paths)
	if paths == nil {
		dropReplaced(matched)
	}
	for i := range d.itemOf {
		d.itemOf[i] = -1
	}
	// Limits to decide first, then the blocking ones (requests_per_unit
	// 0), which the store is not asked about.
	s.addItems(d, req, matched, overrides, false)
	stored := len(d.batch.Items)
	s.addItems(d, req, matched, overrides, true)
	d.settleBlocked(stored)
	return d
}

// match finds each descriptor's limit into matched (nil: none, or
// unlimited) and the configured limit it matched before any override into
// basePaths, and reports which descriptors' limits are Envoy's overrides
// (bit i; MaxDescriptors ≤ 64).
func match(cfg *config.Config, req Request, paths []string, matched []*config.Limit, basePaths []string) (overrides uint64) {
	domain := req.Domain()
	var entryBuf [MaxEntries]config.Entry
	for i := range matched {
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
	return overrides
}

// addItems adds an item for each matched limit that blocks (or, with
// blocking false, that does not): its key, parameters, cost and mode.
func (s *Service) addItems(d *decision, req Request, matched []*config.Limit, overrides uint64, blocking bool) {
	reqCost := int64(req.Cost())
	if reqCost == 0 {
		reqCost = 1
	}
	var buf [128]byte
	for i, l := range matched {
		if l == nil || l.RateLimit.Blocks() != blocking {
			continue
		}
		if blocking && req.Refund(i) {
			continue // a limit of 0 holds nothing to give back, and refuses no refund
		}
		cost := reqCost
		if c, set := req.DescriptorCost(i); set {
			cost = int64(c) // an explicit 0 checks without consuming
		}
		p := s.params(l)
		if l.RateLimit.Holder {
			p.Holder = holderOf(req, i)
		}
		key := s.appendKey(buf[:0], req.Domain(), l, p, req, i)
		d.itemOf[i] = len(d.batch.Items)
		// Only an enforced limit holds the others back: a shadow one never
		// does, and a quota one fails the request only with all the
		// others (answer): the store treats both as shadow items.
		it := algorithm.Item{Key: string(key), Params: p, Cost: cost, Shadow: s.role(l) != enforced}
		switch {
		case req.Refund(i):
			it.Mode = algorithm.GiveBack // never refused, nor a sidecar's record
		case s.opts.ReferenceCounting || l.RateLimit.CountRefused:
			it.Mode = algorithm.Count // a sidecar's records are Force (decide)
		}
		d.batch.Items = append(d.batch.Items, it)
		d.batch.Limits = append(d.batch.Limits, l)
		d.batch.Descriptors = append(d.batch.Descriptors, i)
		d.overridden = append(d.overridden, overrides&(1<<i) != 0)
	}
}

// params are l's algorithm parameters for a decision now: the calendar's
// current period, and under ReferenceCounting the reference's fixed
// window where the config names no algorithm.
func (s *Service) params(l *config.Limit) algorithm.Params {
	p := l.RateLimit.Params()
	if loc := l.RateLimit.Calendar; loc != nil {
		// This period of the calendar; the store rolls to the next at this
		// length if its clock is already past the end.
		start, end := config.CalendarPeriod(s.opts.Now(), l.RateLimit.Unit, loc)
		p.Origin, p.Window = start.UnixMicro(), end.Sub(start).Microseconds()
	}
	if s.opts.ReferenceCounting && !l.RateLimit.AlgorithmSet {
		p.Kind, p.Burst = algorithm.FixedWindow, p.Limit // the reference's only algorithm
	}
	return p
}

// role is what a limit's refusal does to a request.
type role uint8

const (
	enforced role = iota // refuses the request
	quota                // refuses it only when every quota limit of it refuses (quota_mode)
	shadowed             // refuses nothing: counted and reported only (shadow_mode)
)

// role is l's role: shadow_mode wins over quota mode.
func (s *Service) role(l *config.Limit) role {
	switch {
	case l.ShadowMode:
		return shadowed
	case l.QuotaMode || s.opts.QuotaAll:
		return quota
	}
	return enforced
}

// settleBlocked answers the blocking items (from stored on): refused for
// a window; and if an enforced one blocks, the others are not asked.
func (d *decision) settleBlocked(stored int) {
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
		Request:     d.batch.Request,
		Items:       d.batch.Items[:stored],
		Limits:      d.batch.Limits[:stored],
		Descriptors: d.batch.Descriptors[:stored],
		Paths:       d.batch.Paths,
		Results:     d.batch.Results[:stored],
	}
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
	n := req.Entries(i)
	for j := range n {
		k, v := req.Entry(i, j)
		name = addEntry(name, l, j, n, k, v)
	}
	return name.AppendKey(dst, s.opts.KeyPrefix)
}

// addEntry adds entry j of n, (k, v), to a limit instance's name as l
// counts it.
func addEntry(name KeyName, l *config.Limit, j, n int, k, v string) KeyName {
	if l.RateLimit.Holder && j == n-1 {
		// The holder (holderOf): every request's value counts here.
		return name.Add(k).Add(holderPart)
	}
	if j < len(l.Shared) && l.Shared[j] != "" {
		// share_threshold: every value the wildcard matches counts here.
		return name.Add(k).Add(l.Shared[j])
	}
	return name.Add(k).Add(EntryValue(v))
}

// CounterKey is the store key, under prefix, of the counter limit l keeps
// for entries in domain at its configured algorithm: the key a request
// carrying those entries is decided on (appendKey), so callers that group
// by it group as the store counts (share_threshold's values on one key).
func CounterKey(prefix, domain string, l *config.Limit, entries []config.Entry) string {
	var buf [256]byte
	name := NewKeyName(buf[:]).Add(domain).Add(l.Path).Add(l.RateLimit.Params().Kind.String())
	for j, e := range entries {
		name = addEntry(name, l, j, len(entries), e.Key, e.Value)
	}
	return string(name.AppendKey(nil, prefix))
}

// holderPart stands in a concurrency limit's key for its holder entry's
// value, which names a request, not a counter (config.RateLimit.Holder).
const holderPart = "\x00holder"

// holderOf is the holder named by descriptor i of req: the value of its
// last entry, the limit's own (config.RateLimit.Holder). A value longer
// than algorithm.MaxHolderLen, or holding a NUL (which names a holder's
// further units), is named by its hash instead, so any request id fits
// and no value grows a key's state.
func holderOf(req Request, i int) string {
	_, v := req.Entry(i, req.Entries(i)-1)
	if len(v) <= algorithm.MaxHolderLen && strings.IndexByte(v, 0) < 0 {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	return "#" + hex.EncodeToString(sum[:16])
}
