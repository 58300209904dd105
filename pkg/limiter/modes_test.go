package limiter

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// referenceConfig uses the reference's newer descriptor fields as its
// README documents them.
const referenceConfig = `domain: edge
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: fixed_window}
  - key: pages
    value: pages/*
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: fixed_window}
  - key: service
    value: quota_a
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window}
  - key: service
    value: quota_b
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window}
  - key: service
    value: quota_c
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: fixed_window}
  - key: service
    value: both
    quota_mode: true
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window}
`

// TestShadowMode: a shadow_mode limit never rejects, nor holds back the
// others: over its limit its status says OK with nothing left, and the
// decision is counted as shadow_over_limit.
func TestShadowMode(t *testing.T) {
	h := start(t, Options{})
	r := edge(desc("generic_key", "shadowed"), desc("remote_address", "s"))
	h.decide(t, r)
	a := h.decide(t, r)
	if verdict(a) != "OK:OK,OK" || a.Statuses[0].Remaining != 0 || a.Statuses[1].Remaining != 1 {
		t.Fatalf("shadow limit over: %s %+v; want OK with 0 left, per-client counted (1 left)", verdict(a), a.Statuses)
	}
	if got := testutil.ToFloat64(h.metrics.decisions.WithLabelValues("edge", "shadow", "shadow_over_limit")); got != 1 {
		t.Errorf("shadow_over_limit = %v; want 1", got)
	}
	if hd := headerMap(a); hd[HeaderRetryAfter] != "" {
		t.Errorf("an admitted request with Retry-After %q", hd[HeaderRetryAfter])
	}
}

// TestQuotaMode: a quota descriptor over its limit is reported in its
// status but fails the request only when every quota descriptor of it is
// over limit and no other limit is; an ordinary limit fails it as always;
// shadow_mode wins over quota_mode.
func TestQuotaMode(t *testing.T) {
	h := start(t, Options{Config: configOf(t, referenceConfig)})
	for _, s := range []struct {
		name string
		req  *testRequest
		want string
	}{
		{"two quotas with room", edge(desc("service", "quota_a"), desc("service", "quota_c")), "OK:OK,OK"},
		{"one quota over, another with room", edge(desc("service", "quota_a"), desc("service", "quota_c")), "OK:OVER_LIMIT,OK"},
		{"the other quota alone", edge(desc("service", "quota_b")), "OK:OK"},
		{"every quota over", edge(desc("service", "quota_a"), desc("service", "quota_b")), "OVER_LIMIT:OVER_LIMIT,OVER_LIMIT"},
		// The reference's rule: its only quota is over, so the request is;
		// the plain limit was counted all the same.
		{"the only quota over, a plain limit with room", edge(desc("service", "quota_a"), desc("user", "u1")), "OVER_LIMIT:OVER_LIMIT,OK"},
		{"the plain limit, counted above", edge(desc("user", "u1")), "OVER_LIMIT:OVER_LIMIT"},
		{"a plain limit over, a quota with room", edge(desc("service", "quota_c"), desc("user", "u1")), "OVER_LIMIT:OK,OVER_LIMIT"},
		{"shadow and quota: shadow", edge(desc("service", "both")), "OK:OK"},
		{"shadow and quota, over: shadow", edge(desc("service", "both")), "OK:OK"},
	} {
		if got := verdict(h.decide(t, s.req)); got != s.want {
			t.Errorf("%s: %s; want %s", s.name, got, s.want)
		}
	}
	// A request the quotas failed is answered as a 429 of theirs, an
	// unnamed limit named by its path.
	a := h.decide(t, edge(desc("service", "quota_a"), desc("service", "quota_b")))
	if hd := headerMap(a); hd[HeaderReason] != "edge.service_quota_a" || hd[HeaderRetryAfter] != "45" ||
		hd[HeaderPolicy] != `"edge.service_quota_a";q=1;w=60, "edge.service_quota_b";q=1;w=60` {
		t.Errorf("quotas over: headers %v; want a 429 of both quotas, the first named", hd)
	}
}

// TestGlobalModes: ShadowAll (the reference's SHADOW_MODE) admits every
// request, statuses still saying which limits are over, with no 429
// headers; QuotaAll (its QUOTA_MODE) makes every limit a quota limit.
func TestGlobalModes(t *testing.T) {
	cfg := configOf(t, referenceConfig)
	shadow := start(t, Options{Config: cfg, ShadowAll: true})
	for i, want := range []string{"OK:OK", "OK:OVER_LIMIT"} {
		a := shadow.decide(t, edge(desc("user", "u")))
		if got := verdict(a); got != want {
			t.Errorf("shadow mode, request %d: %s; want %s", i+1, got, want)
		}
		if hd := headerMap(a); hd[HeaderRetryAfter] != "" || a.Body != nil {
			t.Errorf("shadow mode: an admitted request with Retry-After %q, body %q", hd[HeaderRetryAfter], a.Body)
		}
	}
	quota := start(t, Options{Config: cfg, QuotaAll: true})
	quota.decide(t, edge(desc("user", "u")))
	if got := verdict(quota.decide(t, edge(desc("user", "u"), desc("pages", "pages/a")))); got != "OK:OVER_LIMIT,OK" {
		t.Errorf("quota mode, one limit over and one with room: %s; want OK:OVER_LIMIT,OK", got)
	}
	if got := verdict(quota.decide(t, edge(desc("user", "u")))); got != "OVER_LIMIT:OVER_LIMIT" {
		t.Errorf("quota mode, the only limit over: %s; want OVER_LIMIT", got)
	}
}
