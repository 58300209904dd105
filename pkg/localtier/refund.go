package localtier

import (
	"context"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/rls"
)

// Refunds (Envoy's is_negative_hits) through the tier: a request of
// refunds alone gives the local buckets their units back at once, and the
// refunds go upstream with the next flush, after the hits.

// giveBack applies a request of refunds: the local buckets get the units
// back (within their capacity) and the refunds go upstream with the next
// flush, in either mode, as descriptors that refund them (within the
// pending bounds: a refund that finds no room is dropped and counted). A
// refund is never refused; its status is the local bucket's after it.
func (t *Tier) giveBack(b *limiter.Batch, now time.Time) {
	defer t.refunds.Add(1) // after pending them: see flush
	at := now.Sub(t.base).Nanoseconds()
	b.Source = limiter.SourceLocalBucket
	for i, it := range b.Items {
		lim := localLimit(it.Params, t.opts.Fraction)
		t.local.ReturnN(it.Key, lim, now, float64(it.Cost))
		t.allow.unbind(it.Key)
		b.Results[i] = result(t.local.AllowN(it.Key, lim, now, 0), lim, it.Params, t.opts.Fraction)
		b.Results[i].Allowed, b.Results[i].RetryAfter = true, 0
		if it.Cost > 0 {
			t.pend(it.Key, 0, 0, uint64(it.Cost), at, at, func() hits { return describe(b, i) })
		}
	}
}

// sendRefunds sends the refunds of c's keys upstream (Envoy's
// is_negative_hits) in a record call of their own, after their hits (a
// refund gives back what is recorded, so hits still pending must land
// first), so that a server that applies no refunds (older than them)
// refuses them alone: then they are dropped and counted, never retried.
// On another failure they are pending again, without the hits, which
// were recorded.
func (t *Tier) sendRefunds(c []entry) {
	var descs []*ratelimitv3.RateLimitDescriptor
	var paths []string
	var lost uint64
	for i := range c {
		if c[i].refund > 0 {
			descs = append(descs, descriptorOf(&c[i], c[i].refund, true))
			paths = append(paths, c[i].path)
			lost += c[i].refund
		}
	}
	if len(descs) == 0 {
		return
	}
	md := []string{rls.SidecarKey, rls.SidecarRecord, rls.SidecarIDKey, t.id}
	for _, p := range paths {
		md = append(md, rls.LimitPathKey, p)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), md...)
	_, _, err := t.call(ctx, &rlsv3.RateLimitRequest{Domain: c[0].domain, Descriptors: descs}, rls.SidecarRecord, t.callTimeout(ctx, rls.SidecarRecord))
	switch {
	case status.Code(err) == codes.InvalidArgument:
		t.m.dropped.Add(float64(lost))
		t.refundLog.Do(func() {
			t.opts.Logger.Error("the upstream applies no refunds (is_negative_hits): upgrade the servers; the refunds are dropped", "units", lost, "error", err.Error())
		})
	case err != nil:
		for i := range c {
			if e := c[i]; e.refund > 0 {
				t.pend(e.key, 0, 0, e.refund, e.first, e.last, func() hits { return e.hits })
			}
		}
	}
}
