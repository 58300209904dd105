package rlqs

import (
	"context"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// stream is one Envoy's stream: its domain and the buckets it reported.
// Only its own goroutine touches it.
type stream struct {
	id      uint64
	domain  string
	buckets map[string]*bucket // by canonical id
	pokes   chan string        // fleet keys whose shares moved
}

// poke asks the stream to push its share of key; a stream whose pokes are
// full gets it with its next report.
func (ss *stream) poke(key string) {
	select {
	case ss.pokes <- key:
	default:
	}
}

// bucket is one bucket of a stream, as last resolved and assigned.
type bucket struct {
	id      *rlqsv3.BucketId
	name    string         // canonical(id): its key in stream.buckets
	cfg     *config.Config // the config entries and limit were resolved on
	entries []config.Entry
	limit   *config.Limit
	key     string // the limit's counter (limiter.CounterKey), its fleet's key; "" for none
	// rule, where the limit is not split among the Envoys, is the blanket
	// rule assigned instead: DENY_ALL for a limit of 0, ALLOW_ALL for a
	// shadow-mode one (its counts still recorded); nil otherwise.
	rule *typev3.RateLimitStrategy
	last *typev3.TokenBucket
	idle time.Time // since when it was reported without requests; zero: busy
	seen time.Time // its last report on this stream
}

// Bounds on what one report may carry.
const (
	maxDomainLen = limiter.MaxDomainLen
	maxValueLen  = 4 * limiter.MaxValueLen
)

// report records m's allowed counts and answers with the assignments of
// its buckets. A report that breaks the protocol (another domain than the
// stream's) ends the stream; a bucket it cannot take is skipped, counted.
func (s *Service) report(ctx context.Context, ss *stream, m *rlqsv3.RateLimitQuotaUsageReports) (*rlqsv3.RateLimitQuotaResponse, error) {
	s.m.reports.Inc()
	s.reports.Add(1)
	switch d := m.GetDomain(); {
	case d == "" || len(d) > maxDomainLen:
		return nil, status.Errorf(codes.InvalidArgument, "rlqs: a domain of %d bytes; want 1 to %d", len(d), maxDomainLen)
	case ss.domain == "":
		ss.domain = d
	case d != ss.domain:
		return nil, status.Errorf(codes.InvalidArgument, "rlqs: domain %.64q on a stream of domain %.64q: one domain a stream", d, ss.domain)
	}
	if len(m.GetBucketQuotaUsages()) > s.opts.MaxBucketsPerStream {
		s.m.refused.WithLabelValues("buckets_full").Inc()
		return nil, status.Errorf(codes.ResourceExhausted, "rlqs: %d buckets in one report; at most %d", len(m.GetBucketQuotaUsages()), s.opts.MaxBucketsPerStream)
	}
	now := s.opts.Now()
	cfg := s.opts.Config()
	type used struct {
		b                    *bucket
		allowed, asked, secs float64
	}
	var (
		in   []used
		recs = records{domain: ss.domain}
		ages []int64
	)
	for _, u := range m.GetBucketQuotaUsages() {
		b := s.bucketOf(ss, u.GetBucketId(), cfg)
		if b == nil {
			continue
		}
		elapsed := max(u.GetTimeElapsed().AsDuration(), 0)
		if !b.seen.IsZero() {
			// Envoy's time_elapsed is whole seconds, truncated: a 5 s
			// interval read as 4 overstates a demand by a quarter. This
			// server's clock since the bucket's last report on this
			// stream says it to the millisecond.
			elapsed = now.Sub(b.seen)
		}
		b.seen = now
		allowed, denied := u.GetNumRequestsAllowed(), u.GetNumRequestsDenied()
		// Demand: the requests Envoy was asked for over the time the
		// report covers (0 s on a first report: not known yet).
		asked := min(allowed, limiter.MaxCost) + min(denied, limiter.MaxCost) // never wraps
		in = append(in, used{b, float64(allowed), float64(asked), elapsed.Seconds()})
		if allowed > 0 && b.limit != nil {
			// The report's requests are placed at the middle of the time
			// it covers (whole seconds): its allowed count is recorded there
			// (algorithm.Record), at most a window back.
			recs.add(b.entries, min(allowed, limiter.MaxCost))
			ages = append(ages, min(elapsed.Microseconds()/2, algorithm.MaxWindow))
		}
	}
	s.record(ctx, &recs, ages)

	// Every bucket's demand is observed first, so that the other
	// replicas are told and asked of all the report's keys in one call.
	type todo struct {
		b    *bucket
		lim  shape
		word int // in words, or -1
	}
	var (
		resp   = &rlqsv3.RateLimitQuotaResponse{}
		todos  = make([]todo, 0, len(in))
		words  []PeerWord
		wordOf map[string]int
	)
	for _, u := range in {
		b := u.b
		if u.asked == 0 && u.secs > 0 {
			if b.idle.IsZero() {
				b.idle = now
			} else if now.Sub(b.idle) >= s.opts.AbandonAfter {
				resp.BucketAction = append(resp.BucketAction, &rlqsv3.RateLimitQuotaResponse_BucketAction{
					BucketId:     b.id,
					BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}},
				})
				s.forget(ss, b)
				s.m.assignments.WithLabelValues("abandon").Inc()
				continue
			}
		} else {
			b.idle = time.Time{}
		}
		t := todo{b: b, word: -1}
		if b.key != "" {
			t.lim = shapeOf(b.limit.RateLimit)
			local, handed, ok := s.fleet.observe(b.key, ss.id, u.asked, u.allowed, u.secs, t.lim, now, ss.poke)
			if !ok {
				s.m.refused.WithLabelValues("keys_full").Inc()
			}
			if ok && s.opts.Peers != nil && local > 0 {
				if wordOf == nil {
					wordOf = make(map[string]int)
				}
				i, seen := wordOf[b.key]
				if !seen {
					i = len(words)
					wordOf[b.key] = i
					words = append(words, PeerWord{Key: b.key})
				}
				words[i].Mine, words[i].Handed = local, handed
				t.word = i
			}
		}
		todos = append(todos, t)
	}
	told := s.tell(ctx, words)
	for _, t := range todos {
		var (
			sh   Share
			push bool
		)
		if t.b.key != "" {
			lim := t.lim
			if told && t.word >= 0 {
				lim = ours(lim, words[t.word])
			}
			sh, push = s.fleet.share(t.b.key, ss.id, lim, now)
		}
		resp.BucketAction = append(resp.BucketAction, s.assign(ss, t.b, sh, push))
	}
	return resp, nil
}

// poked answers a poke of key (fleet): the stream's buckets on it with
// the shares the fleet now gives them, or nil when nothing is to be sent.
func (s *Service) poked(ss *stream, key string) *rlqsv3.RateLimitQuotaResponse {
	sh, ok := s.fleet.shareOf(key, ss.id)
	if !ok {
		return nil
	}
	resp := &rlqsv3.RateLimitQuotaResponse{}
	for _, b := range ss.buckets {
		if b.key == key {
			resp.BucketAction = append(resp.BucketAction, s.assign(ss, b, sh, true))
		}
	}
	if len(resp.BucketAction) == 0 {
		return nil
	}
	s.m.pushes.Inc()
	return resp
}

// record records the allowed counts, limiter.MaxDescriptors a call. The
// store being away loses them (counted); the assignments go on, since
// they need only the config and the reports.
func (s *Service) record(ctx context.Context, r *records, ages []int64) {
	for start := 0; start < r.Len(); start += limiter.MaxDescriptors {
		end := min(start+limiter.MaxDescriptors, r.Len())
		part := records{domain: r.domain, entries: r.entries[start:end], costs: r.costs[start:end]}
		_, err := s.opts.Decider.Decide(ctx, &part, limiter.DecideOptions{Record: true, Ages: ages[start:end]})
		hits := 0.0
		for _, c := range part.costs {
			hits += float64(c)
		}
		if err != nil {
			s.m.recorded.WithLabelValues("lost").Add(hits)
			s.lostLog.Do(func() {
				s.opts.Logger.Warn("rlqs: usage not recorded (counted in sluice_rlqs_recorded_requests_total{result=\"lost\"}; logged at most every 10 s)", "error", err.Error(), "buckets", end-start)
			})
			continue
		}
		s.m.recorded.WithLabelValues("ok").Add(hits)
	}
}

// bucketOf is the stream's bucket for id, resolved on cfg, or nil when id
// is malformed or the stream holds its most buckets (counted).
func (s *Service) bucketOf(ss *stream, id *rlqsv3.BucketId, cfg *config.Config) *bucket {
	name, ok := canonical(id)
	if !ok {
		s.m.refused.WithLabelValues("bad_bucket").Inc()
		return nil
	}
	b := ss.buckets[name]
	if b == nil {
		if len(ss.buckets) >= s.opts.MaxBucketsPerStream {
			s.m.refused.WithLabelValues("buckets_full").Inc()
			return nil
		}
		b = &bucket{id: id, name: name}
		ss.buckets[name] = b
		s.buckets.Add(1)
	}
	if b.cfg != cfg { // new, or the config was reloaded
		if b.key != "" {
			s.fleet.leave(b.key, ss.id)
		}
		b.cfg, b.key, b.rule = cfg, "", nil
		b.entries, b.limit = cfg.BucketEntries(ss.domain, id.GetBucket())
		switch l := b.limit; {
		case l == nil || l.RateLimit.Unlimited || l.RateLimit.Algorithm == algorithm.Concurrency:
			b.limit = nil // nothing RLQS can hold: allowed
		case l.RateLimit.Blocks():
			b.rule = blanket(typev3.RateLimitStrategy_DENY_ALL) // as ShouldRateLimit answers
		case l.ShadowMode:
			b.rule = blanket(typev3.RateLimitStrategy_ALLOW_ALL) // counted, never refused
		default:
			b.key = limiter.CounterKey("", ss.domain, l, b.entries)
		}
	}
	return b
}

// forget drops b from the stream.
func (s *Service) forget(ss *stream, b *bucket) {
	if b.key != "" {
		s.fleet.leave(b.key, ss.id)
	}
	delete(ss.buckets, b.name)
	s.buckets.Add(-1)
}

// assign is b's assignment: ALLOW_ALL where no limit applies, its blanket
// rule where the limit is not split; else sh, its share of the limit
// (fleet), as a token bucket: sh where push (the fleet's word, or a poke)
// or none was sent yet, else the last one again, since a changed bucket
// costs Envoy its tokens' ratio (rlqs-notes §3).
func (s *Service) assign(ss *stream, b *bucket, sh Share, push bool) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	ttl := durationpb.New(s.opts.TTL)
	action := func(st *typev3.RateLimitStrategy) *rlqsv3.RateLimitQuotaResponse_BucketAction {
		return &rlqsv3.RateLimitQuotaResponse_BucketAction{
			BucketId: b.id,
			BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: ttl, RateLimitStrategy: st,
			}},
		}
	}
	switch {
	case b.limit == nil:
		s.m.assignments.WithLabelValues("allow_all").Inc()
		return action(blanket(typev3.RateLimitStrategy_ALLOW_ALL))
	case b.rule != nil:
		s.m.assignments.WithLabelValues(strings.ToLower(b.rule.GetBlanketRule().String())).Inc()
		return action(b.rule)
	}
	if b.last == nil || push {
		b.last = next(b.last, tokenBucket(sh))
		s.fleet.sent(b.key, ss.id, sh.Rate)
	}
	s.m.assignments.WithLabelValues("token_bucket").Inc()
	return action(&typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: b.last}})
}

// blanket is a blanket rule as a strategy.
func blanket(r typev3.RateLimitStrategy_BlanketRule) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: r}}
}

// windowBurst is the part of a window's limit the fleet's buckets hold
// together on a windowed algorithm (fixed, sliding window, sliding log),
// their rate the rest of the limit spread over the window (shape.fit).
const windowBurst = 0.02

// shapeOf is what the fleet splits of r: a token bucket's or GCRA's rate
// and burst; a windowed algorithm's limit spread over its window,
// windowBurst of it held.
func shapeOf(r config.RateLimit) shape {
	p := r.Params()
	w := float64(p.Window) / 1e6
	lim := shape{rate: float64(p.Limit) / w}
	if r.HasBurst() {
		lim.burst = float64(p.Burst)
		return lim
	}
	lim.burst, lim.window = max(1, math.Floor(float64(p.Limit)*windowBurst)), w
	return lim
}

// canonical names a bucket id by its entries in key order, each key and
// value with its length; ok is false for an id that is empty, has more
// entries than a descriptor may, an empty key or value, or one past the
// bounds.
func canonical(id *rlqsv3.BucketId) (string, bool) {
	m := id.GetBucket()
	if len(m) == 0 || len(m) > config.MaxBucketEntries {
		return "", false
	}
	keys := make([]string, 0, len(m))
	for k, v := range m {
		if k == "" || v == "" || len(k) > limiter.MaxKeyLen || len(v) > maxValueLen {
			return "", false
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		for _, x := range []string{k, m[k]} {
			b.WriteString(strconv.Itoa(len(x)))
			b.WriteByte(':')
			b.WriteString(x)
		}
	}
	return b.String(), true
}
