package retry

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"
)

// never is the wait for tokens that will not come.
const never = time.Duration(math.MaxInt64)

// Limiter is a token bucket for pacing a client below a server's limit: it
// holds up to burst tokens, refills at rate tokens per second, and each
// event spends one (or n). It refills lazily, from the time passed to each
// call, so it needs no goroutine. Every decision has a form taking the time
// (AllowAt, ReserveAt, TokensAt); Allow and Wait read time.Now.
//
// A time earlier than one already seen refills nothing and does not move
// the bucket's clock back, so callers whose readings of the clock reach
// the lock out of order never get more than the rate.
//
// A Limiter is safe for concurrent use. The zero value has rate 0 and
// burst 0 and so refuses every event of n > 0.
type Limiter struct {
	mu    sync.Mutex
	rate  float64 // tokens per second, ≥ 0; +Inf allows everything
	burst int
	// tokens is the balance at last. It goes negative while reservations
	// wait for tokens not yet refilled.
	tokens float64
	last   time.Time
	// lastEvent is when the latest reservation may act, so that a
	// cancelled one can tell which of its tokens later ones rely on.
	lastEvent time.Time
}

// NewLimiter returns a full bucket of burst tokens refilling at r per
// second. r = math.Inf(1) allows every event; a negative or NaN r is taken
// as 0 (the burst, once spent, never returns) and a negative burst as 0.
func NewLimiter(r float64, burst int) *Limiter {
	if !(r > 0) {
		r = 0
	}
	burst = max(burst, 0)
	return &Limiter{rate: r, burst: burst, tokens: float64(burst)}
}

// Allow reports whether one event may happen now, and spends a token if so.
func (l *Limiter) Allow() bool { return l.AllowAt(time.Now(), 1) }

// AllowAt reports whether n events may happen at now, and spends n tokens
// if so. n ≤ 0 is always allowed and spends nothing.
func (l *Limiter) AllowAt(now time.Time, n int) bool {
	_, _, ok := l.reserve(now, n, 0)
	return ok
}

// ReserveAt spends n tokens at now if they will be there within maxWait,
// and reports how long the caller must wait before acting. When it reports
// false nothing is spent, and wait is the wait it refused: math.MaxInt64
// if the tokens will never come (n above the burst, or rate 0). Spent
// tokens stay spent whether or not the caller acts.
func (l *Limiter) ReserveAt(now time.Time, n int, maxWait time.Duration) (wait time.Duration, ok bool) {
	_, wait, ok = l.reserve(now, n, maxWait)
	return wait, ok
}

// TokensAt returns the balance the bucket would have at now, which is
// negative while reservations are pending. It spends nothing.
func (l *Limiter) TokensAt(now time.Time) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if math.IsInf(l.rate, 1) {
		return float64(l.burst)
	}
	return l.refilled(now)
}

// Wait blocks until one token is available and spends it; see WaitN.
func (l *Limiter) Wait(ctx context.Context) error { return l.WaitN(ctx, 1) }

// WaitN blocks until n tokens are available and spends them. It returns at
// once, having spent nothing, if ctx is already done, if n exceeds the
// burst or the tokens will never come, or if the wait would end after
// ctx's deadline; that last error wraps context.DeadlineExceeded. If ctx
// is done while waiting, WaitN returns ctx.Err() and gives back those of
// its tokens that no later reservation relies on.
//
// Concurrent waiters are served in the order they reach the Limiter's
// lock: each is promised the time its tokens will have refilled after
// those promised before it, and sleeps until then and no longer. Together
// they never exceed the rate.
func (l *Limiter) WaitN(ctx context.Context, n int) error {
	return l.wait(ctx, n, systemClock{})
}

// wait is WaitN reading the time from clock and sleeping on it.
func (l *Limiter) wait(ctx context.Context, n int, clock Clock) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := clock.Now()
	maxWait := never
	if deadline, ok := ctx.Deadline(); ok {
		maxWait = deadline.Sub(now)
	}
	act, wait, ok := l.reserve(now, n, maxWait)
	switch {
	case !ok && wait == never:
		return fmt.Errorf("retry: Limiter.WaitN(%d): the tokens will never be available (n above burst, or rate 0)", n)
	case !ok:
		return fmt.Errorf("retry: Limiter.WaitN(%d) would wait %v, past the context deadline: %w", n, wait, context.DeadlineExceeded)
	case wait <= 0:
		return nil
	}
	if err := clock.Sleep(ctx, wait); err != nil {
		l.unreserve(clock.Now(), n, act)
		return err
	}
	return nil
}

// reserve is ReserveAt, also returning the time the caller may act. When
// it fails, wait is the wait that was refused (never if unbounded).
func (l *Limiter) reserve(now time.Time, n int, maxWait time.Duration) (act time.Time, wait time.Duration, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n <= 0 || math.IsInf(l.rate, 1) {
		return now, 0, true
	}
	if n > l.burst {
		return time.Time{}, never, false
	}
	l.advance(now)
	left := l.tokens - float64(n)
	act = now // tokens in hand may be spent even by a late reading of the clock
	if left < 0 {
		if l.rate == 0 {
			return time.Time{}, never, false
		}
		d := durationOf(-left / l.rate)
		if d == never {
			return time.Time{}, never, false
		}
		act = l.last.Add(d) // the balance is as of l.last
	}
	wait = max(act.Sub(now), 0)
	if wait > maxWait {
		return time.Time{}, wait, false
	}
	l.tokens = left
	if act.After(l.lastEvent) {
		l.lastEvent = act
	}
	return act, wait, true
}

// unreserve gives back, at now, the tokens of a reservation of n that was
// to act at act, less those that reservations made after it are counting
// on (they were promised times as if these tokens were gone). This is the
// accounting of golang.org/x/time/rate's Reservation.CancelAt.
func (l *Limiter) unreserve(now time.Time, n int, act time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n <= 0 || math.IsInf(l.rate, 1) || l.rate == 0 || !act.After(now) {
		return
	}
	restore := float64(n) - tokensOf(l.lastEvent.Sub(act), l.rate)
	if restore <= 0 {
		return
	}
	l.advance(now)
	l.tokens = min(l.tokens+restore, float64(l.burst))
	if act.Equal(l.lastEvent) {
		if prev := act.Add(-durationOf(float64(n) / l.rate)); !prev.Before(now) {
			l.lastEvent = prev
		}
	}
}

// advance brings tokens up to date at now. l.mu must be held.
func (l *Limiter) advance(now time.Time) {
	if now.After(l.last) {
		l.tokens = l.refilled(now)
		l.last = now
	}
}

// refilled is the balance at now without updating it. l.mu must be held.
func (l *Limiter) refilled(now time.Time) float64 {
	if !now.After(l.last) {
		return l.tokens
	}
	return min(l.tokens+tokensOf(now.Sub(l.last), l.rate), float64(l.burst))
}

// tokensOf is the tokens refilled in d. Working in whole nanoseconds keeps
// common cases exact: 100ms at 10/s is 1 token, not 0.9999….
func tokensOf(d time.Duration, rate float64) float64 {
	return float64(d) * rate / 1e9
}

// durationOf rounds secs up to a whole nanosecond, so that acting after
// the wait never finds the bucket short; never if it does not fit.
func durationOf(secs float64) time.Duration {
	ns := math.Ceil(secs * 1e9)
	if !(ns < math.MaxInt64) {
		return never
	}
	return time.Duration(ns)
}
