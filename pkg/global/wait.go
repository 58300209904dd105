package global

import (
	"context"
	"errors"
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

// run queues c on q for a writer and waits for its answer, or for the
// deadline, or with no deadline (zero) for ctx. On nil, c holds its answer
// (c.reply, c.err), which the caller reads before putting c back in the
// pool; on an error (the deadline past, ctx done, the store closed) c is
// no longer the caller's: an abandoned call still belongs to its writer
// (which skips it if it has not sent it yet), and a call its deadline
// expired is left to the collector.
//
// With a deadline, the wait is one receive: the deadline's timer answers
// the call itself (expire), so the requester waits on c.done alone, not
// in a select over the call, ctx and a timer (a select whose channel locks
// were 6 % of a server's CPU on Redis at 64 callers; without it the server
// takes 2 % less CPU a request). A ctx cancelled before the deadline (Envoy
// reset the stream) is noticed at the answer, or at the deadline, which
// then ends the call with ctx's error: both are near, since the deadline
// is within the request's own and the store's timeout
// (limiter.WithinDeadline).
func (r *Redis) run(ctx context.Context, c *call, q chan *call, deadline time.Time) error {
	if deadline.IsZero() {
		return r.runUntil(ctx, c, q)
	}
	if err := ctx.Err(); err != nil {
		r.calls.Put(c)
		return err
	}
	gen := c.gen
	t := time.AfterFunc(time.Until(deadline), func() { c.expire(gen) })
	if err := r.enqueue(ctx, c, q, c.done); err != nil {
		if t.Stop() {
			r.calls.Put(c) // never queued, and no stale expiry can land on it
		}
		if err == errExpired {
			err = context.DeadlineExceeded
		}
		return err // never queued: ctx.Err() already has the caller's reason
	}
	<-c.done
	t.Stop() // a late expire finds c answered, at this generation or none
	if c.err == errExpired {
		if err := ctx.Err(); err != nil {
			return err // the caller left before: its reason, as runUntil says it
		}
		return context.DeadlineExceeded
	}
	return nil
}

// runUntil is run without a deadline: the wait ends with the answer or ctx.
func (r *Redis) runUntil(ctx context.Context, c *call, q chan *call) error {
	if err := r.enqueue(ctx, c, q, nil); err != nil {
		r.calls.Put(c)
		return err
	}
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		c.abandoned.Store(true)
		return ctx.Err()
	}
}

// errExpired answers a call whose deadline passed first (call.expire).
var errExpired = errors.New("redis store: the call's deadline passed")

// enqueue puts c on q for a writer, unless the store is closed, ctx is
// done, or expired (c.done, with run's deadline) answers first while q is
// full. On an error c was not queued.
func (r *Redis) enqueue(ctx context.Context, c *call, q chan *call, expired <-chan struct{}) error {
	// The queue has room for every writer's full batch: the send all but
	// always goes at once, without a four-way select (the channel locks
	// of every case, taken and released twice). A closed store queues
	// nothing: its writers are gone.
	select {
	case <-r.stop:
		return errClosed
	default:
	}
	select {
	case q <- c:
	default:
		select {
		case q <- c:
		case <-ctx.Done():
			return ctx.Err()
		case <-expired:
			return errExpired
		case <-r.stop:
			return errClosed
		}
	}
	if q == r.queue && r.batchQueued() {
		r.gate.wake() // for a writer held at the gate: a batch is ready
	}
	return nil
}
