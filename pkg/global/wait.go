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
	return r.DecideAt(bounded{ctx, time.Now().Add(wait)}, items, out, 0)
}

// bounded is ctx with a deadline that no timer enforces: run, the one
// place a request waits, waits for it itself (DecideWithin). Done is the
// parent's.
type bounded struct {
	context.Context
	deadline time.Time
}

func (b bounded) Deadline() (time.Time, bool) {
	if d, ok := b.Context.Deadline(); ok && d.Before(b.deadline) {
		return d, true
	}
	return b.deadline, true
}

func (b bounded) Err() error {
	if err := b.Context.Err(); err != nil {
		return err
	}
	if !time.Now().Before(b.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// run queues c on q for a writer and waits for its answer or ctx. On nil, c
// holds its answer (c.reply, c.err), which the caller reads before putting
// c back in the pool; on an error (ctx done, the store closed) c is no
// longer the caller's: an abandoned call still belongs to its writer
// (which skips it if it has not sent it yet).
func (r *Redis) run(ctx context.Context, c *call, q chan *call) error {
	var expired <-chan time.Time
	if b, ok := ctx.(bounded); ok {
		t := r.timers.Get().(*time.Timer)
		t.Reset(time.Until(b.deadline))
		defer func() {
			t.Stop() // no stale tick after Stop (Go 1.23 timers)
			r.timers.Put(t)
		}()
		expired = t.C
	}
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
