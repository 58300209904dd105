// Package localtier is the sidecar's decision logic (cmd/localfilter): a
// rls.Decider that answers from memory first and leaves the precise limit
// to an upstream sluice server.
//
// For each request, after rls.Service's flag cache ("already over limit
// until T", shared with the server through pkg/cache):
//
//  1. a local token bucket per limit at Fraction of the limit (rate and
//     burst), all or nothing, on an in-process store. At Fraction 1.0 it
//     never rejects what a global token bucket would admit: a proxy that
//     alone used up the bucket has used up the global one too.
//  2. the global decision: in Sync mode the upstream decides every request
//     that passed (exact); in Async mode the request is admitted from
//     memory and its hits are sent to the upstream, aggregated per key,
//     every FlushInterval or when BatchSize keys are pending, marked as
//     already admitted (rls.SidecarRecord) so the upstream records every
//     one of them even past the limit (the state goes into debt). Answers
//     that a key is over limit go into the flag cache.
//
// Async overshoot: once the global limit is used up, a sidecar keeps
// admitting from its local bucket until the answer to its next flush
// arrives, at most F + RTT later (F the flush interval), and again for up
// to F + RTT each time a flag expires while the key is still over. With N
// sidecars, local rate r = Fraction·L/W and burst b = Fraction·Burst, the
// hits admitted beyond the limit per such cycle are at most
//
//	N · min(b + r·(F + RTT), q·(F + RTT))
//
// where q is the request rate a sidecar is offered for the key. Debt makes
// the global state hold everyone back until it is repaid, so over a long
// run the admitted rate converges to the limit.
//
// If the upstream fails or is slow (calls are bounded by Timeout), the
// sidecar keeps deciding locally, additionally holding each limit to
// FallbackShare of its local share, marks the answers degraded (not
// cached as flags), keeps at most MaxPending keys of unsent hits (the rest
// are counted as dropped) and resumes when a call succeeds again.
//
// It depends on pkg/rls (the Decider contract and the sidecar metadata),
// pkg/global (the in-process store), pkg/cache and the Envoy protos.
package localtier

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/cache"
	"github.com/sluicehq/sluice/pkg/global"
	"github.com/sluicehq/sluice/pkg/rls"
)

// Mode is how the global limit is applied.
type Mode uint8

const (
	Sync Mode = iota
	Async
)

// ParseMode parses sync or async.
func ParseMode(s string) (Mode, error) {
	switch s {
	case "sync":
		return Sync, nil
	case "async":
		return Async, nil
	}
	return 0, fmt.Errorf("mode %q: want sync or async", s)
}

func (m Mode) String() string {
	if m == Async {
		return "async"
	}
	return "sync"
}

// Upstream is the global service: rlsv3.RateLimitServiceClient.
type Upstream interface {
	ShouldRateLimit(ctx context.Context, in *rlsv3.RateLimitRequest, opts ...grpc.CallOption) (*rlsv3.RateLimitResponse, error)
}

// Options configure a Tier.
type Options struct {
	Upstream Upstream
	Mode     Mode
	// Fraction of each limit the local bucket allows, in (0, 1]. Default 1.
	Fraction float64
	// FallbackShare of the local share allowed while the upstream is
	// unavailable, in (0, 1]. Default 0.5.
	FallbackShare float64
	// Timeout bounds each upstream call. Default 20ms.
	Timeout time.Duration
	// FlushInterval and BatchSize: async flushes. Defaults 10ms and 256 keys.
	FlushInterval time.Duration
	BatchSize     int
	// MaxPending bounds the keys of unsent hits. Default 100,000.
	MaxPending int
	// MaxKeys bounds the local buckets. Default 1<<20.
	MaxKeys int
	// Cache is the flag cache the rls.Service in front uses; async answers
	// fill it. Optional.
	Cache      *cache.OverLimit
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Tier implements rls.Decider. Close stops its flusher.
type Tier struct {
	opts     Options
	local    *global.Memory
	fallback *global.Memory
	m        *metrics

	healthy atomic.Bool
	retryAt atomic.Int64 // unix ns: while unhealthy, when to try the upstream again

	mu      sync.Mutex
	pending map[string]*pendingHits
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
}

type pendingHits struct {
	domain string
	desc   *ratelimitv3.RateLimitDescriptor
	hits   uint64
}

// New returns a Tier; in Async mode it starts the flusher.
func New(opts Options) (*Tier, error) {
	if opts.Upstream == nil {
		return nil, errors.New("localtier: Upstream is required")
	}
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&opts.Fraction, 1)
	def(&opts.FallbackShare, 0.5)
	if opts.Fraction < 0 || opts.Fraction > 1 || opts.FallbackShare < 0 || opts.FallbackShare > 1 {
		return nil, fmt.Errorf("localtier: fraction %v and fallback share %v must be in (0, 1]", opts.Fraction, opts.FallbackShare)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 20 * time.Millisecond
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = 10 * time.Millisecond
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = 256
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = 100_000
	}
	if opts.MaxKeys <= 0 {
		opts.MaxKeys = 1 << 20
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	local, err := global.NewMemory(global.MemoryOptions{MaxKeys: opts.MaxKeys})
	if err != nil {
		return nil, err
	}
	fallback, err := global.NewMemory(global.MemoryOptions{MaxKeys: opts.MaxKeys})
	if err != nil {
		return nil, err
	}
	t := &Tier{
		opts: opts, local: local, fallback: fallback, m: newMetrics(opts.Registerer),
		pending: make(map[string]*pendingHits), kick: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	t.healthy.Store(true)
	if opts.Mode == Async {
		go t.flusher()
	} else {
		close(t.done)
	}
	return t, nil
}

// Healthy reports whether the upstream answered the last call.
func (t *Tier) Healthy() bool { return t.healthy.Load() }

// Close flushes what is pending (async) and stops the flusher.
func (t *Tier) Close() error {
	select {
	case <-t.stop:
	default:
		close(t.stop)
	}
	<-t.done
	return nil
}

// scaled returns items with their limits scaled to share, as local token
// buckets.
func scaled(items []global.Item, share float64) []global.Item {
	out := make([]global.Item, len(items))
	for i, it := range items {
		p := it.Params
		it.Params = algorithm.Params{
			Kind:   algorithm.TokenBucket,
			Limit:  max(1, int64(math.Floor(float64(p.Limit)*share))),
			Window: p.Window,
			Burst:  max(1, int64(math.Floor(float64(max(p.Burst, p.Limit))*share))),
		}
		if p.Kind == algorithm.TokenBucket || p.Kind == algorithm.GCRA {
			it.Params.Burst = max(1, int64(math.Floor(float64(p.Burst)*share)))
		}
		it.Mode = algorithm.Take
		out[i] = it
	}
	return out
}

// Decide implements rls.Decider.
func (t *Tier) Decide(ctx context.Context, b *rls.Batch) error {
	local := scaled(b.Items, t.opts.Fraction)
	if err := t.local.Decide(ctx, local, b.Results); err != nil {
		return err
	}
	if !admitted(b, b.Results) {
		t.m.decision("local_bucket", "over_limit")
		return nil
	}
	if !t.upstreamUsable() {
		return t.degrade(ctx, b, local)
	}
	if t.opts.Mode == Async {
		t.record(b)
		t.m.decision("local_bucket", "ok")
		return nil
	}
	if err := t.syncDecide(ctx, b); err != nil {
		t.failed(err)
		t.refund(ctx, local)
		return t.degrade(ctx, b, local)
	}
	t.succeeded()
	if !admitted(b, b.Results) {
		// The global limit rejected what the local bucket admitted: give
		// the local tokens back, so the local bucket never holds less than
		// the global one and never rejects what it would admit.
		t.refund(ctx, local)
	}
	return nil
}

// refund returns what a local decision took.
func (t *Tier) refund(ctx context.Context, local []global.Item) {
	back := make([]global.Item, len(local))
	for i, it := range local {
		it.Cost, it.Mode = -it.Cost, algorithm.Force
		back[i] = it
	}
	res := make([]global.Result, len(back))
	t.local.Decide(ctx, back, res)
}

func admitted(b *rls.Batch, res []global.Result) bool {
	for i, r := range res {
		if !r.Allowed && !b.Items[i].Shadow {
			return false
		}
	}
	return true
}

// degrade decides without the upstream: the local share, further held to
// FallbackShare of it.
func (t *Tier) degrade(ctx context.Context, b *rls.Batch, local []global.Item) error {
	b.Degraded = true
	if err := t.fallback.Decide(ctx, scaled(local, t.opts.FallbackShare), b.Results); err != nil {
		return err
	}
	result := "ok"
	if !admitted(b, b.Results) {
		result = "over_limit"
	} else if t.opts.Mode == Async {
		t.record(b) // sent when the upstream returns, within MaxPending
	}
	t.m.decision("fallback", result)
	return nil
}

func (t *Tier) upstreamUsable() bool {
	if t.healthy.Load() {
		return true
	}
	return time.Now().UnixNano() >= t.retryAt.Load()
}

func (t *Tier) failed(err error) {
	t.m.upstream("error")
	t.retryAt.Store(time.Now().Add(time.Second).UnixNano())
	if t.healthy.Swap(false) {
		t.opts.Logger.Warn("upstream unavailable; deciding locally at the fallback share", "error", err.Error())
	}
}

func (t *Tier) succeeded() {
	t.m.upstream("ok")
	if !t.healthy.Swap(true) {
		t.opts.Logger.Info("upstream recovered")
	}
}

// request builds the upstream request for items: each descriptor with its
// cost as an explicit hits_addend.
func request(domain string, descs []*ratelimitv3.RateLimitDescriptor, costs []uint64) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: domain, Descriptors: make([]*ratelimitv3.RateLimitDescriptor, len(descs))}
	for i, d := range descs {
		req.Descriptors[i] = &ratelimitv3.RateLimitDescriptor{Entries: d.GetEntries(), Limit: d.GetLimit(), HitsAddend: wrapperspb.UInt64(costs[i])}
	}
	return req
}

func (t *Tier) syncDecide(ctx context.Context, b *rls.Batch) error {
	costs := make([]uint64, len(b.Items))
	for i, it := range b.Items {
		costs[i] = uint64(it.Cost)
	}
	var md metadata.MD
	resp, err := t.call(ctx, request(b.Domain, b.Descriptors, costs), rls.SidecarSync, &md)
	if err != nil {
		return err
	}
	if len(resp.GetStatuses()) != len(b.Items) {
		return fmt.Errorf("upstream answered %d statuses for %d descriptors", len(resp.GetStatuses()), len(b.Items))
	}
	retries := parseRetries(md)
	over := false
	for i, st := range resp.GetStatuses() {
		r := global.Result{
			Allowed:    st.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT,
			Remaining:  int64(st.GetLimitRemaining()),
			ResetAfter: st.GetDurationUntilReset().AsDuration().Microseconds(),
		}
		if !r.Allowed {
			over = true
			r.RetryAfter = r.ResetAfter
			if i < len(retries) && retries[i] > 0 {
				r.RetryAfter = retries[i]
			}
		}
		b.Results[i] = r
	}
	result := "ok"
	if over {
		result = "over_limit"
	}
	t.m.decision("global", result)
	return nil
}

func (t *Tier) call(ctx context.Context, req *rlsv3.RateLimitRequest, mode string, md *metadata.MD) (*rlsv3.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, t.opts.Timeout)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, rls.SidecarKey, mode)
	return t.opts.Upstream.ShouldRateLimit(ctx, req, grpc.Header(md))
}

func parseRetries(md metadata.MD) []int64 {
	v := md.Get(rls.RetryAfterKey)
	if len(v) == 0 {
		return nil
	}
	parts := strings.Split(v[0], ",")
	out := make([]int64, len(parts))
	for i, p := range parts {
		out[i], _ = strconv.ParseInt(p, 10, 64)
	}
	return out
}
