package rls

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/limiter"
)

const overrideConfig = `domain: edge
descriptors:
  - key: log
    rate_limit: {unit: hour, requests_per_unit: 10000, algorithm: sliding_log}
  - key: bucket
    rate_limit: {unit: minute, requests_per_unit: 20}
`

func override(rpu uint32, unit typev3.RateLimitUnit, mult uint32) *ratelimitv3.RateLimitDescriptor_RateLimitOverride {
	o := &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
	if mult > 0 {
		o.UnitMultiplier = wrapperspb.UInt32(mult)
	}
	return o
}

// TestOverrideCannotLiftTheSlidingLogCap: an override of 2^32−1 on a
// sliding_log limit, with a cost to match, must neither allocate a log of
// that size nor be waved through: it is decided, as the config's own advice
// for limits past the cap says, by the sliding window.
func TestOverrideCannotLiftTheSlidingLogCap(t *testing.T) {
	cfg := mustConfig(t, overrideConfig)
	h := start(t, limiter.Options{Config: func() *config.Config { return cfg }})
	d := desc("log", "attacker")
	d.Limit = override(1<<32-1, typev3.RateLimitUnit_HOUR, 0)
	d.HitsAddend = wrapperspb.UInt64(1<<32 - 1)
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	resp := h.call(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("decision took %v", took)
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Errorf("one request allocated %d MB", grew>>20)
	}
	if codesOf(resp) != "OK:OK" {
		t.Fatalf("codes = %s; want the 2^32−1 hits admitted under a 2^32−1 limit", codesOf(resp))
	}
	if got := headers(resp)["RateLimit-Policy"]; !strings.Contains(got, "q=4294967295;w=3600") {
		t.Errorf("RateLimit-Policy = %q; want the override's quota and window", got)
	}
	// The hits were counted: one more is refused.
	d.HitsAddend = wrapperspb.UInt64(1)
	if resp := h.call(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}}); codesOf(resp) != "OVER_LIMIT:OVER_LIMIT" {
		t.Fatalf("after using the whole override: %s; want OVER_LIMIT", codesOf(resp))
	}
}

// TestOverrideWindows: a window past the supported maximum is refused as a
// bad request before it reaches a header or the store; the longest allowed
// one is reported without overflowing.
func TestOverrideWindows(t *testing.T) {
	h := start(t, limiter.Options{})
	for _, mult := range []uint32{101, 290, 293, 1<<32 - 1} {
		d := desc("api_key", "w")
		d.Limit = override(5, typev3.RateLimitUnit_YEAR, mult)
		before := h.store.calls.Load()
		_, err := h.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "longer than the maximum") {
			t.Errorf("YEAR × %d: %v; want InvalidArgument naming the maximum", mult, err)
		}
		if h.store.calls.Load() != before {
			t.Errorf("YEAR × %d reached the store", mult)
		}
	}
	d := desc("api_key", "w")
	d.Limit = override(5, typev3.RateLimitUnit_YEAR, 100)
	resp := h.call(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
	if got, want := headers(resp)["RateLimit-Policy"], `;q=5;w=3153600000`; !strings.HasSuffix(got, want) {
		t.Errorf("RateLimit-Policy = %q; want it to end %q", got, want)
	}
	if r := resp.Statuses[0].GetDurationUntilReset().AsDuration(); r <= 0 || r > config.MaxWindow {
		t.Errorf("duration_until_reset = %v; want within (0, %v]", r, config.MaxWindow)
	}
}

// TestOverrideOfZeroBlocks: an override of 0 requests blocks, as 0 does
// in a config file, rather than failing the request (which Envoy would
// admit by default).
func TestOverrideOfZeroBlocks(t *testing.T) {
	h := start(t, limiter.Options{})
	d := desc("api_key", "z")
	d.Limit = override(0, typev3.RateLimitUnit_SECOND, 0)
	resp := h.call(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
	if codesOf(resp) != "OVER_LIMIT:OVER_LIMIT" {
		t.Fatalf("override of 0: %s; want OVER_LIMIT", codesOf(resp))
	}
}

// TestOverrideSeriesBounded: overrides with many different windows add
// no metric series beyond the limit they override.
func TestOverrideSeriesBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := start(t, limiter.Options{Metrics: limiter.NewMetrics(reg)})
	for mult := uint32(1); mult <= 300; mult++ {
		for _, key := range []string{"api_key", "unconfigured"} {
			d := desc(key, "s")
			d.Limit = override(5, typev3.RateLimitUnit_SECOND, mult)
			h.call(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
		}
	}
	if n := testutil.CollectAndCount(reg, "sluice_decisions_total"); n != 2 {
		t.Fatalf("sluice_decisions_total has %d series after 300 override windows on two descriptors; want 2", n)
	}
}
