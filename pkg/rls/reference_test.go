package rls

import (
	"reflect"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/limiter"
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
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window}
`

func referenceHarness(t *testing.T) *harness {
	t.Helper()
	cfg := mustConfig(t, referenceConfig)
	return start(t, limiter.Options{Config: func() *config.Config { return cfg }})
}

func request(d ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: d}
}

// TestShareThreshold: every value a share_threshold wildcard matches
// counts on one counter; a wildcard without it counts each value apart.
func TestShareThreshold(t *testing.T) {
	h := referenceHarness(t)
	for i, want := range []string{"OK:OK", "OK:OK", "OVER_LIMIT:OVER_LIMIT"} {
		file := []string{"files/a", "files/b", "files/c"}[i]
		if got := codesOf(h.call(t, request(desc("files", file)))); got != want {
			t.Errorf("request %d (%s) on the shared limit of 2: %s; want %s", i+1, file, got, want)
		}
	}
	for _, page := range []string{"pages/a", "pages/b", "pages/c", "pages/a"} {
		if got := codesOf(h.call(t, request(desc("pages", page)))); got != "OK:OK" {
			t.Errorf("%s on its own counter: %s; want OK", page, got)
		}
	}
}

// TestQuotaMode: a quota descriptor over its limit is reported in its
// status but fails the request only when every quota descriptor of it is
// over limit and no other limit is; an ordinary limit fails it as always.
func TestQuotaMode(t *testing.T) {
	h := referenceHarness(t)
	steps := []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{"two quotas with room", request(desc("service", "quota_a"), desc("service", "quota_c")), "OK:OK,OK"},
		{"one quota over, another with room", request(desc("service", "quota_a"), desc("service", "quota_c")), "OK:OVER_LIMIT,OK"},
		{"the other quota alone", request(desc("service", "quota_b")), "OK:OK"},
		{"every quota over", request(desc("service", "quota_a"), desc("service", "quota_b")), "OVER_LIMIT:OVER_LIMIT,OVER_LIMIT"},
		// The reference's rule: its only quota is over, so the request is;
		// the plain limit was counted all the same.
		{"the only quota over, a plain limit with room", request(desc("service", "quota_a"), desc("user", "u1")), "OVER_LIMIT:OVER_LIMIT,OK"},
		{"the plain limit, counted above", request(desc("user", "u1")), "OVER_LIMIT:OVER_LIMIT"},
		{"a plain limit over, a quota with room", request(desc("service", "quota_c"), desc("user", "u1")), "OVER_LIMIT:OK,OVER_LIMIT"},
	}
	for _, s := range steps {
		if got := codesOf(h.call(t, s.req)); got != s.want {
			t.Errorf("%s: %s; want %s", s.name, got, s.want)
		}
	}
}

// TestDynamicMetadata: with WithDynamicMetadata an answer to Envoy carries
// the reference's dynamic metadata: the domain, the descriptors, and the
// configured metadata of the descriptors that passed, merged; none without
// the option.
func TestDynamicMetadata(t *testing.T) {
	cfg := mustConfig(t, `domain: edge
descriptors:
  - key: service
    value: one
    rate_limit: {unit: minute, requests_per_unit: 5}
    metadata:
      service_with_quota: {name: one}
      owner: team-a
  - key: service
    value: two
    rate_limit: {unit: minute, requests_per_unit: 5}
    metadata:
      service_with_quota: {tier: 2}
      owner: team-b
  - key: service
    value: spent
    rate_limit: {unit: minute, requests_per_unit: 0}
    metadata: {never: here}
`)
	h := start(t, limiter.Options{Config: func() *config.Config { return cfg }}, WithDynamicMetadata())
	req := request(desc("service", "one"), desc("service", "two"), desc("nothing", "x"))
	req.HitsAddend = 2
	got := h.call(t, req).GetDynamicMetadata().AsMap()
	want := map[string]any{
		"domain":     "edge",
		"hitsAddend": float64(2),
		"descriptors": []any{
			map[string]any{"entries": []any{"service=one"}},
			map[string]any{"entries": []any{"service=two"}},
			map[string]any{"entries": []any{"nothing=x"}},
		},
		// The first descriptor's values win; mappings merge.
		"metadata": map[string]any{"service_with_quota": map[string]any{"name": "one", "tier": float64(2)}, "owner": "team-a"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("dynamic metadata\n got %v\nwant %v", got, want)
	}
	// A descriptor over its limit does not pass: its metadata stays out.
	got = h.call(t, request(desc("service", "spent"))).GetDynamicMetadata().AsMap()
	if _, ok := got["metadata"]; ok {
		t.Errorf("metadata of a descriptor over its limit: %v", got)
	}
	plain := referenceHarness(t)
	if md := plain.call(t, request(desc("files", "files/a"))).GetDynamicMetadata(); md != nil {
		t.Errorf("dynamic metadata without the option: %v", md)
	}
}

// TestGlobalModes: the reference's SHADOW_MODE admits every request
// (statuses still say which limits are over) and QUOTA_MODE makes every
// limit a quota limit.
func TestGlobalModes(t *testing.T) {
	cfg := mustConfig(t, referenceConfig)
	shadow := start(t, limiter.Options{Config: func() *config.Config { return cfg }, ShadowAll: true})
	for i, want := range []string{"OK:OK", "OK:OVER_LIMIT"} {
		resp := shadow.call(t, request(desc("user", "u")))
		if got := codesOf(resp); got != want {
			t.Errorf("shadow mode, request %d: %s; want %s", i+1, got, want)
		}
		if h := headers(resp); h["Retry-After"] != "" {
			t.Errorf("shadow mode: an admitted request with Retry-After %q", h["Retry-After"])
		}
	}
	quota := start(t, limiter.Options{Config: func() *config.Config { return cfg }, QuotaAll: true})
	quota.call(t, request(desc("user", "u")))
	if got := codesOf(quota.call(t, request(desc("user", "u"), desc("pages", "pages/a")))); got != "OK:OVER_LIMIT,OK" {
		t.Errorf("quota mode, one limit over and one with room: %s; want OK:OVER_LIMIT,OK", got)
	}
	if got := codesOf(quota.call(t, request(desc("user", "u")))); got != "OVER_LIMIT:OVER_LIMIT" {
		t.Errorf("quota mode, the only limit over: %s; want OVER_LIMIT", got)
	}
}

// TestReferenceCounting: with limiter.Options.ReferenceCounting a limit
// that names no algorithm counts as the reference's fixed window, and
// every hit counts on every limit, a rejected request's included; without
// it, a request one limit rejects costs the others nothing.
func TestReferenceCounting(t *testing.T) {
	cfg := mustConfig(t, `domain: edge
descriptors:
  - key: tight
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: wide
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: bucket
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: token_bucket}
`)
	both := request(desc("tight", "t"), desc("wide", "w"))
	for _, c := range []struct {
		reference bool
		want      []string // the codes of three requests, then what wide has left
	}{
		{true, []string{"OK:OK,OK", "OVER_LIMIT:OVER_LIMIT,OK", "OVER_LIMIT:OVER_LIMIT,OK"}},
		{false, []string{"OK:OK,OK", "OVER_LIMIT:OVER_LIMIT,OK", "OVER_LIMIT:OVER_LIMIT,OK"}},
	} {
		h := start(t, limiter.Options{Config: func() *config.Config { return cfg }, ReferenceCounting: c.reference})
		for i, want := range c.want {
			if got := codesOf(h.call(t, both)); got != want {
				t.Errorf("reference %v, request %d: %s; want %s", c.reference, i+1, got, want)
			}
		}
		left := h.call(t, request(desc("wide", "w"))).GetStatuses()[0].GetLimitRemaining()
		// The reference counted all four requests on wide (5 − 4 = 1);
		// sluice only the admitted two (the first, and this one: 3).
		want := uint32(3)
		if c.reference {
			want = 1
		}
		if left != want {
			t.Errorf("reference %v: wide has %d left after the requests; want %d", c.reference, left, want)
		}
	}
}

// TestReferenceCountingFixedWindow: with ReferenceCounting a limit that
// names no algorithm turns over with the clock's minute, as the
// reference's fixed window does; a token bucket would still be empty.
func TestReferenceCountingFixedWindow(t *testing.T) {
	cfg := mustConfig(t, `domain: edge
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 4}
`)
	for _, reference := range []bool{true, false} {
		h := start(t, limiter.Options{Config: func() *config.Config { return cfg }, ReferenceCounting: reference})
		minute := int64(60_000_000)
		h.store.now.Store(1000*minute - 100_000) // 0.1 s before a minute turns
		for i := range 5 {
			want := "OK:OK"
			if i == 4 {
				want = "OVER_LIMIT:OVER_LIMIT"
			}
			if got := codesOf(h.call(t, request(desc("k", "x")))); got != want {
				t.Fatalf("reference %v, request %d: %s; want %s", reference, i+1, got, want)
			}
		}
		h.store.now.Store(1000*minute + 100_000) // 0.1 s after
		want := "OVER_LIMIT:OVER_LIMIT"          // a token bucket refilled a hundredth of a token
		if reference {
			want = "OK:OK" // a new fixed window
		}
		if got := codesOf(h.call(t, request(desc("k", "x")))); got != want {
			t.Errorf("reference %v, after the minute turned: %s; want %s", reference, got, want)
		}
	}
}

// TestCalendarMonth: a fixed window on Paris's calendar turns at midnight
// on the 1st, local time, and says so in Retry-After; the reference's
// 30-day month does not.
func TestCalendarMonth(t *testing.T) {
	cfg := mustConfig(t, `domain: edge
descriptors:
  - key: calendar
    rate_limit: {unit: month, requests_per_unit: 2, algorithm: fixed_window, calendar: Europe/Paris}
  - key: days30
    rate_limit: {unit: month, requests_per_unit: 2, algorithm: fixed_window}
`)
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, limiter.Options{Config: func() *config.Config { return cfg }})
	before := time.Date(2026, 1, 31, 23, 59, 59, 500_000_000, paris)
	h.store.now.Store(before.UnixMicro())
	for _, key := range []string{"calendar", "days30"} {
		for i, want := range []string{"OK:OK", "OK:OK", "OVER_LIMIT:OVER_LIMIT"} {
			if got := codesOf(h.call(t, request(desc(key, "tenant")))); got != want {
				t.Fatalf("%s request %d: %s; want %s", key, i+1, got, want)
			}
		}
	}
	if got := headers(h.call(t, request(desc("calendar", "tenant"))))["Retry-After"]; got != "1" {
		t.Errorf("Retry-After half a second before the 1st: %q; want 1", got)
	}
	h.store.now.Store(before.Add(time.Second).UnixMicro()) // 1 February, 00:00:00.5 in Paris
	if got := codesOf(h.call(t, request(desc("calendar", "tenant")))); got != "OK:OK" {
		t.Errorf("the calendar month on the 1st: %s; want OK", got)
	}
	if got := codesOf(h.call(t, request(desc("days30", "tenant")))); got != "OVER_LIMIT:OVER_LIMIT" {
		t.Errorf("the 30-day month on the 1st: %s; want still OVER_LIMIT", got)
	}
}
