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

// central decides b by the upstream's answer to a call of its own. When
// there is none (the upstream away, slow or failing) it fails open, as
// every limiter here does: the request is admitted, marked degraded, and
// nothing is recorded for it, so while the upstream does not answer the
// count misses the requests admitted so. Its holder's refund, when it
// comes, frees what the upstream took of it, or nothing; a refund the
// upstream does not answer is lost, and its unit comes back at its TTL.
func (t *Tier) central(ctx context.Context, b *limiter.Batch) error {
	probe, ok := t.br.Allow()
	if !ok {
		t.failOpen(b)
		return nil
	}
	resp, md, err := t.call(ctx, request(b), rls.SidecarSync, t.callTimeout(ctx, rls.SidecarSync))
	switch {
	case err == nil:
		t.br.Success(probe)
		apply(b, resp, md)
		b.Source = limiter.SourceGlobal
		return nil
	case ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded):
		t.br.Release(probe)
		return ctx.Err() // the caller went away: nothing to answer
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
