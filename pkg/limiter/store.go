package limiter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/breaker"
)

// FailureMode is what a StoreDecider does while its store is unavailable.
//
// FailureModes are plain values, safe to share between goroutines.
type FailureMode uint8

const (
	// FailError answers gRPC UNAVAILABLE, so Envoy's failure_mode_deny
	// decides.
	FailError FailureMode = iota
	// FailAllow admits every request.
	FailAllow
	// FailDeny rejects every request, saying the store is unavailable.
	FailDeny
	// FailLocal decides on an in-process store at LocalShare of each limit.
	FailLocal
)

var failureModeNames = [...]string{"error", "allow", "deny", "local"}

func (m FailureMode) String() string {
	if int(m) < len(failureModeNames) {
		return failureModeNames[m]
	}
	return fmt.Sprintf("FailureMode(%d)", m)
}

// ParseFailureMode parses allow, deny, error or local.
func ParseFailureMode(s string) (FailureMode, error) {
	for i, n := range failureModeNames {
		if s == n {
			return FailureMode(i), nil
		}
	}
	return 0, fmt.Errorf("failure mode %q: want allow, deny, error or local", s)
}

// Store decides items all or nothing: global.Memory and global.Redis.
//
// A StoreDecider calls it from every request's goroutine: an implementation
// must be safe for concurrent use.
type Store interface {
	Decide(ctx context.Context, items []algorithm.Item, out []algorithm.Result) error
}

// waitBounded is a Store that bounds its wait itself (global.Redis):
// DecideWithin decides as Decide does, returning context.DeadlineExceeded
// past wait, without the timer and child context a context.WithTimeout
// makes a request.
type waitBounded interface {
	DecideWithin(ctx context.Context, wait time.Duration, items []algorithm.Item, out []algorithm.Result) error
}

// stalled is an error by which a store says it stopped answering (not
// that it refused): global.ErrStalled. See StoreDecider.
type stalled interface{ Stalled() bool }

func isStall(err error) bool {
	var s stalled
	return errors.As(err, &s) && s.Stalled()
}

// Infallible decides on a store that cannot be unavailable (the in-memory
// store): no timeout, no breaker, no failure mode.
//
// It is safe for concurrent use if its Store is (both stores are). The zero
// value has no Store and must not be used.
type Infallible struct{ Store Store }

// Direct is Infallible's name before it, safe for concurrent use as it is.
//
// Deprecated: use Infallible; Direct goes in the next release.
type Direct = Infallible

// Decide implements Decider.
func (d Infallible) Decide(ctx context.Context, b *Batch) error {
	return d.Store.Decide(ctx, b.Items, b.Results)
}

// StoreOptions configure a StoreDecider.
//
// NewStoreDecider copies them; the Store, Breaker and Metrics they name are
// shared, and used from every request's goroutine.
type StoreOptions struct {
	Store Store
	// MaxWait bounds how long a request waits for the store when its caller
	// set no deadline. A caller's deadline (Envoy sends its filter timeout)
	// bounds it otherwise, less a little time to answer in. Past it the
	// request is shed: decided on Fallback at LocalShare. Default
	// DefaultMaxWait(0): a second.
	MaxWait time.Duration
	Mode    FailureMode
	// Fallback is the in-process store that sheds requests the store did
	// not answer in time, and that FailLocal decides on. Required.
	Fallback Store
	// LocalShare is the share of each limit one process allows when it
	// decides on Fallback, in (0, 1]. With N replicas, 1/N keeps the sum
	// at the limit. Default DefaultLocalShare.
	LocalShare float64
	// Breaker configures the circuit breaker; a zero field takes
	// pkg/breaker's default.
	Breaker breaker.Options
	Logger  *slog.Logger
	Metrics *StoreMetrics
	Now     func() time.Time
}

// DefaultLocalShare is StoreOptions.LocalShare's default (the daemons'
// -local-share): half of each limit per process.
const DefaultLocalShare = 0.5

// DefaultMaxWait is how long a request with no deadline of its own waits
// for a store whose timeout (global.RedisOptions.Timeout) is timeout: a
// second, or five timeouts if longer (StoreOptions.MaxWait, the daemons'
// -store-max-wait).
func DefaultMaxWait(timeout time.Duration) time.Duration { return max(time.Second, 5*timeout) }

// StoreDecider decides on a store (Redis) and tells three things apart:
//
//   - The store failed this request: it refused or reset the connection,
//     or stopped answering (an error with Stalled() true, as
//     global.ErrStalled). The failure counts towards
//     the circuit breaker (pkg/breaker: a failure rate over a window),
//     which, once open, stops calling the store for its cooldown and lets
//     one probe through at a time after it; while it is open, requests are
//     decided by the failure mode. A refused or reset connection is decided
//     by the failure mode at once; a stall, while the breaker is still
//     closed, is shed as below, since on a machine with no CPU to spare a
//     healthy Redis can go unscheduled for longer than any timeout fit for
//     Envoy, and only the failure rate tells that from a Redis gone.
//   - The process is overloaded: the store has not answered by the time
//     the caller's deadline is near (or MaxWait has passed) and has not
//     failed either. The request is shed, decided in memory at LocalShare
//     (Batch.Source "shed"), and the breaker is not told: a slow process is
//     not a dead store, and Envoy, which fails open on an error, should not
//     lose its limits when traffic surges.
//   - The caller went away: no decision.
//
// Breaker transitions are logged once each, not per request. It is safe
// for concurrent use.
type StoreDecider struct {
	opts    StoreOptions
	within  waitBounded // opts.Store, when it bounds its own wait; else nil
	breaker *breaker.Breaker
	// lastAnswer is when (Unix ns) the store last answered a call.
	lastAnswer atomic.Int64
}

// stallGrace is how recently the store must have answered some call for a
// stalled one to be slowness rather than a failure: on a two-core machine
// a flood saturates, a healthy Redis was seen to leave every reply overdue
// by tens of milliseconds, and taking that for an outage answered clients
// UNAVAILABLE (failure mode error) exactly when the flood came. A Redis
// that answered nothing for a second is frozen or gone.
const stallGrace = time.Second

// NewStoreDecider returns a StoreDecider.
func NewStoreDecider(opts StoreOptions) (*StoreDecider, error) {
	if opts.Store == nil || opts.Fallback == nil {
		return nil, errors.New("limiter: StoreOptions.Store and Fallback are required")
	}
	if opts.MaxWait <= 0 {
		opts.MaxWait = DefaultMaxWait(0)
	}
	if opts.LocalShare == 0 {
		opts.LocalShare = DefaultLocalShare
	}
	if opts.LocalShare < 0 || opts.LocalShare > 1 {
		return nil, fmt.Errorf("limiter: local share %v: want a share in (0, 1]", opts.LocalShare)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	d := &StoreDecider{opts: opts}
	d.within, _ = opts.Store.(waitBounded)
	d.lastAnswer.Store(opts.Now().UnixNano()) // as if answered at the start
	opts.Metrics.initMode(opts.Mode)
	bo := opts.Breaker
	if bo.Now == nil {
		bo.Now = opts.Now
	}
	bo.OnChange = d.changed
	var err error
	if d.breaker, err = breaker.New(bo); err != nil {
		return nil, err
	}
	return d, nil
}

// changed logs and reports a breaker transition.
func (d *StoreDecider) changed(from, to breaker.State, cause error) {
	switch {
	case to == breaker.Open && from == breaker.Closed:
		d.opts.Logger.Warn("rate limit store unavailable; deciding by failure mode until it returns",
			"failure_mode", d.opts.Mode.String(), slog.Any("error", cause), "probe_every", d.opts.Breaker.Cooldown.String())
		d.opts.Metrics.setUp(false)
	case to == breaker.Closed:
		d.opts.Logger.Info("rate limit store recovered", "failure_mode", d.opts.Mode.String())
		d.opts.Metrics.setUp(true)
	}
}

// Healthy reports whether the store is answering (the breaker is closed).
func (d *StoreDecider) Healthy() bool { return d.breaker.State() == breaker.Closed }

// State is the store's breaker state.
func (d *StoreDecider) State() breaker.State { return d.breaker.State() }

// Mode is the failure mode.
func (d *StoreDecider) Mode() FailureMode { return d.opts.Mode }

// answerTime is kept back from a caller's deadline to answer locally in.
const answerTime = 2 * time.Millisecond

// WithinDeadline is how long a call may wait at most, bounded by
// longest and, when ctx has a deadline (Envoy's filter timeout), ending a
// little before it (a tenth of what is left, 2 ms at most), so that a
// silent store or upstream still leaves time to answer locally. The
// StoreDecider and a sidecar's upstream calls share it.
func WithinDeadline(ctx context.Context, longest time.Duration) time.Duration {
	if deadline, ok := ctx.Deadline(); ok {
		left := time.Until(deadline)
		return min(longest, left-min(left/10, answerTime))
	}
	return longest
}

// Decide implements Decider.
func (d *StoreDecider) Decide(ctx context.Context, b *Batch) error {
	probe, ok := d.breaker.Allow()
	if !ok {
		return d.fail(ctx, b, nil)
	}
	wait := WithinDeadline(ctx, d.opts.MaxWait)
	start := time.Now()
	var err error
	if d.within != nil {
		err = d.within.DecideWithin(ctx, wait, b.Items, b.Results)
	} else {
		sctx, cancel := context.WithTimeout(ctx, wait)
		err = d.opts.Store.Decide(sctx, b.Items, b.Results)
		cancel()
	}
	d.opts.Metrics.observe(time.Since(start))
	switch {
	case err == nil:
		d.lastAnswer.Store(d.opts.Now().UnixNano())
		d.breaker.Success(probe)
		return nil
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		// The caller went away (Envoy reset the stream): no decision.
		d.breaker.Release(probe)
		return ctx.Err()
	case errors.Is(err, context.DeadlineExceeded):
		// No answer yet, and no failure: this process is behind.
		d.breaker.Release(probe)
		return d.shed(ctx, b)
	}
	d.opts.Logger.Debug("store call failed", "error", err.Error())
	if isStall(err) && d.opts.Now().UnixNano()-d.lastAnswer.Load() < int64(stallGrace) {
		// Redis left this call's reply overdue but answered another within
		// stallGrace: on a machine with no CPU to spare a healthy Redis
		// waits that long for a core. Slow, not gone: not a failure, and
		// not the store's error.
		d.breaker.Release(probe)
		return d.shed(ctx, b)
	}
	d.opts.Metrics.storeError()
	d.breaker.Failure(probe, err)
	if isStall(err) && d.breaker.State() == breaker.Closed {
		// Redis has not answered for a while. On a machine with no CPU to
		// spare a healthy Redis can wait that long for a core: until the
		// breaker's failure rate says Redis is down, decide in memory.
		return d.shed(ctx, b)
	}
	return d.fail(ctx, b, err)
}

// shed decides b in memory at the local share: the store did not answer in
// time, and did not fail. An Exact batch is not decided: ErrLate.
func (d *StoreDecider) shed(ctx context.Context, b *Batch) error {
	if b.Exact {
		return ErrLate
	}
	b.Degraded, b.Source = true, SourceShed
	return d.decideLocally(ctx, b)
}

// decideLocally decides b on the fallback store at the local share.
func (d *StoreDecider) decideLocally(ctx context.Context, b *Batch) error {
	local := make([]algorithm.Item, len(b.Items))
	for i, it := range b.Items {
		it.Params.Limit = scaled(it.Params.Limit, d.opts.LocalShare)
		it.Params.Burst = scaled(it.Params.Burst, d.opts.LocalShare)
		local[i] = it
	}
	return d.opts.Fallback.Decide(ctx, local, b.Results)
}

// fail decides b by the failure mode.
func (d *StoreDecider) fail(ctx context.Context, b *Batch, cause error) error {
	d.opts.Metrics.failureModeDecision(d.opts.Mode)
	b.Degraded, b.Source = true, SourceFailureMode
	switch d.opts.Mode {
	case FailAllow:
		for i, it := range b.Items {
			// Nothing was counted: report the limit untouched.
			b.Results[i] = algorithm.Result{Allowed: true, Remaining: it.Params.Limit}
		}
		return nil
	case FailDeny:
		for i := range b.Items {
			b.Results[i] = algorithm.Result{RetryAfter: 1_000_000, ResetAfter: 1_000_000}
		}
		b.Unavailable = true
		return nil
	case FailLocal:
		return d.decideLocally(ctx, b)
	}
	if cause == nil {
		return ErrUnavailable
	}
	return fmt.Errorf("%w: %v", ErrUnavailable, cause)
}

// scaled is n scaled down to a share, at least 1.
func scaled(n int64, s float64) int64 {
	return max(1, int64(math.Floor(float64(n)*s)))
}
