package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/sluicehq/sluice/pkg/global"
)

// FailureMode is what a StoreDecider does while its store is unavailable.
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
type Store interface {
	Decide(ctx context.Context, items []global.Item, out []global.Result) error
}

// Direct decides on a store that cannot be unavailable (the in-memory
// store): no timeout, no breaker, no failure mode.
type Direct struct{ Store Store }

// Decide implements Decider.
func (d Direct) Decide(ctx context.Context, b *Batch) error {
	return d.Store.Decide(ctx, b.Items, b.Results)
}

// StoreOptions configure a StoreDecider.
type StoreOptions struct {
	Store Store
	// Timeout bounds each store call. Default 10ms.
	Timeout time.Duration
	Mode    FailureMode
	// Fallback is the in-process store FailLocal decides on.
	Fallback Store
	// LocalShare is the share of each limit FailLocal allows per server
	// process, in (0, 1]. With N replicas, 1/N keeps the sum at the limit.
	// Default 0.5.
	LocalShare float64
	// Failures in a row that open the circuit breaker. Default 3.
	BreakerFailures int
	// Cooldown is how long the breaker stays open before one request
	// probes the store again. Default 1s.
	Cooldown time.Duration
	Logger   *slog.Logger
	Metrics  *StoreMetrics
	Now      func() time.Time
}

// StoreDecider decides on a store with a bounded timeout and a circuit
// breaker: after BreakerFailures failures in a row it stops calling the
// store for Cooldown and decides by its failure mode, so a dead Redis
// costs no waiting; then one request at a time probes the store until one
// succeeds. Transitions are logged once each, not per request.
type StoreDecider struct {
	opts StoreOptions

	mu       sync.Mutex
	failures int
	open     bool
	until    time.Time // while open: when to probe
	probing  bool
}

// NewStoreDecider returns a StoreDecider.
func NewStoreDecider(opts StoreOptions) (*StoreDecider, error) {
	if opts.Store == nil {
		return nil, errors.New("rls: StoreOptions.Store is required")
	}
	if opts.Mode == FailLocal && opts.Fallback == nil {
		return nil, errors.New("rls: failure mode local needs a Fallback store")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Millisecond
	}
	if opts.LocalShare == 0 {
		opts.LocalShare = 0.5
	}
	if opts.LocalShare < 0 || opts.LocalShare > 1 {
		return nil, fmt.Errorf("rls: local share %v: want a share in (0, 1]", opts.LocalShare)
	}
	if opts.BreakerFailures <= 0 {
		opts.BreakerFailures = 3
	}
	if opts.Cooldown <= 0 {
		opts.Cooldown = time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &StoreDecider{opts: opts}, nil
}

// Healthy reports whether the store is answering (the breaker is closed).
func (d *StoreDecider) Healthy() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return !d.open
}

// Mode is the failure mode.
func (d *StoreDecider) Mode() FailureMode { return d.opts.Mode }

// Decide implements Decider.
func (d *StoreDecider) Decide(ctx context.Context, b *Batch) error {
	probe, ok := d.admit()
	if !ok {
		return d.fail(ctx, b, nil)
	}
	sctx, cancel := context.WithTimeout(ctx, d.opts.Timeout)
	start := time.Now()
	err := d.opts.Store.Decide(sctx, b.Items, b.Results)
	cancel()
	if m := d.opts.Metrics; m != nil {
		m.latency.Observe(time.Since(start).Seconds())
	}
	if err == nil {
		d.succeeded(probe)
		return nil
	}
	if ctx.Err() != nil {
		// The caller gave up (Envoy's own timeout): not the store's fault.
		d.release(probe)
		return ctx.Err()
	}
	if m := d.opts.Metrics; m != nil {
		m.errors.Inc()
	}
	d.failed(probe, err)
	return d.fail(ctx, b, err)
}

// admit says whether to call the store; probe is set for the one call
// that tests a store the breaker had given up on.
func (d *StoreDecider) admit() (probe, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.open {
		return false, true
	}
	if d.probing || d.opts.Now().Before(d.until) {
		return false, false
	}
	d.probing = true
	return true, true
}

func (d *StoreDecider) release(probe bool) {
	if probe {
		d.mu.Lock()
		d.probing = false
		d.mu.Unlock()
	}
}

func (d *StoreDecider) succeeded(probe bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failures = 0
	if probe {
		d.probing = false
	}
	if d.open {
		d.open = false
		d.opts.Logger.Info("rate limit store recovered", "failure_mode", d.opts.Mode.String())
		if m := d.opts.Metrics; m != nil {
			m.up.Set(1)
		}
	}
}

func (d *StoreDecider) failed(probe bool, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if probe {
		d.probing = false
	}
	d.failures++
	if d.open {
		d.until = d.opts.Now().Add(d.opts.Cooldown)
		return
	}
	if d.failures >= d.opts.BreakerFailures {
		d.open = true
		d.until = d.opts.Now().Add(d.opts.Cooldown)
		d.opts.Logger.Warn("rate limit store unavailable; deciding by failure mode until it returns",
			"failure_mode", d.opts.Mode.String(), "error", err.Error(), "probe_every", d.opts.Cooldown.String())
		if m := d.opts.Metrics; m != nil {
			m.up.Set(0)
		}
	}
}

// fail decides b by the failure mode.
func (d *StoreDecider) fail(ctx context.Context, b *Batch, cause error) error {
	if m := d.opts.Metrics; m != nil {
		m.failureMode.WithLabelValues(d.opts.Mode.String()).Inc()
	}
	b.Degraded, b.Tier = true, TierFailureMode
	switch d.opts.Mode {
	case FailAllow:
		for i, it := range b.Items {
			// Nothing was counted: report the limit untouched.
			b.Results[i] = global.Result{Allowed: true, Remaining: it.Params.Limit}
		}
		return nil
	case FailDeny:
		for i := range b.Items {
			b.Results[i] = global.Result{RetryAfter: 1_000_000, ResetAfter: 1_000_000}
		}
		b.Unavailable = true
		return nil
	case FailLocal:
		local := make([]global.Item, len(b.Items))
		for i, it := range b.Items {
			it.Params.Limit = share(it.Params.Limit, d.opts.LocalShare)
			it.Params.Burst = share(it.Params.Burst, d.opts.LocalShare)
			local[i] = it
		}
		return d.opts.Fallback.Decide(ctx, local, b.Results)
	}
	if cause == nil {
		return ErrUnavailable
	}
	return fmt.Errorf("%w: %v", ErrUnavailable, cause)
}

// share is n scaled down to a share, at least 1.
func share(n int64, s float64) int64 {
	return max(1, int64(math.Floor(float64(n)*s)))
}
