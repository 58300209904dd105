package rls

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/cache"
	"github.com/sluicehq/sluice/pkg/global"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/peerauth"
	"github.com/sluicehq/sluice/pkg/wire"
)

const testConfig = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3, name: per-client, algorithm: fixed_window}
  - key: api_key
    rate_limit: {unit: second, requests_per_unit: 10, burst: 20, name: per-key}
  - key: generic_key
    value: shadowed
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, name: shadow, algorithm: fixed_window}
  - key: tenant
    descriptors:
      - key: path
        value: /reports*
        rate_limit: {unit: hour, requests_per_unit: 2, name: reports, algorithm: fixed_window}
  - key: plan
    value: free
    rate_limit: {unit: minute, requests_per_unit: 5, name: free-plan}
  - key: plan
    value: vip
    rate_limit:
      unit: minute
      requests_per_unit: 100
      name: vip-plan
      replaces: [{name: free-plan}]
  - key: open
    rate_limit: {unlimited: true}
  - key: banned
    rate_limit: {unit: minute, requests_per_unit: 0, name: banned}
  - key: window
    rate_limit: {unit: second, unit_multiplier: 30, requests_per_unit: 2, name: thirty-seconds, algorithm: sliding_window}
`

// t0 is 15 s into a minute (and an hour) of the Unix epoch.
const t0 = int64(1_780_000_200+15) * 1_000_000

// clockStore runs a real in-memory store at an injected time and counts
// calls.
type clockStore struct {
	m     *global.Memory
	now   atomic.Int64
	calls atomic.Int64
	err   error
}

func (c *clockStore) Decide(_ context.Context, items []algorithm.Item, out []algorithm.Result) error {
	c.calls.Add(1)
	if c.err != nil {
		return c.err
	}
	return c.m.DecideAt(items, out, c.now.Load())
}

func newClockStore(t testing.TB) *clockStore {
	m, err := global.NewMemory(global.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := &clockStore{m: m}
	c.now.Store(t0)
	return c
}

func mustConfig(t *testing.T, src string) *config.Config {
	t.Helper()
	cfg, err := config.Parse(map[string][]byte{"test.yaml": []byte(src)})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// trustAny makes every caller a sidecar, as a server started with
// -trust-any-sidecar does: for tests of the record path itself.
func trustAny(t testing.TB) ServiceOption {
	t.Helper()
	a, err := peerauth.New(peerauth.Options{TrustAnyCaller: true})
	if err != nil {
		t.Fatal(err)
	}
	return WithProxies(a, slog.New(slog.DiscardHandler), nil)
}

type harness struct {
	client rlsv3.RateLimitServiceClient
	store  *clockStore
	svc    *Service
}

// start serves a Service over gRPC on 127.0.0.1:0 and returns a client.
func start(t *testing.T, opts limiter.Options, sopts ...ServiceOption) *harness {
	t.Helper()
	h := &harness{store: newClockStore(t)}
	if opts.Config == nil {
		cfg := mustConfig(t, testConfig)
		opts.Config = func() *config.Config { return cfg }
	}
	if opts.Now == nil {
		opts.Now = func() time.Time { return time.UnixMicro(h.store.now.Load()) }
	}
	if opts.Decider == nil {
		fallback, _ := global.NewMemory(global.MemoryOptions{})
		d, err := limiter.NewStoreDecider(limiter.StoreOptions{Store: h.store, Mode: limiter.FailError, Fallback: fallback})
		if err != nil {
			t.Fatal(err)
		}
		opts.Decider = d
	}
	core, err := limiter.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	svc := NewService(core, sopts...)
	h.svc = svc
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(wire.Codec{})) // as the daemons serve it
	rlsv3.RegisterRateLimitServiceServer(srv, svc)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	// The client writes strings as Envoy does, bytes unchecked.
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(wire.Codec{})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	h.client = rlsv3.NewRateLimitServiceClient(conn)
	return h
}

func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func (h *harness) call(t *testing.T, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := h.client.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v) = %v", req, err)
	}
	return resp
}

func headers(resp *rlsv3.RateLimitResponse) map[string]string {
	m := make(map[string]string)
	for _, h := range resp.GetResponseHeadersToAdd() {
		m[h.GetKey()] = h.GetValue()
	}
	return m
}

func codesOf(resp *rlsv3.RateLimitResponse) string {
	var s []string
	for _, st := range resp.GetStatuses() {
		s = append(s, st.GetCode().String())
	}
	return resp.GetOverallCode().String() + ":" + strings.Join(s, ",")
}

// TestGolden pins the exact headers and body of an admitted request and of
// the 429 that follows, for a fixed window 15 s into its minute.
func TestGolden(t *testing.T) {
	h := start(t, limiter.Options{})
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("remote_address", "203.0.113.7")}}

	resp := h.call(t, req)
	want := map[string]string{
		"RateLimit-Policy": `"per-client";q=3;w=60`,
		"RateLimit":        `"per-client";r=2;t=45`,
	}
	if got := headers(resp); !equalMaps(got, want) || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("first request: %s headers %v; want OK %v", codesOf(resp), got, want)
	}
	st := resp.Statuses[0]
	if st.GetCurrentLimit().GetName() != "per-client" || st.GetCurrentLimit().GetRequestsPerUnit() != 3 ||
		st.GetCurrentLimit().GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || st.GetLimitRemaining() != 2 ||
		st.GetDurationUntilReset().AsDuration().Seconds() != 45 {
		t.Fatalf("status = %v; want per-client 3/minute, 2 left, reset in 45s", st)
	}
	h.call(t, req)
	h.call(t, req)
	resp = h.call(t, req)
	want = map[string]string{
		"RateLimit-Policy":   `"per-client";q=3;w=60`,
		"RateLimit":          `"per-client";r=0;t=45`,
		"Retry-After":        "45",
		"X-RateLimit-Reason": "per-client",
		"Content-Type":       "application/problem+json",
	}
	if got := headers(resp); !equalMaps(got, want) || codesOf(resp) != "OVER_LIMIT:OVER_LIMIT" {
		t.Fatalf("fourth request: %s headers %v; want OVER_LIMIT %v", codesOf(resp), got, want)
	}
	wantBody := `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",` +
		`"title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,` +
		`"detail":"Rate limit \"per-client\" exceeded; retry in 45 s.","violated-policies":["per-client"]}`
	if string(resp.RawBody) != wantBody {
		t.Fatalf("body = %s\nwant %s", resp.RawBody, wantBody)
	}
}

func TestLegacyHeaders(t *testing.T) {
	h := start(t, limiter.Options{LegacyHeaders: true})
	resp := h.call(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("remote_address", "a")}})
	got := headers(resp)
	if got["X-RateLimit-Limit"] != "3" || got["X-RateLimit-Remaining"] != "2" || got["X-RateLimit-Reset"] != "45" {
		t.Fatalf("legacy headers = %v; want 3, 2, 45", got)
	}
}

func TestSemantics(t *testing.T) {
	h := start(t, limiter.Options{})
	ds := func(d ...*ratelimitv3.RateLimitDescriptor) []*ratelimitv3.RateLimitDescriptor { return d }

	t.Run("statuses one to one, unmatched and unlimited OK", func(t *testing.T) {
		resp := h.call(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ds(
			desc("nothing", "here"), desc("api_key", "k1"), desc("open", "x"), desc("remote_address", "b"))})
		if codesOf(resp) != "OK:OK,OK,OK,OK" {
			t.Fatalf("codes = %s", codesOf(resp))
		}
		if resp.Statuses[0].CurrentLimit != nil || resp.Statuses[2].CurrentLimit != nil {
			t.Errorf("unmatched/unlimited statuses carry a limit: %v", resp.Statuses)
		}
		if resp.Statuses[1].GetCurrentLimit().GetName() != "per-key" || resp.Statuses[1].LimitRemaining != 19 {
			t.Errorf("api_key status = %v; want per-key with 19 left", resp.Statuses[1])
		}
		if got := headers(resp)["RateLimit-Policy"]; got != `"per-key";q=10;w=1, "per-client";q=3;w=60` {
			t.Errorf("RateLimit-Policy = %q", got)
		}
	})
	t.Run("unknown domain", func(t *testing.T) {
		resp := h.call(t, &rlsv3.RateLimitRequest{Domain: "nope", Descriptors: ds(desc("remote_address", "x"))})
		if codesOf(resp) != "OK:OK" || len(resp.ResponseHeadersToAdd) != 0 {
			t.Fatalf("unknown domain: %s %v", codesOf(resp), resp.ResponseHeadersToAdd)
		}
	})
	t.Run("shadow mode never rejects", func(t *testing.T) {
		req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ds(desc("generic_key", "shadowed"))}
		h.call(t, req)
		resp := h.call(t, req)
		if codesOf(resp) != "OK:OK" || resp.Statuses[0].LimitRemaining != 0 {
			t.Fatalf("shadow limit over: %s %v; want OK with 0 left", codesOf(resp), resp.Statuses[0])
		}
	})
	t.Run("a rejection consumes nothing from the other limits", func(t *testing.T) {
		for range 3 {
			h.call(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ds(desc("remote_address", "c"))})
		}
		resp := h.call(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ds(desc("api_key", "k2"), desc("remote_address", "c"))})
		if codesOf(resp) != "OVER_LIMIT:OK,OVER_LIMIT" || resp.Statuses[0].LimitRemaining != 20 {
			t.Fatalf("%s, api_key %v; want OVER_LIMIT with api_key untouched (20 left)", codesOf(resp), resp.Statuses[0])
		}
		if got := headers(resp); got["RateLimit-Policy"] != `"per-client";q=3;w=60` || got["X-RateLimit-Reason"] != "per-client" {
			t.Errorf("429 headers %v; want them to describe the limit that denied", got)
		}
	})
	t.Run("nested wildcard", func(t *testing.T) {
		req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ds(desc("tenant", "acme", "path", "/reports/q3"))}
		h.call(t, req)
		h.call(t, req)
		if resp := h.call(t, req); codesOf(resp) != "OVER_LIMIT:OVER_LIMIT" {
			t.Fatalf("third report: %s", codesOf(resp))
		}
		other := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ds(desc("tenant", "globex", "path", "/reports/q3"))}
		if resp := h.call(t, other); codesOf(resp) != "OK:OK" {
			t.Fatalf("another tenant shares the counter: %s", codesOf(resp))
		}
	})
	t.Run("replaces", func(t *testing.T) {
		resp := h.call(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ds(desc("plan", "free"), desc("plan", "vip"))})
		if resp.Statuses[0].CurrentLimit != nil || resp.Statuses[1].GetCurrentLimit().GetName() != "vip-plan" {
			t.Fatalf("statuses = %v; want free-plan replaced by vip-plan", resp.Statuses)
		}
	})
	t.Run("requests_per_unit 0 blocks without a store call", func(t *testing.T) {
		before := h.store.calls.Load()
		resp := h.call(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ds(desc("api_key", "k3"), desc("banned", "x"))})
		if codesOf(resp) != "OVER_LIMIT:OK,OVER_LIMIT" || h.store.calls.Load() != before {
			t.Fatalf("%s after %d store calls; want OVER_LIMIT and none", codesOf(resp), h.store.calls.Load()-before)
		}
		if got := headers(resp)["X-RateLimit-Reason"]; got != "banned" {
			t.Errorf("reason = %q; want banned", got)
		}
	})
	t.Run("hits_addend: request level, descriptor override, explicit zero", func(t *testing.T) {
		d := desc("api_key", "k4")
		resp := h.call(t, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 5, Descriptors: ds(d)})
		if resp.Statuses[0].LimitRemaining != 15 {
			t.Fatalf("hits_addend 5: %d left; want 15", resp.Statuses[0].LimitRemaining)
		}
		d.HitsAddend = wrapperspb.UInt64(7)
		if resp = h.call(t, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 5, Descriptors: ds(d)}); resp.Statuses[0].LimitRemaining != 8 {
			t.Fatalf("descriptor hits_addend 7: %d left; want 8", resp.Statuses[0].LimitRemaining)
		}
		d.HitsAddend = wrapperspb.UInt64(0)
		if resp = h.call(t, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 5, Descriptors: ds(d)}); resp.Statuses[0].LimitRemaining != 8 || codesOf(resp) != "OK:OK" {
			t.Fatalf("explicit 0: %s, %d left; want a check leaving 8", codesOf(resp), resp.Statuses[0].LimitRemaining)
		}
	})
	t.Run("limit override from Envoy", func(t *testing.T) {
		d := desc("api_key", "k5")
		d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR}
		req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ds(d)}
		resp := h.call(t, req)
		if cl := resp.Statuses[0].GetCurrentLimit(); cl.GetRequestsPerUnit() != 1 || cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR {
			t.Fatalf("override: current limit %v; want 1/hour", cl)
		}
		if resp = h.call(t, req); codesOf(resp) != "OVER_LIMIT:OVER_LIMIT" {
			t.Fatalf("second request under a 1/hour override: %s", codesOf(resp))
		}
	})
	t.Run("unit_multiplier reported", func(t *testing.T) {
		resp := h.call(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ds(desc("window", "w"))})
		cl := resp.Statuses[0].GetCurrentLimit()
		if cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND || cl.GetUnitMultiplier().GetValue() != 30 {
			t.Fatalf("current limit %v; want 2 per 30 seconds", cl)
		}
		if got := headers(resp)["RateLimit-Policy"]; got != `"thirty-seconds";q=2;w=30` {
			t.Errorf("RateLimit-Policy = %q", got)
		}
	})
}

func TestBadRequests(t *testing.T) {
	h := start(t, limiter.Options{})
	many := make([]*ratelimitv3.RateLimitDescriptor, limiter.MaxDescriptors+1)
	for i := range many {
		many[i] = desc("k", "v")
	}
	wide := &ratelimitv3.RateLimitDescriptor{}
	for range limiter.MaxEntries + 1 {
		wide.Entries = append(wide.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: "k", Value: "v"})
	}
	negative := desc("api_key", "x")
	negative.IsNegativeHits = true
	tests := []struct {
		name string
		req  *rlsv3.RateLimitRequest
		msg  string
	}{
		{"empty domain", &rlsv3.RateLimitRequest{Descriptors: many[:1]}, "domain is empty"},
		{"no entries", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{}}}, "descriptor 0: no entries"},
		{"empty key", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("", "v")}}, "empty key"},
		{"too many descriptors", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: many}, "65 descriptors; at most 64"},
		{"too many entries", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{wide}}, "17 entries; at most 16"},
		{"nil descriptor", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{nil}}, "no entries"},
		{"negative hits", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{negative}}, "is_negative_hits"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := h.store.calls.Load()
			_, err := h.client.ShouldRateLimit(context.Background(), tt.req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tt.msg) {
				t.Fatalf("ShouldRateLimit = %v; want InvalidArgument containing %q", err, tt.msg)
			}
			if h.store.calls.Load() != before {
				t.Error("a bad request reached the store")
			}
		})
	}
}

// TestFlagCache: once the store says a key is over limit, a flood on it
// costs no store calls until the retry time, and is admitted again then.
func TestFlagCache(t *testing.T) {
	c, err := cache.New(1000)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	h := start(t, limiter.Options{Cache: c, Metrics: limiter.NewMetrics(reg)})
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("api_key", "flood"), desc("remote_address", "flood")}}
	for range 3 {
		h.call(t, req)
	}
	resp := h.call(t, req)
	if codesOf(resp) != "OVER_LIMIT:OK,OVER_LIMIT" {
		t.Fatalf("fourth request: %s", codesOf(resp))
	}
	before := h.store.calls.Load()
	for range 1000 {
		if resp := h.call(t, req); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || headers(resp)["Retry-After"] != "45" {
			t.Fatalf("flood: %s %v", codesOf(resp), headers(resp))
		}
	}
	if n := h.store.calls.Load() - before; n != 0 {
		t.Fatalf("a flood of 1000 over-limit requests made %d store calls; want 0", n)
	}
	for _, c := range []struct {
		tier   limiter.Source
		result string
		want   float64
	}{{limiter.SourceStore, "ok", 3}, {limiter.SourceStore, "over_limit", 1}, {limiter.SourceFlagCache, "over_limit", 1000}} {
		if got := counter(t, reg, "sluice_tier_decisions_total", "tier", string(c.tier), "result", c.result); got != c.want {
			t.Errorf("sluice_tier_decisions_total{tier=%q,result=%q} = %v; want %v", c.tier, c.result, got, c.want)
		}
	}
	// 1 µs before the retry time the cache still answers; at it, the store
	// decides again and admits.
	h.store.now.Add(45_000_000 - 1)
	if resp := h.call(t, req); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || h.store.calls.Load() != before {
		t.Fatalf("just before the retry time: %s, %d store calls", codesOf(resp), h.store.calls.Load()-before)
	}
	h.store.now.Add(1)
	if resp := h.call(t, req); codesOf(resp) != "OK:OK,OK" {
		t.Fatalf("at the retry time: %s; want admitted", codesOf(resp))
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestReloadPurgesFlags: flags repeat answers of the limits they were
// decided under; once the config changes they are dropped, so a raised
// limit applies at once.
func TestReloadPurgesFlags(t *testing.T) {
	c, err := cache.New(1000)
	if err != nil {
		t.Fatal(err)
	}
	var current atomic.Pointer[config.Config]
	current.Store(mustConfig(t, testConfig))
	h := start(t, limiter.Options{Cache: c, Config: current.Load})
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("remote_address", "x")}}
	for range 4 {
		h.call(t, req)
	}
	if c.Len() != 1 {
		t.Fatalf("%d flags after going over the limit; want 1", c.Len())
	}
	current.Store(mustConfig(t, strings.Replace(testConfig, "requests_per_unit: 3, name: per-client", "requests_per_unit: 30, name: per-client", 1)))
	if resp := h.call(t, req); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("after raising the limit to 30: %s; want OK (the old flag dropped)", codesOf(resp))
	}
}

// TestLongValuesAreLimited: a value past limiter.MaxValueLen is counted by its
// digest, not refused: padding a header is no way around a limit.
func TestLongValuesAreLimited(t *testing.T) {
	h := start(t, limiter.Options{})
	long := strings.Repeat("k", limiter.MaxValueLen+1)
	other := strings.Repeat("k", limiter.MaxValueLen) + "x"
	req := func(v string) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("remote_address", v)}}
	}
	for range 3 {
		h.call(t, req(long))
	}
	if resp := h.call(t, req(long)); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("a long value past its limit of 3: %s; want OVER_LIMIT", codesOf(resp))
	}
	if resp := h.call(t, req(other)); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("another long value: %s; want its own counter, OK", codesOf(resp))
	}
	if got, want := limiter.EntryValue(long), limiter.EntryValue(other); got == want || len(got) != len(want) || got[0] != 0 {
		t.Errorf("limiter.EntryValue: %q, %q; want distinct fixed-length digests led by NUL", got, want)
	}
}

// TestFlagsOnlyForOneUnit: a costly request refused leaves room for cheap
// ones, so it flags nothing; and a flagged request's shadow limits are
// reported as not asked, not as over limit.
func TestFlagsOnlyForOneUnit(t *testing.T) {
	c, err := cache.New(1000)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	h := start(t, limiter.Options{Cache: c, Metrics: limiter.NewMetrics(reg)})
	cost := func(n uint32) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: n, Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("api_key", "k")}}
	}
	h.call(t, cost(10)) // 10 of the burst of 20 left
	if resp := h.call(t, cost(15)); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("15 units with 10 left: %s; want OVER_LIMIT", codesOf(resp))
	}
	if resp := h.call(t, cost(1)); resp.OverallCode != rlsv3.RateLimitResponse_OK || c.Len() != 0 {
		t.Errorf("one unit after a refused 15 with 10 left: %s with %d flags; want OK, nothing flagged", codesOf(resp), c.Len())
	}

	withShadow := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		desc("remote_address", "s"), desc("generic_key", "shadowed"),
	}}
	for range 4 {
		h.call(t, withShadow) // the fourth is over per-client's 3 and flags it
	}
	shadowed := func() float64 {
		return counter(t, reg, "sluice_decisions_total", "domain", "edge", "limit", "shadow", "result", "shadow_over_limit")
	}
	before := shadowed()
	resp := h.call(t, withShadow) // from the flag cache
	after := shadowed()
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || after != before {
		t.Errorf("a flag-cache answer: %s, shadow_over_limit %v -> %v; want OVER_LIMIT and the shadow limit not counted", codesOf(resp), before, after)
	}
}

// counter is the value of metric name in reg with the labels given as
// name, value pairs (0 when no such series).
func counter(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue metrics
				}
			}
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return 0
}
