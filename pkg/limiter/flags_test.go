package limiter

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/pkg/cache"
	"github.com/sluicehq/sluice/pkg/config"
)

func newFlags(t *testing.T) *cache.OverLimit {
	c, err := cache.New(1000)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestFlagCache: once the store says a key is over limit, a flood on it
// costs no store calls until the retry time, to the µs, and is admitted
// again then; hits a sidecar records are never answered from the flags.
func TestFlagCache(t *testing.T) {
	h := start(t, Options{Cache: newFlags(t)})
	r := edge(desc("api_key", "flood"), desc("remote_address", "flood"))
	for range 3 {
		h.decide(t, r)
	}
	if a := h.decide(t, r); verdict(a) != "OVER_LIMIT:OK,OVER_LIMIT" {
		t.Fatalf("fourth request: %s", verdict(a))
	}
	before := h.store.calls.Load()
	for range 1000 {
		if a := h.decide(t, r); verdict(a) != "OVER_LIMIT:OK,OVER_LIMIT" || headerMap(a)[HeaderRetryAfter] != "45" {
			t.Fatalf("flood: %s %v", verdict(a), a.Headers)
		}
	}
	if n := h.store.calls.Load() - before; n != 0 {
		t.Fatalf("a flood of 1000 over-limit requests made %d store calls; want 0", n)
	}
	for _, c := range []struct {
		source Source
		result string
		want   float64
	}{{SourceStore, "ok", 3}, {SourceStore, "over_limit", 1}, {SourceFlagCache, "over_limit", 1000}} {
		if got := h.decided(c.source, c.result); got != c.want {
			t.Errorf("sluice_tier_decisions_total{tier=%q,result=%q} = %v; want %v", c.source, c.result, got, c.want)
		}
	}
	if got := testutil.ToFloat64(h.metrics.cacheHits); got != 1000 {
		t.Errorf("sluice_flag_cache_hits_total = %v; want 1000", got)
	}
	// A sidecar's recorded hits go to the store, flag or none.
	if _, err := h.svc.Decide(context.Background(), r, DecideOptions{Record: true}); err != nil || h.store.calls.Load() != before+1 {
		t.Fatalf("recorded hits on a flagged key: %v, %d store calls; want the store asked", err, h.store.calls.Load()-before)
	}
	// 1 µs before the retry time the flags still answer; at it, the store
	// decides again and admits.
	h.store.now.Add(45*second - 1)
	if a := h.decide(t, r); a.Overall != OverLimit || h.store.calls.Load() != before+1 {
		t.Fatalf("just before the retry time: %s, %d store calls", verdict(a), h.store.calls.Load()-before)
	}
	h.store.now.Add(1)
	if a := h.decide(t, r); verdict(a) != "OK:OK,OK" {
		t.Fatalf("at the retry time: %s; want admitted", verdict(a))
	}
}

// TestReloadPurgesFlags: flags repeat answers of the limits they were
// decided under; once the config changes they are dropped, so a raised
// limit applies at once.
func TestReloadPurgesFlags(t *testing.T) {
	flags := newFlags(t)
	var current atomic.Pointer[config.Config]
	current.Store(mustConfig(t, testConfig))
	h := start(t, Options{Cache: flags, Config: current.Load})
	r := edge(desc("remote_address", "x"))
	for range 4 {
		h.decide(t, r)
	}
	if flags.Len() != 1 {
		t.Fatalf("%d flags after going over the limit; want 1", flags.Len())
	}
	current.Store(mustConfig(t, strings.Replace(testConfig, "requests_per_unit: 3, name: per-client", "requests_per_unit: 30, name: per-client", 1)))
	if a := h.decide(t, r); a.Overall != OK {
		t.Fatalf("after raising the limit to 30: %s; want OK (the old flag dropped)", verdict(a))
	}
}

// reloading is a Decider during whose calls the config is replaced and
// another request decided on the new one.
type reloading struct {
	Decider
	reload func()
}

func (d reloading) Decide(ctx context.Context, b *Batch) error {
	d.reload()
	return d.Decider.Decide(ctx, b)
}

// TestFlagsNotFromAReplacedConfig: an answer decided on a config that was
// replaced while the store decided (and the flags purged for the new one)
// flags nothing: the flag would outlive the purge.
func TestFlagsNotFromAReplacedConfig(t *testing.T) {
	flags := newFlags(t)
	var current atomic.Pointer[config.Config]
	current.Store(mustConfig(t, testConfig))
	store := newClockStore(t)
	var svc *Service
	reload := false
	d := reloading{Decider: Infallible{Store: store}, reload: func() {
		if reload {
			reload = false
			current.Store(mustConfig(t, testConfig))
			svc.Decide(context.Background(), edge(desc("api_key", "other")), DecideOptions{Content: true})
		}
	}}
	h := start(t, Options{Cache: flags, Config: current.Load, Decider: d, Now: store.clock})
	svc = h.svc
	r := edge(desc("remote_address", "x"))
	for range 3 {
		h.decide(t, r)
	}
	reload = true
	if a := h.decide(t, r); a.Overall != OverLimit || flags.Len() != 0 {
		t.Errorf("over limit on a config replaced meanwhile: %s, %d flags; want OVER_LIMIT, none", verdict(a), flags.Len())
	}
	if a := h.decide(t, r); a.Overall != OverLimit || flags.Len() != 1 {
		t.Errorf("over limit on the current config: %s, %d flags; want OVER_LIMIT, 1", verdict(a), flags.Len())
	}
}

// TestFlagsOnlyForOneUnit: a costly request refused leaves room for cheap
// ones, so it flags nothing; and a flagged request's shadow limits are
// reported as not asked, not as over limit.
func TestFlagsOnlyForOneUnit(t *testing.T) {
	flags := newFlags(t)
	h := start(t, Options{Cache: flags})
	cost := func(n uint32) *testRequest {
		r := edge(desc("api_key", "k"))
		r.cost = n
		return r
	}
	h.decide(t, cost(10)) // 10 of the burst of 20 left
	if a := h.decide(t, cost(15)); a.Overall != OverLimit {
		t.Fatalf("15 units with 10 left: %s; want OVER_LIMIT", verdict(a))
	}
	if a := h.decide(t, cost(1)); a.Overall != OK || flags.Len() != 0 {
		t.Errorf("one unit after a refused 15 with 10 left: %s with %d flags; want OK, nothing flagged", verdict(a), flags.Len())
	}

	withShadow := edge(desc("remote_address", "s"), desc("generic_key", "shadowed"))
	for range 4 {
		h.decide(t, withShadow) // the fourth is over per-client's 3 and flags it
	}
	shadowed := h.metrics.decisions.WithLabelValues("edge", "shadow", "shadow_over_limit")
	before := testutil.ToFloat64(shadowed)
	a := h.decide(t, withShadow) // from the flag cache
	if after := testutil.ToFloat64(shadowed); a.Overall != OverLimit || after != before || a.Statuses[1].Code != OK {
		t.Errorf("a flag-cache answer: %s, shadow_over_limit %v -> %v; want OVER_LIMIT and the shadow limit not counted", verdict(a), before, after)
	}
}

// asking is a Decider that counts the demand it hears of (Asker).
type asking struct {
	Decider
	asked atomic.Int64
}

func (a *asking) Asked(b *Batch) { a.asked.Add(int64(len(b.Items))) }

// TestFlagCacheTellsTheAsker: a request the flag cache answers never
// reaches the Decider, so one that counts demand (an async tier) is told
// of it: a flood held back by the flags is still the demand it is.
func TestFlagCacheTellsTheAsker(t *testing.T) {
	cs := newClockStore(t)
	d := &asking{Decider: Infallible{Store: cs}}
	h := start(t, Options{Cache: newFlags(t), Decider: d, Now: cs.clock})
	r := edge(desc("api_key", "flood"), desc("remote_address", "flood"))
	for range 4 {
		h.decide(t, r)
	}
	if n := d.asked.Load(); n != 0 {
		t.Fatalf("asked %d before the flags answered; want 0", n)
	}
	for range 10 {
		if a := h.decide(t, r); a.Overall != OverLimit {
			t.Fatalf("flood: %s", verdict(a))
		}
	}
	if n := d.asked.Load(); n != 20 {
		t.Errorf("10 requests of 2 descriptors answered from the flags: asked %d; want 20", n)
	}
}
