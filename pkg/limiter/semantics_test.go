package limiter

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestSemantics: how descriptors are matched and decided, all or nothing,
// in one request.
func TestSemantics(t *testing.T) {
	h := start(t, Options{})

	t.Run("statuses one to one, unmatched and unlimited OK", func(t *testing.T) {
		a := h.decide(t, edge(desc("nothing", "here"), desc("api_key", "k1"), desc("open", "x"), desc("remote_address", "b")))
		if verdict(a) != "OK:OK,OK,OK,OK" {
			t.Fatalf("codes = %s", verdict(a))
		}
		for _, i := range []int{0, 2} {
			if st := a.Statuses[i]; st.Limit != nil || st.Limited {
				t.Errorf("status %d (unmatched or unlimited) = %+v; want no limit", i, st)
			}
		}
		if st := a.Statuses[1]; st.Limit.PolicyName() != "per-key" || st.Remaining != 19 {
			t.Errorf("api_key status = %+v; want per-key with 19 left", st)
		}
		if got := headerMap(a)[HeaderPolicy]; got != `"per-key";q=10;w=1, "per-client";q=3;w=60` {
			t.Errorf("RateLimit-Policy = %q", got)
		}
	})
	t.Run("unknown domain", func(t *testing.T) {
		a := h.decide(t, one("nope", "remote_address", "x"))
		if verdict(a) != "OK:OK" || len(a.Headers) != 0 || a.Statuses[0].Limited {
			t.Fatalf("unknown domain: %s %v %+v", verdict(a), a.Headers, a.Statuses[0])
		}
	})
	t.Run("a rejection consumes nothing from the other limits", func(t *testing.T) {
		for range 3 {
			h.decide(t, edge(desc("remote_address", "c")))
		}
		a := h.decide(t, edge(desc("api_key", "k2"), desc("remote_address", "c")))
		if verdict(a) != "OVER_LIMIT:OK,OVER_LIMIT" || a.Statuses[0].Remaining != 20 {
			t.Fatalf("%s, api_key %+v; want OVER_LIMIT with api_key untouched (20 left)", verdict(a), a.Statuses[0])
		}
		if hd := headerMap(a); hd[HeaderPolicy] != `"per-client";q=3;w=60` || hd[HeaderReason] != "per-client" {
			t.Errorf("429 headers %v; want them to describe the limit that denied", hd)
		}
	})
	t.Run("nested wildcard", func(t *testing.T) {
		r := edge(desc("tenant", "acme", "path", "/reports/q3"))
		h.decide(t, r)
		h.decide(t, r)
		if a := h.decide(t, r); verdict(a) != "OVER_LIMIT:OVER_LIMIT" {
			t.Fatalf("third report: %s", verdict(a))
		}
		if a := h.decide(t, edge(desc("tenant", "globex", "path", "/reports/q3"))); verdict(a) != "OK:OK" {
			t.Fatalf("another tenant shares the counter: %s", verdict(a))
		}
	})
	t.Run("replaces", func(t *testing.T) {
		a := h.decide(t, edge(desc("plan", "free"), desc("plan", "vip")))
		if a.Statuses[0].Limited || a.Statuses[0].Limit != nil || a.Statuses[1].Limit.PolicyName() != "vip-plan" {
			t.Fatalf("statuses = %+v; want free-plan replaced by vip-plan", a.Statuses)
		}
		// Alone, free-plan applies.
		if a := h.decide(t, edge(desc("plan", "free"))); a.Statuses[0].Limit.PolicyName() != "free-plan" {
			t.Fatalf("free alone: %+v; want free-plan", a.Statuses[0])
		}
	})
	t.Run("requests_per_unit 0 blocks without a store call", func(t *testing.T) {
		before, config := h.store.calls.Load(), h.decided(SourceConfig, "over_limit")
		a := h.decide(t, edge(desc("api_key", "k3"), desc("banned", "x")))
		if verdict(a) != "OVER_LIMIT:OK,OVER_LIMIT" || h.store.calls.Load() != before {
			t.Fatalf("%s after %d store calls; want OVER_LIMIT and none", verdict(a), h.store.calls.Load()-before)
		}
		if got := headerMap(a)[HeaderReason]; got != "banned" || a.Statuses[1].RetryAfter.Seconds() != 60 {
			t.Errorf("reason %q, retry %v; want banned, a window", got, a.Statuses[1].RetryAfter)
		}
		if h.decided(SourceConfig, "over_limit") != config+1 {
			t.Error("not counted as decided by the config")
		}
	})
	t.Run("unit_multiplier in RateLimit-Policy", func(t *testing.T) {
		a := h.decide(t, edge(desc("window", "w")))
		if got := headerMap(a)[HeaderPolicy]; got != `"thirty-seconds";q=2;w=30` {
			t.Errorf("RateLimit-Policy = %q", got)
		}
	})
}

// TestShadowLimitOfZero: a shadow_mode limit of 0 blocks nothing: the
// other limits are asked and the request admitted, the block counted as
// shadow_over_limit.
func TestShadowLimitOfZero(t *testing.T) {
	h := start(t, Options{Config: configOf(t, testConfig+`  - key: dark
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 0, name: dark-launch}
`)})
	a := h.decide(t, edge(desc("api_key", "d"), desc("dark", "x")))
	if verdict(a) != "OK:OK,OK" || h.store.calls.Load() != 1 || a.Statuses[0].Remaining != 19 {
		t.Fatalf("%s after %d store calls, api_key %+v; want OK, the store asked", verdict(a), h.store.calls.Load(), a.Statuses[0])
	}
	if got := testutil.ToFloat64(h.metrics.decisions.WithLabelValues("edge", "dark-launch", "shadow_over_limit")); got != 1 {
		t.Errorf("shadow_over_limit = %v; want 1", got)
	}
}

// TestCosts: hits_addend is the request's cost, 0 meaning 1; a
// descriptor's own replaces it, an explicit 0 checking without consuming;
// a cost past what is left is refused and consumes nothing.
func TestCosts(t *testing.T) {
	h := start(t, Options{})
	k := desc("api_key", "k") // per-key: burst 20
	for _, step := range []struct {
		name string
		cost uint32
		d    descriptor
		want string
		left uint32
	}{
		{"request cost 5", 5, k, "OK:OK", 15},
		{"descriptor cost 7 over the request's 5", 5, k.costing(7), "OK:OK", 8},
		{"explicit 0: a check", 5, k.costing(0), "OK:OK", 8},
		{"request cost 0 is 1", 0, k, "OK:OK", 7},
		{"10 with 7 left", 10, k, "OVER_LIMIT:OVER_LIMIT", 7},
		{"refused, nothing consumed", 0, k.costing(0), "OK:OK", 7},
	} {
		r := edge(step.d)
		r.cost = step.cost
		a := h.decide(t, r)
		if verdict(a) != step.want || a.Statuses[0].Remaining != step.left {
			t.Fatalf("%s: %s, %d left; want %s, %d", step.name, verdict(a), a.Statuses[0].Remaining, step.want, step.left)
		}
	}
	// Each descriptor its own cost, in one request.
	a := h.decide(t, edge(desc("api_key", "k2").costing(3), desc("remote_address", "r").costing(2)))
	if a.Statuses[0].Remaining != 17 || a.Statuses[1].Remaining != 1 {
		t.Errorf("costs 3 and 2: %d and %d left; want 17 and 1", a.Statuses[0].Remaining, a.Statuses[1].Remaining)
	}
}
