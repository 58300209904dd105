package localtier

import (
	"context"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/rls"
)

// A sync call the upstream does not answer before the caller must be
// answered is answered locally (slow), but the call itself is left to run
// for up to lateTimeout: its answer, when it comes, says whether the
// upstream counted the hits. If it did not (it refused them, or never
// answered), the hits admitted locally are recorded, in the window they
// were admitted in; if it did, they are not recorded twice. Without this,
// every hit answered locally while the upstream was counting it anyway was
// counted twice, and the limit admitted less than it should under load.
const (
	lateTimeout = time.Second
	// maxLate bounds the calls awaited after their caller was answered
	// (a goroutine each, for lateTimeout at most); past it a late call is
	// given up at the caller's deadline, and its admitted hits recorded.
	maxLate = 4096
)

// syncCall is one sync call to the upstream, run on a goroutine of its
// own so that it can outlive its caller's deadline.
type syncCall struct {
	done chan struct{}
	resp *rlsv3.RateLimitResponse
	md   metadata.MD
	err  error
	stop context.CancelFunc
}

// startSync sends req as a sync call, bounded by lateTimeout.
func (t *Tier) startSync(req *rlsv3.RateLimitRequest) *syncCall {
	ctx, cancel := context.WithTimeout(context.Background(), lateTimeout)
	c := &syncCall{done: make(chan struct{}), stop: cancel}
	go func() {
		defer close(c.done)
		c.resp, c.md, c.err = t.call(ctx, req, rls.SidecarSync, lateTimeout)
	}()
	return c
}

// lateHit is what recording one item of a request answered locally needs,
// copied out of the request, which is gone by the time the late answer
// comes.
type lateHit struct {
	key  string
	n    uint64
	at   int64 // ns since base, when admitted
	hits hits
}

// snapshot copies the hits of b's items, admitted at now, for awaiting.
func (t *Tier) snapshot(b *limiter.Batch, now time.Time) []lateHit {
	at := now.Sub(t.base).Nanoseconds()
	out := make([]lateHit, 0, len(b.Items))
	for i, it := range b.Items {
		if it.Cost <= 0 {
			continue
		}
		out = append(out, lateHit{key: it.Key, n: uint64(it.Cost), at: at, hits: describe(b, i)})
	}
	return out
}

// describe is the pending record of b's item i: its domain, limit path,
// entries (as counted) and override.
func describe(b *limiter.Batch, i int) hits {
	req, d, it := b.Request, b.Descriptors[i], b.Items[i]
	h := hits{domain: req.Domain(), path: b.Paths[d], memory: 1000 * algorithm.Remembers(it.Params)}
	h.override, h.overridden = req.Override(d)
	h.entries = make([]config.Entry, req.Entries(d))
	for j := range h.entries {
		k, v := req.Entry(d, j)
		h.entries[j] = config.Entry{Key: k, Value: limiter.EntryValue(v)}
	}
	return h
}

// await waits, on a goroutine of its own, for the answer to c, a sync call
// whose request was answered locally, and records the hits the request
// admitted (admitted; nil when it refused) unless the upstream counted
// them. It reports false, having done nothing, when maxLate calls are
// awaited already: the caller then records the hits itself.
func (t *Tier) await(c *syncCall, admitted []lateHit) bool {
	select {
	case t.late <- struct{}{}:
	default:
		return false
	}
	t.lateWG.Add(1)
	go func() {
		defer func() { <-t.late; t.lateWG.Done() }()
		<-c.done
		c.stop()
		counted := c.err == nil && c.resp.GetOverallCode() == rlsv3.RateLimitResponse_OK
		if counted {
			t.m.lateCounted.Inc()
			return
		}
		for _, h := range admitted {
			t.pend(h.key, h.n, 0, 0, h.at, h.at, func() hits { return h.hits })
		}
	}()
	return true
}
