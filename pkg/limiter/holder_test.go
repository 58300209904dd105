package limiter

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

const holderConfig = `domain: ai
descriptors:
  - key: tenant
    descriptors:
      - key: request_id
        rate_limit: {unit: minute, requests_per_unit: 2, algorithm: concurrency, holder: true}
`

// A concurrency limit counts every request of a tenant on one key, each
// request named by its request_id entry: a refund frees its own request's
// unit only; an id of any length names one holder (a long one by its
// hash); and a refused request is never flagged, so a refund elsewhere
// is seen by the next request at once.
func TestHolders(t *testing.T) {
	h := start(t, Options{Config: configOf(t, holderConfig), Refunds: true, Cache: newFlags(t)})
	// Another server on the same store, with flags of its own.
	other := startStore(t, Options{Config: configOf(t, holderConfig), Refunds: true, Cache: newFlags(t)}, StoreOptions{Store: h.store})
	on := func(h *harness, id string, refund bool) *Answer {
		t.Helper()
		d := desc("tenant", "acme", "request_id", id)
		d.refund = refund
		return h.decide(t, &testRequest{domain: "ai", descs: []descriptor{d}})
	}
	call := func(id string, refund bool) *Answer { t.Helper(); return on(h, id, refund) }
	long := strings.Repeat("x", 300)
	if a := call("a", false); a.Overall != OK {
		t.Fatalf("first: %s", verdict(a))
	}
	if a := call(long, false); a.Overall != OK || a.Statuses[0].Remaining != 0 {
		t.Fatalf("a long id: %s, %d left; want OK, 0", verdict(a), a.Statuses[0].Remaining)
	}
	if a := call("c", false); a.Overall != OverLimit {
		t.Fatalf("a third request of the tenant: %s; want OVER_LIMIT", verdict(a))
	}
	if a := on(other, "c", true); a.Statuses[0].Remaining != 0 {
		t.Fatalf("the refused request's refund: %d left; want 0 (it held nothing)", a.Statuses[0].Remaining)
	}
	if a := on(other, long+"y", true); a.Statuses[0].Remaining != 0 {
		t.Fatalf("another long id's refund: %d left; want 0", a.Statuses[0].Remaining)
	}
	if a := on(other, long, true); a.Statuses[0].Remaining != 1 {
		t.Fatalf("the long id's own refund, on the other server: %d left; want 1", a.Statuses[0].Remaining)
	}
	if a := call("d", false); a.Overall != OK {
		t.Fatalf("after a refund: %s; want OK (never flagged over limit)", verdict(a))
	}
}

// Refunds are counted in units, applied or clipped: what the key held as
// consumed comes back, the rest is clipped (a bucket already full, a
// holder holding nothing), and a refund is no decision.
func TestRefundMetrics(t *testing.T) {
	h := start(t, Options{Config: configOf(t, holderConfig+`  - key: tokens
    rate_limit: {unit: hour, requests_per_unit: 10}
`), Refunds: true})
	refund := func(d descriptor, n uint64) {
		t.Helper()
		d = d.costing(n)
		d.refund = true
		h.decide(t, &testRequest{domain: "ai", descs: []descriptor{d}})
	}
	charge := func(d descriptor, n uint64) {
		t.Helper()
		if a := h.decide(t, &testRequest{domain: "ai", descs: []descriptor{d.costing(n)}}); a.Overall != OK {
			t.Fatalf("charge: %s", verdict(a))
		}
	}
	tokens, req := desc("tokens", "acme"), desc("tenant", "acme", "request_id", "r1")
	charge(tokens, 4)
	refund(tokens, 10) // 4 back, 6 clipped at the full bucket
	charge(req, 1)
	refund(req, 1)
	refund(desc("tenant", "acme", "request_id", "never-took"), 1)
	count := func(limit, result string) float64 {
		return testutil.ToFloat64(h.metrics.refunds.WithLabelValues("ai", limit, result))
	}
	for _, c := range []struct {
		limit, result string
		want          float64
	}{
		{"ai.tokens", "applied", 4}, {"ai.tokens", "clipped", 6},
		{"ai.tenant.request_id", "applied", 1}, {"ai.tenant.request_id", "clipped", 1},
	} {
		if got := count(c.limit, c.result); got != c.want {
			t.Errorf("sluice_refunds_total{limit=%q, result=%q} = %v; want %v", c.limit, c.result, got, c.want)
		}
	}
	if n := testutil.ToFloat64(h.metrics.decisions.WithLabelValues("ai", "ai.tokens", "ok")); n != 1 {
		t.Errorf("ai.tokens decisions ok = %v; want 1 (the charge; a refund is no decision)", n)
	}
}

// Hostile holders: ids of non-UTF-8 bytes, with NUL, of 100 KB; costs of
// 2^32 taken and given back; 20,000 distinct holders on a limit of 2.
// The key's units stay within the limit (a cost above it is refused, a
// refund frees only its own holder's), and the memory store's state for
// the tenant stays one key.
func TestHostileHolders(t *testing.T) {
	h := start(t, Options{Config: configOf(t, holderConfig), Refunds: true})
	call := func(id string, cost uint64, refund bool) *Answer {
		t.Helper()
		d := desc("tenant", "acme", "request_id", id).costing(cost)
		d.refund = refund
		return h.decide(t, &testRequest{domain: "ai", descs: []descriptor{d}})
	}
	if a := call("x", 1<<32, false); a.Overall != OverLimit {
		t.Fatalf("a cost of 2^32 on a limit of 2: %s; want OVER_LIMIT", verdict(a))
	}
	for _, id := range []string{"\xff\xfe", "a\x00b", strings.Repeat("\xc3", 100_000)} {
		if a := call(id, 1, false); a.Overall != OK {
			t.Fatalf("holder %q…: %s; want OK", id[:2], verdict(a))
		}
		if a := call(id, 1<<32, true); a.Statuses[0].Remaining != 2 {
			t.Fatalf("holder %q…'s refund of 2^32: %d left; want 2", id[:2], a.Statuses[0].Remaining)
		}
	}
	for i := range 20_000 {
		a := call(string(rune(0x10000+i)), 1, false)
		if i < 2 && a.Overall != OK || i >= 2 && a.Overall != OverLimit {
			t.Fatalf("holder %d of 20,000: %s", i, verdict(a))
		}
	}
	if a := call("nobody", 1<<32, true); a.Statuses[0].Remaining != 0 {
		t.Errorf("an unknown holder's refund of 2^32: %d left; want 0", a.Statuses[0].Remaining)
	}
}
