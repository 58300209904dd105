package localtier

import (
	"context"
	"errors"

	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/rls"
)

// Concurrency limits (algorithm.Concurrency) through the tier: what a
// holder holds is known only where its units are, so a request that takes
// or gives back units of one is decided upstream alone, in either mode,
// with the rest of its limits; no local bucket, allowance or pending
// record stands in for it.

// holds reports whether b has an item of a concurrency limit.
func holds(b *limiter.Batch) bool {
	for i := range b.Items {
		if b.Items[i].Params.Kind == algorithm.Concurrency {
			return true
		}
	}
	return false
}

// central decides b by the upstream's answer to a call of its own. No
// local answer can stand in for it, so it waits as long as the caller's
// deadline allows, up to a record call's bound (a busy upstream answers
// within it): a flood on a saturated machine is when a concurrency limit
// matters. A request of refunds alone waits so even after its caller left
// (Envoy's stream-end call does not wait for its answer): a refund lost
// holds its unit for a whole TTL. When there is no answer (the upstream
// away, or slower than that) it fails open, as every limiter here does:
// the request is admitted, marked degraded, and holds no unit; a refund
// is lost, and its unit comes back at its TTL.
func (t *Tier) central(ctx context.Context, b *limiter.Batch) error {
	probe, ok := t.br.Allow()
	if !ok {
		t.failOpen(b)
		return nil
	}
	if b.Refunds() == len(b.Items) {
		ctx = context.WithoutCancel(ctx)
	}
	resp, md, err := t.call(ctx, request(b), rls.SidecarSync, limiter.WithinDeadline(ctx, max(t.opts.Timeout, recordTimeout)))
	switch {
	case err == nil:
		t.br.Success(probe)
		apply(b, resp, md)
		b.Source = limiter.SourceGlobal
		return nil
	case ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded):
		t.br.Release(probe)
		return ctx.Err() // the caller went away: nothing to answer
	case refused(err):
		// The upstream answered, refusing this call (an older server
		// without refunds, say): it is not away.
		t.br.Success(probe)
		t.heldLog.Do(func() { t.opts.Logger.Warn("upstream refused a concurrency limit's call", "error", err.Error()) })
	case t.answering(err):
		t.br.Release(probe) // slow, not gone
	default:
		t.br.Failure(probe, err)
	}
	t.failOpen(b)
	return nil
}

// failOpen admits b without a decision: every item allowed, a refund's
// status as any refund's.
func (t *Tier) failOpen(b *limiter.Batch) {
	b.Degraded, b.Source = true, limiter.SourceFallback
	for i := range b.Items {
		b.Results[i] = algorithm.Result{Allowed: true}
	}
}
