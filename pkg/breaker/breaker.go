// Package breaker is sluice's circuit breaker, used in front of the server's
// store and the sidecar's upstream alike, each with its own settings.
//
// It decides from a failure rate, not a count in a row: outcomes are
// counted in a sliding window (Window, in Buckets slices), and the breaker
// opens once at least MinCalls outcomes are in the window and at least
// FailureRatio of them are failures, as sony/gobreaker's ratio trip or
// Envoy's outlier detection by success rate do. A short stall among many
// answered calls leaves it closed; a dead dependency opens it within its
// first few failures. Open, it refuses calls for Cooldown, then lets one
// probe through at a time (half-open): a probe that succeeds closes it and
// starts a fresh window, one that fails opens it for another Cooldown.
//
// What counts as a failure is the caller's to say: only what the
// dependency is responsible for (refused or reset connections, replies
// overdue on the wire), never this process being slow to get to them.
//
// It depends on the standard library only.
package breaker

import (
	"fmt"
	"sync"
	"time"
)

// State is a breaker's state.
//
// States are plain values, safe to share between goroutines.
type State uint8

const (
	Closed   State = iota // calls go through
	Open                  // calls are refused until the cooldown has passed
	HalfOpen              // one probe at a time goes through
)

func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half-open"
	}
	return fmt.Sprintf("State(%d)", s)
}

// Defaults of Options.
const (
	DefaultWindow       = time.Second
	DefaultBuckets      = 10
	DefaultMinCalls     = 5
	DefaultFailureRatio = 0.5
	DefaultCooldown     = time.Second
)

// Options configure a Breaker. Zero values take the defaults given.
//
// New copies it, so changing it afterwards changes nothing; the Breaker
// is safe for concurrent use.
type Options struct {
	// Window is how far back outcomes count. Default DefaultWindow.
	Window time.Duration
	// Buckets slice the window; outcomes leave it a bucket at a time.
	// Default DefaultBuckets.
	Buckets int
	// MinCalls is how many outcomes the window must hold before the ratio
	// can open the breaker. Default DefaultMinCalls.
	MinCalls int
	// FailureRatio of the window's outcomes opens the breaker, in (0, 1].
	// Default DefaultFailureRatio.
	FailureRatio float64
	// Cooldown is how long the breaker stays open before a probe.
	// Default DefaultCooldown.
	Cooldown time.Duration
	// OnChange, if set, is called on every change of state with the error
	// that caused it (nil when closing), under the breaker's lock: it must
	// not call the breaker.
	OnChange func(from, to State, cause error)
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Breaker is a circuit breaker. It is safe for concurrent use; the zero
// value is not ready, use New.
type Breaker struct {
	opts   Options
	bucket time.Duration

	mu      sync.Mutex
	state   State
	until   time.Time // while open: when a probe may go
	probing bool      // half-open: a probe is out
	// The window: ring of buckets, the one for time t at index
	// (t / bucket) mod len, each stamped with its slice's start. The tree
	// has four such rings of time slots (this one, the pipelines' round
	// trips, the admin page's history, the top keys' minutes), each a few
	// lines over what its slots hold, read under its owner's lock: they
	// share the idea, not enough code for a package.
	ok, failed []int
	stamp      []int64
}

// New returns a closed Breaker.
func New(opts Options) (*Breaker, error) {
	if opts.Window == 0 {
		opts.Window = DefaultWindow
	}
	if opts.Buckets == 0 {
		opts.Buckets = DefaultBuckets
	}
	if opts.MinCalls == 0 {
		opts.MinCalls = DefaultMinCalls
	}
	if opts.FailureRatio == 0 {
		opts.FailureRatio = DefaultFailureRatio
	}
	if opts.Cooldown == 0 {
		opts.Cooldown = DefaultCooldown
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	switch {
	case opts.Window < 0 || opts.Buckets < 1 || opts.MinCalls < 1 || opts.Cooldown < 0:
		return nil, fmt.Errorf("breaker: window %v, buckets %d, min calls %d and cooldown %v must be positive", opts.Window, opts.Buckets, opts.MinCalls, opts.Cooldown)
	case !(opts.FailureRatio > 0 && opts.FailureRatio <= 1):
		return nil, fmt.Errorf("breaker: failure ratio %v: want (0, 1]", opts.FailureRatio)
	}
	b := &Breaker{
		opts:   opts,
		bucket: max(1, opts.Window/time.Duration(opts.Buckets)),
		ok:     make([]int, opts.Buckets),
		failed: make([]int, opts.Buckets),
		stamp:  make([]int64, opts.Buckets),
	}
	return b, nil
}

// Allow reports whether a call may go now, and whether it is the probe of
// a half-open breaker. Every allowed call must be followed by Success,
// Failure or Release with the same probe value.
func (b *Breaker) Allow() (probe, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case Closed:
		return false, true
	case Open:
		if b.opts.Now().Before(b.until) {
			return false, false
		}
		b.set(HalfOpen, nil)
	}
	if b.probing {
		return false, false
	}
	b.probing = true
	return true, true
}

// Success records an answered call.
func (b *Breaker) Success(probe bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		b.probing = false
		if b.state == HalfOpen {
			b.clear()
			b.set(Closed, nil)
		}
	}
	b.count(true)
}

// Failure records a call that failed for cause, which the dependency is to
// blame for, and may open the breaker.
func (b *Breaker) Failure(probe bool, cause error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.opts.Now()
	if probe {
		b.probing = false
		if b.state == HalfOpen {
			b.until = now.Add(b.opts.Cooldown)
			b.set(Open, cause)
		}
		return
	}
	b.count(false)
	if b.state != Closed {
		return
	}
	ok, failed := b.totals(now)
	if n := ok + failed; n >= b.opts.MinCalls && float64(failed) >= b.opts.FailureRatio*float64(n) {
		b.until = now.Add(b.opts.Cooldown)
		b.set(Open, cause)
	}
}

// Release ends an allowed call that reached no verdict (its caller went
// away): it counts neither way.
func (b *Breaker) Release(probe bool) {
	if !probe {
		return
	}
	b.mu.Lock()
	b.probing = false
	b.mu.Unlock()
}

// State is the breaker's state now; an open breaker whose cooldown has
// passed reads half-open.
func (b *Breaker) State() State {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == Open && !b.opts.Now().Before(b.until) {
		return HalfOpen
	}
	return b.state
}

// set changes state; the caller holds mu.
func (b *Breaker) set(to State, cause error) {
	if from := b.state; from != to {
		b.state = to
		if b.opts.OnChange != nil {
			b.opts.OnChange(from, to, cause)
		}
	}
}

// count adds an outcome to the window; the caller holds mu.
func (b *Breaker) count(ok bool) {
	i := b.slot(b.opts.Now())
	if ok {
		b.ok[i]++
	} else {
		b.failed[i]++
	}
}

// slot is the index of now's bucket, emptied first if it holds an older
// slice's outcomes; the caller holds mu.
func (b *Breaker) slot(now time.Time) int {
	n := now.UnixNano() / int64(b.bucket)
	i := int(n % int64(len(b.ok)))
	if b.stamp[i] != n {
		b.stamp[i], b.ok[i], b.failed[i] = n, 0, 0
	}
	return i
}

// totals sums the buckets within the window; the caller holds mu.
func (b *Breaker) totals(now time.Time) (ok, failed int) {
	n := now.UnixNano() / int64(b.bucket)
	for i := range b.ok {
		if n-b.stamp[i] < int64(len(b.ok)) {
			ok += b.ok[i]
			failed += b.failed[i]
		}
	}
	return ok, failed
}

// clear empties the window; the caller holds mu.
func (b *Breaker) clear() {
	clear(b.ok)
	clear(b.failed)
}
