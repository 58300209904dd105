package localtier

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/rls"
	"github.com/sluicehq/sluice/pkg/share"
)

// recordTimeout is the least a record call (an async flush) may wait.
const recordTimeout = time.Second

// call asks the upstream, marking the call with the sidecar metadata kind,
// and returns the answer and its response metadata. The call is bounded by
// Timeout and, if ctx has a deadline (Envoy's filter timeout), ends a
// little before it, so that a silent upstream still leaves time to answer
// locally.
func (t *Tier) call(ctx context.Context, req *rlsv3.RateLimitRequest, kind string, timeout time.Duration) (*rlsv3.RateLimitResponse, metadata.MD, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if kind != rls.SidecarRecord { // a record call's metadata is send's
		ctx = metadata.AppendToOutgoingContext(ctx, rls.SidecarKey, kind)
	} else {
		ctx = WithFlush(ctx, t.tick.Load())
	}
	var md metadata.MD
	resp, err := t.opts.Upstream.ShouldRateLimit(ctx, req, grpc.Header(&md))
	if err == nil && len(resp.GetStatuses()) != len(req.GetDescriptors()) {
		err = fmt.Errorf("upstream answered %d statuses for %d descriptors", len(resp.GetStatuses()), len(req.GetDescriptors()))
	}
	result := "ok"
	if err != nil {
		result = "error"
	} else {
		t.lastAnswer.Store(t.opts.Now().Sub(t.base).Nanoseconds())
	}
	t.m.upstreamCalls.WithLabelValues(kind, result).Inc()
	return resp, md, err
}

// callTimeout bounds a call of kind: Timeout and, if ctx has a deadline
// (Envoy's filter timeout), a little before it, so that a silent upstream
// still leaves time to answer locally.
func (t *Tier) callTimeout(ctx context.Context, kind string) time.Duration {
	timeout := t.opts.Timeout
	if kind == rls.SidecarRecord {
		// Nobody waits on a record call, and one that times out is sent
		// again although the upstream may have counted it: the wait is
		// long enough for a busy upstream, which answers within its own
		// bound (its store's -store-max-wait, 1 s by default).
		timeout = max(timeout, recordTimeout)
	}
	return limiter.WithinDeadline(ctx, timeout)
}

// request builds an upstream request: each descriptor with its cost as an
// explicit hits_addend (a refund's marked is_negative_hits), its entries
// and any limit override shared with the caller's descriptor (read only).
func request(b *limiter.Batch) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: b.Request.Domain(), Descriptors: make([]*ratelimitv3.RateLimitDescriptor, len(b.Items))}
	for i, it := range b.Items {
		d := rls.Descriptor(b.Request, b.Descriptors[i])
		req.Descriptors[i] = &ratelimitv3.RateLimitDescriptor{Entries: d.GetEntries(), Limit: d.GetLimit(), HitsAddend: wrapperspb.UInt64(uint64(it.Cost)),
			IsNegativeHits: it.Mode == algorithm.GiveBack}
	}
	return req
}

// apply fills b.Results from the upstream's answer to b's sync call.
func apply(b *limiter.Batch, resp *rlsv3.RateLimitResponse, md metadata.MD) {
	retries := parseRetries(md)
	for i, st := range resp.GetStatuses() {
		r := algorithm.Result{
			Allowed:    st.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT,
			Remaining:  int64(st.GetLimitRemaining()),
			ResetAfter: st.GetDurationUntilReset().AsDuration().Microseconds(),
		}
		if !r.Allowed {
			r.RetryAfter = retryAfter(retries, i, r.ResetAfter)
		}
		b.Results[i] = r
	}
}

// retryAfter is descriptor i's retry time in µs from the upstream's
// rls.RetryAfterKey list, or def when the list does not say.
func retryAfter(retries []int64, i int, def int64) int64 {
	if i < len(retries) && retries[i] > 0 {
		return retries[i]
	}
	return def
}

// parseRetries reads the per-descriptor retry times (µs) the upstream sends
// a sidecar; an entry that does not parse reads as 0 (not said).
func parseRetries(md metadata.MD) []int64 {
	v := md.Get(rls.RetryAfterKey)
	if len(v) == 0 {
		return nil
	}
	parts := strings.Split(v[0], ",")
	out := make([]int64, len(parts))
	for i, p := range parts {
		out[i], _ = strconv.ParseInt(p, 10, 64)
	}
	return out
}

// parseAllowances reads the per-descriptor allowances (rls.AllowanceKey)
// the upstream answered n recorded keys with: nil when it sent none or not
// one per key (an upstream without allowances); an entry that does not
// parse, or is negative, reads as -1: none.
func parseAllowances(md metadata.MD, n int) []float64 { return parseUnits(md, rls.AllowanceKey, n, -1) }

// parseHolds reads the per-descriptor holds (rls.HoldKey) as
// parseAllowances reads allowances; none reads as 0.
func parseHolds(md metadata.MD, n int) []float64 { return parseUnits(md, rls.HoldKey, n, 0) }

// parseUnits reads key's per-descriptor units for n keys: nil unless one
// list of n; an entry that does not parse or is negative reads as none;
// share.MaxRate at most.
func parseUnits(md metadata.MD, key string, n int, none float64) []float64 {
	v := md.Get(key)
	if len(v) != 1 || strings.Count(v[0], ",") != n-1 {
		return nil
	}
	out := make([]float64, 0, n)
	for p := range strings.SplitSeq(v[0], ",") {
		a, err := strconv.ParseFloat(p, 64)
		if err != nil || !(a >= 0) {
			a = none
		}
		out = append(out, min(a, share.MaxRate))
	}
	return out
}

// flushKey marks the context of a flush's record call (FlushTick).
type flushKey struct{}

// FlushTick reports whether ctx is a flush's record call's, and the wall
// clock's tick (a count of FlushIntervals since the epoch) the flush
// belongs to, however late it runs: the flushes fall on the same ticks on
// every sidecar, so an Upstream that reaches several servers may send a
// tick's records to the server the tick names, and a fleet's records of
// one tick reach one server together.
func FlushTick(ctx context.Context) (tick int64, ok bool) {
	tick, ok = ctx.Value(flushKey{}).(int64)
	return tick, ok
}

// nextTick is the first multiple of iv since the Unix epoch after now:
// the instant the tick numbers (FlushTick) count. (time.Time.Truncate
// counts from year 1, an offset from the epoch's multiples for intervals
// that do not divide 62,135,596,800 s: 4 ms at 7 ms.)
func nextTick(now time.Time, iv time.Duration) time.Time {
	return time.Unix(0, (now.UnixNano()/int64(iv)+1)*int64(iv))
}

// WithFlush marks ctx as the context of a record call of tick's flush
// (FlushTick).
func WithFlush(ctx context.Context, tick int64) context.Context {
	return context.WithValue(ctx, flushKey{}, tick)
}
