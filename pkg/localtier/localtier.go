package localtier

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/pkg/breaker"
	"github.com/sluicehq/sluice/pkg/cache"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/localbucket"
	"github.com/sluicehq/sluice/pkg/lrumap"
	"github.com/sluicehq/sluice/pkg/rls"
	"github.com/sluicehq/sluice/pkg/share"
)

// Upstream is the global service: an rlsv3.RateLimitServiceClient.
//
// The Tier calls it from many goroutines at once (requests and flushes): an
// implementation must be safe for concurrent use, as gRPC clients are.
type Upstream interface {
	ShouldRateLimit(ctx context.Context, in *rlsv3.RateLimitRequest, opts ...grpc.CallOption) (*rlsv3.RateLimitResponse, error)
}

// Defaults of Options.
const (
	DefaultFraction        = 1.0
	DefaultFallbackShare   = 0.5
	DefaultTimeout         = 20 * time.Millisecond
	DefaultRetryInterval   = time.Second
	DefaultFlushInterval   = 10 * time.Millisecond
	DefaultBatchSize       = 256
	DefaultMaxPending      = 100_000
	DefaultMaxPendingBytes = 64 << 20
	// DefaultLooseHold is the longest hold the servers give. What a hold
	// lets a sidecar keep unrecorded is bounded in units (share.HoldShare
	// of what the key has left), and a longer hold is given only to keys
	// with more room (share.HoldMargin): the time bounds only how stale a
	// loose key's count in the store may be. 10,000 keys asked for about
	// once a second each went into a record every 2 s with one or two
	// hits each; at 10 s, ten, and the sidecar spent 0.91 of the CPU a
	// request it did at 2 s (BENCHMARKS.md).
	DefaultLooseHold = share.MaxHold
)

// Options configure a Tier. Zero values take the defaults given.
//
// New copies them; what they name (Upstream, Cache, Logger, Registerer,
// Now) is shared with the Tier, which uses it from many goroutines: each
// must be safe for concurrent use.
type Options struct {
	// Upstream is the global service. Required.
	Upstream Upstream
	Mode     Mode
	// Fraction of each limit the local bucket allows, in (0, 1]. Default
	// DefaultFraction.
	Fraction float64
	// FallbackShare of the local share allowed while the upstream is
	// unavailable, in (0, 1]. Default DefaultFallbackShare.
	FallbackShare float64
	// Timeout bounds each upstream call, and each flush call at no less
	// than 1 s (a flush that times out is sent again, and may have been
	// counted). Default DefaultTimeout.
	Timeout time.Duration
	// RetryInterval is how long after a failed call the upstream is tried
	// again. Default DefaultRetryInterval.
	RetryInterval time.Duration
	// FlushInterval and BatchSize: async flushes, every FlushInterval or as
	// soon as BatchSize keys have hits pending. Defaults DefaultFlushInterval
	// and DefaultBatchSize.
	FlushInterval time.Duration
	BatchSize     int
	// MaxPending bounds the keys with unsent hits. Default
	// DefaultMaxPending.
	MaxPending int
	// MaxPendingBytes bounds their memory (an estimate; a key holds its
	// descriptor's entries, long values by digest: a few hundred bytes).
	// Default DefaultMaxPendingBytes.
	MaxPendingBytes int64
	// LooseHold is how long async hits of a key far from its limit may be
	// kept before they are recorded, within the units the upstream's
	// answers allow (pkg/share: HoldShare of what the key has left), at
	// most share.MaxHold and half what the limit remembers of a hit, so
	// that every hit is recorded while it still counts: records of
	// keys asked for now and then carry several hits, not one. Default
	// DefaultLooseHold; negative: every key's hits are recorded every
	// FlushInterval.
	LooseHold time.Duration
	// MaxKeys bounds the local buckets. Default localbucket.DefaultMaxKeys.
	MaxKeys int
	// Cache is the flag cache the limiter.Service in front uses; async answers
	// fill it. Optional.
	Cache *cache.OverLimit
	// Logger gets upstream transitions, once each. Default: discard.
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Tier implements limiter.Decider. It is safe for concurrent use; Close stops
// its flusher.
type Tier struct {
	opts    Options
	local   *localbucket.Buckets
	pending *pending
	allow   *allowances
	// holds are the units of loose keys the upstream's last answers let
	// this sidecar keep unrecorded (pending.holdOf).
	holds *lrumap.Map[float64]
	m     *metrics
	// id names this sidecar in its demand reports (pkg/share).
	id string

	// br judges the upstream from its calls' outcomes (pkg/breaker, the
	// server's breaker with the sidecar's settings: see New).
	br   *breaker.Breaker
	base time.Time
	// lastFlush is the last flush that sent hits, for Status.
	lastFlush flushed
	// cycle is how far apart the flushes have run of late, flushedAt when
	// the last began, took how long the last that sent hits took: the
	// flusher's own (cycleOf).
	cycle, took time.Duration
	flushedAt   time.Time
	// late holds a slot per sync call awaited after its caller was
	// answered (maxLate); lateWG waits for them on Close.
	late   chan struct{}
	lateWG sync.WaitGroup
	// lastAnswer is when (ns since base) the upstream last answered a
	// call: a timeout while it answers others is slowness (answering).
	lastAnswer atomic.Int64
	// refused is why the upstream last refused a record call, nil while
	// it accepts them (Refused); refusedLog samples the error logged.
	refused    atomic.Pointer[string]
	refusedLog rate.Sometimes
	// refunds counts the refunds applied (giveBack): a flush answer to a
	// call sent before one flags no key, since a refund may have made
	// its "over limit" stale.
	refunds   atomic.Int64
	refundLog rate.Sometimes // samples the log of refunds an upstream refused
	heldLog   rate.Sometimes // samples the log of concurrency calls it refused

	// tick is the wall clock's tick (a count of FlushIntervals) the flush
	// being sent belongs to (FlushTick).
	tick atomic.Int64

	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

// New returns a Tier and starts its flusher, which Close stops.
func New(opts Options) (*Tier, error) {
	if opts.Upstream == nil {
		return nil, errors.New("localtier: Upstream is required")
	}
	if opts.Fraction == 0 {
		opts.Fraction = DefaultFraction
	}
	if opts.FallbackShare == 0 {
		opts.FallbackShare = DefaultFallbackShare
	}
	if !(opts.Fraction > 0 && opts.Fraction <= 1) || !(opts.FallbackShare > 0 && opts.FallbackShare <= 1) {
		return nil, fmt.Errorf("localtier: fraction %v and fallback share %v must be in (0, 1]", opts.Fraction, opts.FallbackShare)
	}
	defaults := []struct {
		v *time.Duration
		d time.Duration
	}{{&opts.Timeout, DefaultTimeout}, {&opts.RetryInterval, DefaultRetryInterval}, {&opts.FlushInterval, DefaultFlushInterval}}
	for _, x := range defaults {
		if *x.v <= 0 {
			*x.v = x.d
		}
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = DefaultBatchSize
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = DefaultMaxPending
	}
	if opts.MaxPendingBytes <= 0 {
		opts.MaxPendingBytes = DefaultMaxPendingBytes
	}
	if opts.MaxKeys <= 0 {
		opts.MaxKeys = localbucket.DefaultMaxKeys
	}
	switch {
	case opts.LooseHold == 0:
		opts.LooseHold = DefaultLooseHold
	case opts.LooseHold < 0 || opts.Mode != Async:
		opts.LooseHold = 0
	}
	opts.LooseHold = min(opts.LooseHold, share.MaxHold)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	local, err := localbucket.New(localbucket.Options{MaxKeys: opts.MaxKeys})
	if err != nil {
		return nil, err
	}
	holds, err := lrumap.New[float64](lrumap.Options{MaxKeys: opts.MaxKeys, MaxBytes: allowanceBytes})
	if err != nil {
		return nil, err
	}
	t := &Tier{
		opts: opts, local: local, allow: newAllowances(opts.MaxKeys), holds: holds, id: rand.Text()[:16],
		base: opts.Now(),
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		refusedLog: rate.Sometimes{Interval: 10 * time.Second},
		refundLog:  rate.Sometimes{Interval: 10 * time.Second},
		heldLog:    rate.Sometimes{Interval: 10 * time.Second},
		late:       make(chan struct{}, maxLate),
	}
	t.pending = newPending(opts.MaxPending, opts.MaxPendingBytes, t.holdOf, opts.LooseHold)
	// As if answered at the start: the first calls wait for a connection.
	t.lastAnswer.Store(0)
	t.m = newMetrics(opts.Registerer, t)
	// The sidecar's breaker settings: a short window (100 ms) and a
	// single call enough to judge by, so that a sidecar that sees its
	// upstream fail while it has called it little decides locally at once
	// (each failed sync call costs its caller up to Timeout), while one
	// failure among many answered calls does not.
	t.br, err = breaker.New(breaker.Options{
		Window: 100 * time.Millisecond, MinCalls: 1, Cooldown: opts.RetryInterval, Now: opts.Now, OnChange: t.changed,
	})
	if err != nil {
		return nil, err
	}
	go t.flusher()
	return t, nil
}

// Healthy reports whether the upstream is answering (its breaker is
// closed).
func (t *Tier) Healthy() bool { return t.br.State() == breaker.Closed }

// changed logs and reports a change of the upstream's breaker. On
// recovery it wakes the flusher: hits admitted while the upstream was away
// are recorded at once.
func (t *Tier) changed(from, to breaker.State, cause error) {
	switch {
	case to == breaker.Open && from == breaker.Closed:
		t.m.upstreamUp.Set(0)
		t.m.outages.Inc()
		t.opts.Logger.Warn("upstream unavailable; deciding locally at the fallback share",
			slog.Any("error", cause), "fallback_share", t.opts.FallbackShare, "retry_every", t.opts.RetryInterval.String())
	case to == breaker.Closed:
		t.m.upstreamUp.Set(1)
		t.opts.Logger.Info("upstream recovered")
		select {
		case t.kick <- struct{}{}:
		default:
		}
	}
}

// Close stops the flusher after a last flush of the hits admitted and not
// yet recorded. It is safe to call more than once.
func (t *Tier) Close() error {
	t.lateWG.Wait() // the hits of late answers pending first (lateTimeout at most)
	select {
	case <-t.stop:
	default:
		close(t.stop)
	}
	<-t.done
	return nil
}

// Decide implements limiter.Decider.
func (t *Tier) Decide(ctx context.Context, b *limiter.Batch) error {
	now := t.opts.Now()
	if holds(b) {
		return t.central(ctx, b)
	}
	switch b.Refunds() {
	case len(b.Items):
		t.giveBack(b, now)
		return nil
	case 0:
	default:
		return limiter.Invalidf("a sidecar passes refunds (is_negative_hits) on in requests of refunds alone, as Envoy sends them when a stream ends: send charges apart")
	}
	if t.opts.Mode == Async {
		// The flusher alone talks to the upstream and learns its health.
		if !t.Healthy() {
			t.fallback(b, now)
			return nil
		}
		set, ok := t.takeLocal(b, t.opts.Fraction, now)
		b.Source = limiter.SourceLocalBucket
		var short took
		if ok && !t.allow.take(b, now.Sub(t.base).Nanoseconds(), &short) {
			// Its share of a tight key is spent until the next answer.
			t.returnLocal(b, t.opts.Fraction, now, set)
			t.refuse(b, short)
			ok, b.Source = false, limiter.SourceAllowance
		}
		t.record(b, now, ok)
		return nil
	}
	probe, ok := t.br.Allow()
	if !ok {
		t.fallback(b, now)
		return nil
	}
	share := t.opts.Fraction
	set, ok := t.takeLocal(b, share, now)
	if !ok {
		t.br.Release(probe)
		b.Source = limiter.SourceLocalBucket
		t.record(b, now, false) // the demand the upstream hears of (pkg/share)
		return nil
	}
	c := t.startSync(request(b))
	wait := time.NewTimer(t.callTimeout(ctx, rls.SidecarSync))
	defer wait.Stop()
	timedOut := false
	select {
	case <-c.done:
		c.stop()
	case <-ctx.Done():
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			// The caller went away (Envoy reset the stream): not the
			// upstream's fault, and nothing to count.
			c.stop()
			t.returnLocal(b, share, now, set)
			t.br.Release(probe)
			return ctx.Err()
		}
		// The caller's deadline passed before the call's own bound fired
		// (a late timer on a busy machine; select picks either when both
		// are ready): as below.
		timedOut = true
	case <-wait.C:
		timedOut = true
	}
	if timedOut {
		// No answer in time (the call's bound is within the caller's
		// deadline): answer locally, even if the caller's deadline has
		// passed meanwhile (a busy machine): a caller that timed out
		// admitted the request itself (Envoy fails open), so the local
		// answer counts what passed either way.
		if t.answering(context.DeadlineExceeded) {
			// The upstream answers other calls: it is slow, not gone.
			t.br.Release(probe)
			t.slow(b, share, now, set, c)
			return nil
		}
		c.stop()
		<-c.done
		c.err = context.DeadlineExceeded
	}
	if c.err == nil && len(c.resp.GetStatuses()) != len(b.Items) {
		c.err = fmt.Errorf("upstream answered %d statuses for %d descriptors", len(c.resp.GetStatuses()), len(b.Items))
	}
	if c.err != nil {
		if t.answering(c.err) {
			t.br.Release(probe)
			t.slow(b, share, now, set, nil)
			return nil
		}
		t.returnLocal(b, share, now, set)
		t.br.Failure(probe, c.err)
		t.fallback(b, now)
		return nil
	}
	apply(b, c.resp, c.md)
	t.br.Success(probe)
	b.Source = limiter.SourceGlobal
	if !admitted(b) {
		// The global limit rejected what the local bucket admitted: give the
		// tokens back, so the local bucket counts only admitted hits and never
		// holds fewer tokens than the global one.
		t.returnLocal(b, share, now, set)
	}
	// The upstream counted the hits; the demand goes with the next flush,
	// whose answer gives allowances on tight keys for slow moments.
	t.record(b, now, false)
	return nil
}
