// Package rlqsenvoy is a model of Envoy's rate limit quota filter
// (envoy.filters.http.rate_limit_quota) as a client of a rate limit
// quota service: the per-(server, domain) global client, its buckets,
// usage reports and the assignments it enforces. No Envoy binary can be
// had where sluice is tested, so the server is driven by this model, as
// internal/testkit/envoyrl models the ordinary rate limit filter.
//
// It follows Envoy's source at commit
// 28cb0f71a90d38bfee14ea626165729428e6fb31, not its docs where they
// differ; S/ below is source/extensions/filters/http/rate_limit_quota/:
//
//   - One stream per (server, domain), opened at the first bucket and, after
//     it fails, only at the next report tick; a report that cannot be sent
//     is lost, its counters reset all the same (S/global_client_impl.cc:
//     169-180, 381-431).
//   - A new bucket's first request is allowed unless no_assignment_behavior
//     is DENY_ALL, and reported at once alone, time_elapsed 0
//     (S/filter.cc:47-52, S/global_client_impl.cc:202-218).
//   - Every ReportInterval (5 s, whatever reporting_interval says:
//     S/filter_persistence.cc:42-45) one report of every bucket,
//     time_elapsed in whole seconds (S/global_client_impl.cc:81-147).
//     NewReporting models an Envoy that reports more often: the filter-wide
//     reporting_interval that envoyproxy/envoy pull request 47104 adds (for
//     issue 46033; not merged at the commit above, and in no release).
//   - An action for an unknown bucket is ignored; requests_per_time_unit
//     and an unset strategy are dropped; abandon erases the bucket
//     (S/global_client_impl.cc:292-379).
//   - A token bucket is replaced unless max_tokens, tokens_per_fill and the
//     nanoseconds of fill_interval are equal; a new one starts at the old
//     one's ratio of tokens left, full without one; it refills continuously
//     at tokens_per_fill per whole seconds of fill_interval
//     (S/global_client_impl.cc:244-290).
//   - The TTL counts whole seconds, unset is 0; on expiry the
//     expired_assignment_behavior fallback holds for its whole-second
//     timeout, then no_assignment_behavior (S/global_client_impl.cc:
//     433-556).
package rlqsenvoy

import (
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ReportInterval is Envoy's report period.
const ReportInterval = 5 * time.Second

// Stream is one open stream to the server: Send a report; the answers come
// to Envoy.Deliver.
type Stream interface {
	Send(*rlqsv3.RateLimitQuotaUsageReports) error
}

// Dial opens a stream; the model calls it at the first bucket and at a
// tick after a failure.
type Dial func() (Stream, error)

// Settings are a bucket's settings from the filter's bucket matcher.
type Settings struct {
	// NoAssignment is no_assignment_behavior's fallback; nil: ALLOW_ALL.
	NoAssignment *typev3.RateLimitStrategy
	// Expired is expired_assignment_behavior's fallback_rate_limit, held
	// for ExpiredFor (whole seconds); nil: none.
	Expired    *typev3.RateLimitStrategy
	ExpiredFor time.Duration
}

// Envoy is one Envoy process's client for one (server, domain). Safe for
// concurrent use.
type Envoy struct {
	mu       sync.Mutex
	domain   string
	dial     Dial
	stream   Stream
	buckets  map[string]*bucket
	every    time.Duration // the report period
	started  bool
	nextTick time.Time
	// Lost counts reports that could not be sent.
	Lost int
}

type bucket struct {
	id              *rlqsv3.BucketId
	settings        Settings
	allowed, denied uint64
	last            time.Time
	cached          *typev3.RateLimitStrategy // nil: the default
	expires         time.Time                 // of cached
	fallback        bool                      // cached is the expiry fallback
	tb              *tokens
}

// tokens is Envoy's continuous-refill token bucket.
type tokens struct {
	spec   *typev3.TokenBucket
	max    float64
	rate   float64 // tokens a second
	have   float64
	filled time.Time
}

func newTokens(spec *typev3.TokenBucket, have float64, now time.Time) *tokens {
	iv := float64(spec.GetFillInterval().GetSeconds()) // whole seconds
	rate := math.Inf(1)                                // a sub-second interval: divided by 0
	if iv > 0 {
		rate = float64(spec.GetTokensPerFill().GetValue()) / iv
	}
	if rate == 0 {
		rate = 1 / (365 * 24 * 3600.0) // kMinFillRate
	}
	return &tokens{spec: spec, max: float64(spec.GetMaxTokens()), rate: rate, have: have, filled: now}
}

func (t *tokens) refill(now time.Time) {
	t.have = min(t.max, t.have+t.rate*now.Sub(t.filled).Seconds())
	t.filled = now
}

// New returns a model Envoy for domain, reaching the server by dial,
// reporting every ReportInterval as every Envoy release does.
func New(domain string, dial Dial) *Envoy { return NewReporting(domain, dial, ReportInterval) }

// NewReporting is New for an Envoy whose filter sets the report period
// to every (a positive duration; 5 s stays the default): pull request
// 47104's reporting_interval, not in Envoy yet. It panics on a period
// that is not positive.
func NewReporting(domain string, dial Dial, every time.Duration) *Envoy {
	if every <= 0 {
		panic("rlqsenvoy: a report period must be positive")
	}
	return &Envoy{domain: domain, dial: dial, every: every, buckets: make(map[string]*bucket)}
}

// Request decides one request of bucket id with settings at now.
func (e *Envoy) Request(id map[string]string, s Settings, now time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.expire(now)
	key := keyOf(id)
	b := e.buckets[key]
	if b == nil {
		allowed := !isDenyAll(s.NoAssignment)
		b = &bucket{id: &rlqsv3.BucketId{Bucket: id}, settings: s, last: now}
		e.buckets[key] = b
		if allowed {
			b.allowed = 1
		} else {
			b.denied = 1
		}
		if !e.started {
			e.started, e.nextTick = true, now.Add(e.every)
			e.stream, _ = e.dial()
		}
		e.send(&rlqsv3.RateLimitQuotaUsageReports{Domain: e.domain, BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{e.usage(b, now)}})
		return allowed
	}
	ok := e.allow(b, now)
	if ok {
		b.allowed++
	} else {
		b.denied++
	}
	return ok
}

func (e *Envoy) allow(b *bucket, now time.Time) bool {
	st := b.cached
	if st == nil {
		st = b.settings.NoAssignment
	}
	switch x := st.GetStrategy().(type) {
	case *typev3.RateLimitStrategy_BlanketRule_:
		return x.BlanketRule == typev3.RateLimitStrategy_ALLOW_ALL
	case *typev3.RateLimitStrategy_TokenBucket:
		if b.tb == nil {
			panic("rlqsenvoy: a token bucket as no_assignment_behavior (Envoy dereferences a null limiter: S/filter.cc:309-312)")
		}
		b.tb.refill(now)
		if b.tb.have >= 1 {
			b.tb.have--
			return true
		}
		return false
	}
	return true // requests_per_time_unit, unset: allowed (S/filter.cc:313-321)
}

// Tick sends the periodic reports due by now (one every report period
// from the first bucket), opening the stream first if it failed.
func (e *Envoy) Tick(now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.expire(now)
	for e.started && !now.Before(e.nextTick) {
		at := e.nextTick
		e.nextTick = e.nextTick.Add(e.every)
		r := &rlqsv3.RateLimitQuotaUsageReports{Domain: e.domain}
		for _, b := range e.buckets {
			r.BucketQuotaUsages = append(r.BucketQuotaUsages, e.usage(b, at))
		}
		if e.stream == nil {
			e.stream, _ = e.dial()
		}
		e.send(r)
	}
}

// usage is b's usage since its last report, which it resets.
func (e *Envoy) usage(b *bucket, now time.Time) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
	u := &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		BucketId:           b.id,
		TimeElapsed:        &durationpb.Duration{Seconds: int64(now.Sub(b.last) / time.Second)},
		NumRequestsAllowed: b.allowed, NumRequestsDenied: b.denied,
	}
	b.allowed, b.denied, b.last = 0, 0, now
	return u
}

func (e *Envoy) send(r *rlqsv3.RateLimitQuotaUsageReports) {
	if e.stream == nil || e.stream.Send(r) != nil {
		e.stream = nil
		e.Lost++
	}
}

// Broken marks the stream failed (the server closed it): the next tick
// opens another.
func (e *Envoy) Broken() {
	e.mu.Lock()
	e.stream = nil
	e.mu.Unlock()
}

// Deliver applies a response from the server at now.
func (e *Envoy) Deliver(resp *rlqsv3.RateLimitQuotaResponse, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, a := range resp.GetBucketAction() {
		if len(a.GetBucketId().GetBucket()) == 0 {
			continue
		}
		key := keyOf(a.GetBucketId().GetBucket())
		b := e.buckets[key]
		if b == nil {
			continue // not a bucket of ours
		}
		if a.GetAbandonAction() != nil {
			delete(e.buckets, key)
			continue
		}
		qa := a.GetQuotaAssignmentAction()
		if qa == nil {
			continue
		}
		st := qa.GetRateLimitStrategy()
		switch st.GetStrategy().(type) {
		case *typev3.RateLimitStrategy_BlanketRule_:
			b.tb = nil
		case *typev3.RateLimitStrategy_TokenBucket:
			e.takeBucket(b, st.GetTokenBucket(), now)
		default:
			continue // requests_per_time_unit, unset: dropped
		}
		b.cached, b.fallback = proto.Clone(st).(*typev3.RateLimitStrategy), false
		b.expires = now.Add(time.Duration(qa.GetAssignmentTimeToLive().GetSeconds()) * time.Second)
	}
}

// takeBucket applies an assigned or fallback token bucket: the same
// limiter if Envoy takes it for the last, else a new one at its ratio.
func (e *Envoy) takeBucket(b *bucket, spec *typev3.TokenBucket, now time.Time) {
	last := b.cached.GetTokenBucket()
	if b.tb != nil && last != nil && last.GetMaxTokens() == spec.GetMaxTokens() &&
		last.GetTokensPerFill().GetValue() == spec.GetTokensPerFill().GetValue() &&
		last.GetFillInterval().GetNanos() == spec.GetFillInterval().GetNanos() {
		return
	}
	have := float64(spec.GetMaxTokens())
	if b.tb != nil {
		b.tb.refill(now)
		have = math.Floor(float64(spec.GetMaxTokens()) * b.tb.have / b.tb.max)
	}
	b.tb = newTokens(proto.Clone(spec).(*typev3.TokenBucket), have, now)
}

// expire runs the TTL and fallback timers due by now.
func (e *Envoy) expire(now time.Time) {
	for _, b := range e.buckets {
		for b.cached != nil && !now.Before(b.expires) {
			at := b.expires
			if !b.fallback && b.settings.Expired != nil {
				if tb := b.settings.Expired.GetTokenBucket(); tb != nil {
					e.takeBucket(b, tb, at)
				} else {
					b.tb = nil
				}
				b.cached, b.fallback = b.settings.Expired, true
				b.expires = at.Add(time.Duration(b.settings.ExpiredFor / time.Second * time.Second))
				continue
			}
			b.cached, b.fallback, b.tb = nil, false, nil
		}
	}
}

// Buckets is how many buckets it holds.
func (e *Envoy) Buckets() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.buckets)
}

// keyOf names a bucket id by its entries in key order, each with its
// length: equal ids, equal names, as Envoy's hash of the serialized id
// (without serializing one a request: the simulations make millions).
func keyOf(id map[string]string) string {
	keys := make([]string, 0, len(id))
	for k := range id {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b []byte
	for _, k := range keys {
		for _, x := range []string{k, id[k]} {
			b = strconv.AppendInt(b, int64(len(x)), 10)
			b = append(b, ':')
			b = append(b, x...)
		}
	}
	return string(b)
}

func isDenyAll(s *typev3.RateLimitStrategy) bool {
	r, ok := s.GetStrategy().(*typev3.RateLimitStrategy_BlanketRule_)
	return ok && r.BlanketRule == typev3.RateLimitStrategy_DENY_ALL
}
