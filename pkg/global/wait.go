package global

import (
	"context"
	"time"
)

// DecideWithin decides items as Decide does, waiting for Redis at most
// wait: past it the call is abandoned and the error is
// context.DeadlineExceeded. It bounds the wait with a pooled timer where
// context.WithTimeout would make a timer and a child context a request
// (4.5 % of a server's CPU on Redis at 64 callers).
func (r *Redis) DecideWithin(ctx context.Context, wait time.Duration, items []Item, out []Result) error {
	return r.decideBy(ctx, items, out, 0, time.Now().Add(wait))
}

// run queues c on q for a writer and waits for its answer, ctx, or the
// deadline unless it is zero (DecideWithin). On nil, c holds its answer
// (c.reply, c.err), which the caller reads before putting c back in the
// pool; on an error (ctx done, the deadline past, the store closed) c is
// no longer the caller's: an abandoned call still belongs to its writer
// (which skips it if it has not sent it yet).
func (r *Redis) run(ctx context.Context, c *call, q chan *call, deadline time.Time) error {
	var expired <-chan time.Time
	if !deadline.IsZero() {
		t := r.timers.Get().(*time.Timer)
		t.Reset(time.Until(deadline))
		defer func() {
			t.Stop() // no stale tick after Stop (Go 1.23 timers)
			r.timers.Put(t)
		}()
		expired = t.C
	}
	// The queue has room for every writer's full batch: the send all but
	// always goes at once, without a four-way select (the channel locks
	// of every case, taken and released twice). A closed store queues
	// nothing: its writers are gone.
	select {
	case <-r.stop:
		r.calls.Put(c)
		return errClosed
	default:
	}
	select {
	case q <- c:
	default:
		select {
		case q <- c:
		case <-ctx.Done():
			r.calls.Put(c)
			return ctx.Err()
		case <-expired:
			r.calls.Put(c)
			return context.DeadlineExceeded
		case <-r.stop:
			r.calls.Put(c)
			return errClosed
		}
	}
	if q == r.queue && r.batchQueued() {
		r.gate.wake() // for a writer held at the gate: a batch is ready
	}
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		c.abandoned.Store(true)
		return ctx.Err()
	case <-expired:
		c.abandoned.Store(true)
		return context.DeadlineExceeded
	}
}
