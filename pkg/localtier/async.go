package localtier

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/rls"
	"github.com/sluicehq/sluice/pkg/share"
)

const (
	// maxPerCall is the descriptors one flush call carries: the server's cap.
	maxPerCall = limiter.MaxDescriptors
	// flushParallel is how many calls of one flush are in flight at once:
	// enough to hide a round trip per call, few enough not to crowd out the
	// requests the upstream serves.
	flushParallel = 4
)

// Asked counts the demand of a request the flag cache in front answered
// (limiter.Asker): refused, but asked for.
func (t *Tier) Asked(b *limiter.Batch) { t.record(b, t.opts.Now(), false) }

// record adds a request's hits, if it was admitted, and its demand to the
// pending aggregate (async mode, and either mode while the upstream is
// away) and wakes the flusher once BatchSize keys are pending.
func (t *Tier) record(b *limiter.Batch, now time.Time, admitted bool) {
	at := now.Sub(t.base).Nanoseconds()
	for i, it := range b.Items {
		if it.Cost <= 0 {
			continue
		}
		n := uint64(0)
		if admitted {
			n = uint64(it.Cost)
		}
		t.pend(it.Key, n, uint64(it.Cost), 0, at, at, func() hits { return describe(b, i) })
	}
}

// pend adds n hits, of asked units, and refund units given back to key's
// pending ones; describe builds a new key's.
func (t *Tier) pend(key string, n, asked, refund uint64, first, last int64, describe func() hits) {
	keys, ok := t.pending.add(key, n, asked, refund, first, last, describe)
	if !ok {
		t.m.dropped.Add(float64(n + refund))
		return
	}
	if keys-t.pending.kept.Load() >= int64(t.opts.BatchSize) { // beyond those kept under holds
		select {
		case t.kick <- struct{}{}:
		default:
		}
	}
}

func (t *Tier) flusher() {
	defer close(t.done)
	// The flushes fall on the wall clock's multiples of the interval, the
	// same instants on every sidecar of a fleet (their clocks as close as
	// NTP keeps them), so that their records reach the servers together
	// and a server's record linger (-redis-record-linger) puts them in one
	// Redis call with a short wait. Each is timed to its own multiple: a
	// ticker keeps the phase of its first tick, and a sidecar woken a few
	// milliseconds late for it at its start flushed that late all its
	// life, past the linger (three async sidecars at 1.5x the limit: 0.059
	// to 0.064 Redis round trips a request in a few runs, 0.034 otherwise).
	next := nextTick(time.Now(), t.opts.FlushInterval)
	tick := time.NewTimer(time.Until(next))
	defer tick.Stop()
	// Once a second, the local buckets that are full again go: they are
	// what a new key would be, and a flood's keys should not keep memory.
	sweep := time.NewTicker(time.Second)
	defer sweep.Stop()
	var buf []entry
	for {
		select {
		case now := <-sweep.C:
			t.local.Sweep(now)
			continue
		case <-t.stop:
			// What was admitted before the stop; hits the upstream does not
			// take now are lost with the process, and counted.
			buf = t.flush(buf[:0], true)
			for _, e := range t.pending.drain(buf[:0], 0, true) {
				t.m.dropped.Add(float64(e.n))
			}
			return
		case <-tick.C:
			t.m.lag.Observe(time.Since(next).Seconds())
			// The tick the flush belongs to, however late it runs.
			t.tick.Store(next.UnixNano() / int64(t.opts.FlushInterval))
			next = nextTick(time.Now(), t.opts.FlushInterval)
			tick.Reset(time.Until(next))
		case <-t.kick:
			t.tick.Store(time.Now().UnixNano() / int64(t.opts.FlushInterval))
		}
		buf = t.flush(buf[:0], false)
	}
}

// flush sends the pending hits, at most maxPerCall keys of one domain per
// call, flushParallel calls at a time, and flags the keys the answers say
// are used up. While the upstream is unavailable it leaves them pending
// until RetryInterval has passed; the hits of a call that fails go back to
// pending. Unless all, it leaves the hits of loose keys within their holds
// pending (pending.drain). It returns buf for reuse.
func (t *Tier) flush(buf []entry, all bool) []entry {
	start := time.Now()
	iv := t.cycleOf(start)
	// A flush is one call to the breaker, however many upstream calls it
	// makes: the probe, when the breaker is half-open.
	probe, ok := t.br.Allow()
	if !ok {
		return buf
	}
	t.allow.prune(time.Since(t.base).Nanoseconds())
	// The refunds applied so far, read before the drain: an answer flags no
	// key if one was applied since (giveBack counts it after pending it, so
	// a refund this drain misses is counted after this read).
	refunds := t.refunds.Load()
	buf = t.pending.drain(buf, t.opts.Now().Sub(t.base).Nanoseconds(), all)
	for i := range buf {
		buf[i].spent, buf[i].held = t.allow.spentOf(buf[i].key)
	}
	if len(buf) == 0 {
		if probe {
			t.probe()
		}
		return buf
	}
	var (
		wg      sync.WaitGroup
		slots   = make(chan struct{}, flushParallel)
		failed  atomic.Bool
		failure atomic.Value // the first failed call's error
	)
	for _, c := range calls(buf) {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			if failed.Load() {
				t.requeue(c) // the upstream just failed: don't wait on it again
				return
			}
			switch err := t.send(c, iv, refunds); {
			case refused(err):
				// The upstream answered and refuses these hits (another
				// config or version, a message it will not take): sending
				// them again would change nothing, and it is not away.
				t.opts.Logger.Warn("upstream refused recorded hits", "error", err.Error(), "keys", len(c))
				for _, e := range c {
					t.m.dropped.Add(float64(e.n))
				}
			case err != nil:
				if failed.CompareAndSwap(false, true) {
					failure.Store(err)
				}
				t.requeue(c)
			}
		}()
	}
	wg.Wait()
	t.took = time.Since(start)
	t.m.flush.Observe(t.took.Seconds())
	t.lastFlush.set(start, time.Since(start), len(buf), failed.Load())
	switch {
	case !failed.Load():
		t.br.Success(probe)
	case t.answering(failure.Load().(error)):
		// Timed out while the upstream answers other calls: slow, not
		// gone. The hits are pending again for the next flush.
		t.br.Release(probe)
	default:
		t.br.Failure(probe, failure.Load().(error))
	}
	return buf
}

// refused reports whether err is the upstream's answer refusing one call
// (a bad or oversized request, a feature it lacks), as opposed to the
// upstream being unreachable, slow, failing or refusing this sidecar.
func refused(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.ResourceExhausted, codes.OutOfRange, codes.FailedPrecondition, codes.Unimplemented:
		return true
	}
	return false
}

// maxCallBytes bounds the pending bytes (pendingSize) one flush call
// carries, far under gRPC's default 4 MiB message limit.
const maxCallBytes = 1 << 20

// cycleOf notes a flush beginning at start and returns the reporting
// interval its reports state (pkg/share): how long the sidecar may decide
// on one answer before the next comes. That is the flush interval, or the
// cycle the flushes have run at of late when longer (a flusher short of
// CPU), plus the last flush's round trip, within pkg/share's bounds. The
// servers judge a key tight over it (share.Tightness) and count another
// sidecar's allowance as unspent for it: on a saturated machine a 10 ms
// interval became a 25 ms cycle and an 18 ms round trip. The cycle is the
// longest flush-to-flush period, decaying by a quarter of the difference
// each flush.
func (t *Tier) cycleOf(start time.Time) time.Duration {
	if !t.flushedAt.IsZero() {
		period := start.Sub(t.flushedAt)
		t.cycle = max(period, t.cycle-(t.cycle-period)/4)
	}
	t.flushedAt = start
	return min(max(t.opts.FlushInterval, t.cycle)+t.took, share.MaxInterval)
}

// send records one call's hits upstream, stating iv as its reporting
// interval (cycleOf), and flags the keys it says are used up until it
// says they admit again.
func (t *Tier) send(c []entry, iv time.Duration, refunds int64) error {
	if err := t.sendHits(c, iv, refunds); err != nil {
		return err
	}
	t.sendRefunds(c)
	return nil
}

// sendHits is send's call of the hits and demand.
func (t *Tier) sendHits(c []entry, iv time.Duration, refunds int64) error {
	var refunded map[string]bool // keys whose refunds follow: their answers flag nothing
	for i := range c {
		if c[i].refund > 0 {
			if refunded == nil {
				refunded = make(map[string]bool)
			}
			refunded[c[i].key] = true
		}
	}
	ld := newRecordLists(len(c))
	now := t.opts.Now()
	at, interval := now.Sub(t.base).Nanoseconds(), t.opts.FlushInterval.Nanoseconds()
	for _, e := range c {
		n := t.worth(e.hits, now)
		if n < e.n {
			t.m.expired.Add(float64(e.n - n))
		}
		if n > limiter.MaxCost { // past what one descriptor may carry
			t.m.dropped.Add(float64(n - limiter.MaxCost))
			n = limiter.MaxCost
		}
		// Sent with hits to record, or demand to report.
		if n > 0 || e.asked > 0 {
			// Since its last report: at least since its oldest pending
			// hit (kept under a hold, or sent again after a failure).
			gap := max(t.allow.since(e.key, at, interval), at-e.first)
			rate := float64(e.asked) / (float64(gap) / 1e9)
			// The newest hit's age: placed in its window by the store
			// (algorithm.Record); the older ones of the batch with it.
			ld.add(descriptorOf(&e, n, false), e.path, e.key, e.spent, gap, min(rate, share.MaxRate), max(0, at-e.last)/1000, e.held,
				e.asked-min(e.asked, e.n)) // what backs the demand with the hits (share.Report.Asked)
		}
	}
	descs, paths, keys, spent, gaps := ld.descs, ld.paths, ld.keys, ld.spent, ld.gaps
	rates, ages, held, denied := ld.rates, ld.ages, ld.held, ld.denied
	if len(descs) == 0 {
		return nil
	}
	t.m.batch.Observe(float64(len(c)))
	md := make([]string, 0, 16+2*len(paths))
	if t.opts.LooseHold > 0 {
		md = append(md, rls.LooseHoldKey, strconv.FormatInt(t.opts.LooseHold.Microseconds(), 10))
	}
	md = append(md, rls.SidecarKey, rls.SidecarRecord, rls.SidecarIDKey, t.id,
		rls.IntervalKey, strconv.FormatInt(iv.Microseconds(), 10), rls.DemandKey, string(rates), rls.AgeKey, string(ages), rls.HeldKey, string(held),
		rls.DeniedKey, string(denied))
	for _, p := range paths {
		md = append(md, rls.LimitPathKey, p)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), md...)
	resp, rmd, err := t.call(ctx, &rlsv3.RateLimitRequest{Domain: c[0].domain, Descriptors: descs}, rls.SidecarRecord, t.callTimeout(ctx, rls.SidecarRecord))
	if err != nil {
		return err
	}
	t.accepted(c, resp, rmd)
	retries, allowed, holds := parseRetries(rmd), parseAllowances(rmd, len(keys)), parseHolds(rmd, len(keys))
	now = t.opts.Now()
	at = now.Sub(t.base).Nanoseconds()
	for i, st := range resp.GetStatuses() {
		// An allowance governs its key: no flag, the allowance refuses.
		units := -1.0
		if allowed != nil {
			units = allowed[i]
		}
		// Good for three of the intervals at which the key is reported
		// (it is reported when asked for), a second at most: a key asked
		// for every 20 ms is not refused at every other request.
		t.allow.set(keys[i], units, spent[i], at, min(allowanceLapse*gaps[i], int64(allowanceKept)))
		t.setHold(keys[i], units, holds, i)
		if units >= 0 {
			t.m.allowances.Inc()
		}
		if units >= 1 && t.opts.Cache != nil {
			// Units: the retry time of a refusal on the spent allowance,
			// which flagged the key for a flush interval (refuse).
			t.opts.Cache.Remove(keys[i])
		}
		if units >= 0 || t.opts.Cache == nil || st.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT || t.refunds.Load() != refunds || refunded[keys[i]] {
			continue // (a refund since the call, or after it, may make it stale)
		}
		wait := retryAfter(retries, i, st.GetDurationUntilReset().AsDuration().Microseconds())
		t.opts.Cache.Add(keys[i], now.Add(time.Duration(wait)*time.Microsecond))
	}
	return nil
}

// accepted learns from a record call's answer whether the upstream took
// the call's hits as a sidecar's. One that does not know this sidecar
// (RefusedKey) decides them as an ordinary request: all taken if they fit,
// else none, and those are lost. Either way the sidecar says so: a metric,
// a log line, and not ready until a record call is accepted again.
func (t *Tier) accepted(c []entry, resp *rlsv3.RateLimitResponse, md metadata.MD) {
	v := md.Get(rls.RefusedKey)
	if len(v) == 0 {
		t.refused.Store(nil)
		return
	}
	reason := v[0]
	if len(reason) > maxReason {
		reason = reason[:maxReason]
	}
	t.m.refusals.WithLabelValues(reason).Inc()
	lost := uint64(0)
	if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
		for _, e := range c {
			lost += e.n
		}
		t.m.dropped.Add(float64(lost))
	}
	t.refused.Store(&reason)
	t.refusedLog.Do(func() {
		t.opts.Logger.Error("the upstream does not know this sidecar: its recorded hits were decided as an ordinary request; give the sidecar the credentials the servers expect (-upstream-token-file, or a client certificate they list in -record-clients)",
			"reason", reason, "hits_lost", lost, "keys", len(c))
	})
}

// maxReason bounds the refusal reason an upstream's answer can put into a
// metric label.
const maxReason = 32

// Refused says why the upstream last refused this sidecar's recorded
// hits, or "" when its last record call was accepted (or none was made).
func (t *Tier) Refused() string {
	if r := t.refused.Load(); r != nil {
		return *r
	}
	return ""
}

// probe is the breaker's probe of an upstream that failed, when no hits
// are waiting to be it: a request with no descriptors, which the upstream
// answers without a store call.
func (t *Tier) probe() {
	if _, _, err := t.call(context.Background(), &rlsv3.RateLimitRequest{Domain: probeDomain}, rls.SidecarSync, t.opts.Timeout); err != nil {
		t.br.Failure(true, err)
		return
	}
	t.br.Success(true)
}

// probeDomain is the domain of probe requests: any name does, none is
// limited.
const probeDomain = "sluice-probe"

// requeue puts a failed call's hits back, within MaxPending.
func (t *Tier) requeue(c []entry) {
	for _, e := range c {
		t.pend(e.key, e.n, e.asked, e.refund, e.first, e.last, func() hits { return e.hits })
	}
}
