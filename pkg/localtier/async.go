package localtier

import (
	"context"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/pkg/rls"
)

// maxPerCall is the descriptors one flush call carries (the server's cap).
const maxPerCall = rls.MaxDescriptors

// record adds an admitted request's hits to the pending aggregate.
func (t *Tier) record(b *rls.Batch) {
	t.mu.Lock()
	full := false
	for i, it := range b.Items {
		if it.Cost <= 0 {
			continue
		}
		p := t.pending[it.Key]
		if p == nil {
			if len(t.pending) >= t.opts.MaxPending {
				t.m.dropped.Add(float64(it.Cost))
				continue
			}
			p = &pendingHits{domain: b.Domain, desc: b.Descriptors[i]}
			t.pending[it.Key] = p
		}
		p.hits += uint64(it.Cost)
	}
	n := len(t.pending)
	full = n >= t.opts.BatchSize
	t.mu.Unlock()
	t.m.pending.Set(float64(n))
	if full {
		select {
		case t.kick <- struct{}{}:
		default:
		}
	}
}

func (t *Tier) flusher() {
	defer close(t.done)
	tick := time.NewTicker(t.opts.FlushInterval)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			t.flush() // what was admitted before the stop
			return
		case <-tick.C:
		case <-t.kick:
		}
		t.flush()
	}
}

// flush sends the pending hits, one call per domain and 64 descriptors.
// Hits of a call that failed go back to pending, within MaxPending.
func (t *Tier) flush() {
	t.mu.Lock()
	if len(t.pending) == 0 {
		t.mu.Unlock()
		return
	}
	batch := t.pending
	t.pending = make(map[string]*pendingHits, len(batch))
	t.mu.Unlock()
	t.m.pending.Set(0)
	if !t.upstreamUsable() {
		t.requeue(batch)
		return
	}
	start := time.Now()
	type call struct {
		domain string
		keys   []string
		descs  []*ratelimitv3.RateLimitDescriptor
		hits   []uint64
	}
	calls := map[string]*call{}
	var order []*call
	for key, p := range batch {
		c := calls[p.domain]
		if c == nil || len(c.keys) == maxPerCall {
			c = &call{domain: p.domain}
			calls[p.domain] = c
			order = append(order, c)
		}
		c.keys = append(c.keys, key)
		c.descs = append(c.descs, p.desc)
		c.hits = append(c.hits, p.hits)
	}
	for _, c := range order {
		t.m.batch.Observe(float64(len(c.keys)))
		var md metadata.MD
		resp, err := t.call(context.Background(), request(c.domain, c.descs, c.hits), rls.SidecarRecord, &md)
		if err == nil && len(resp.GetStatuses()) != len(c.keys) {
			err = errStatuses
		}
		if err != nil {
			t.failed(err)
			sub := make(map[string]*pendingHits, len(c.keys))
			for i, k := range c.keys {
				sub[k] = &pendingHits{domain: c.domain, desc: c.descs[i], hits: c.hits[i]}
			}
			t.requeue(sub)
			continue
		}
		t.succeeded()
		t.flag(c.keys, resp, md)
	}
	t.m.flush.Observe(time.Since(start).Seconds())
}

var errStatuses = errorString("upstream answered a different number of statuses")

type errorString string

func (e errorString) Error() string { return string(e) }

// flag remembers the keys the upstream says are used up, for as long as
// it says.
func (t *Tier) flag(keys []string, resp *rlsv3.RateLimitResponse, md metadata.MD) {
	if t.opts.Cache == nil {
		return
	}
	retries := parseRetries(md)
	now := time.Now()
	for i, st := range resp.GetStatuses() {
		if st.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			continue
		}
		wait := st.GetDurationUntilReset().AsDuration()
		if i < len(retries) && retries[i] > 0 {
			wait = time.Duration(retries[i]) * time.Microsecond
		}
		t.opts.Cache.Add(keys[i], now.Add(wait))
	}
}

func (t *Tier) requeue(batch map[string]*pendingHits) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, p := range batch {
		if q := t.pending[k]; q != nil {
			q.hits += p.hits
			continue
		}
		if len(t.pending) >= t.opts.MaxPending {
			t.m.dropped.Add(float64(p.hits))
			continue
		}
		t.pending[k] = p
	}
	t.m.pending.Set(float64(len(t.pending)))
}
