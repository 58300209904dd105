package envoy_test

import (
	"os"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/testkit/envoyrl"
	"github.com/sluicehq/sluice/pkg/config"
)

// TestTokenBudgetRoute: the token-budget route is Envoy's API (validated
// all the way down, nothing deprecated), asks first with a check that
// costs nothing and charges at stream end from dynamic metadata, and its
// descriptor selects a limit that counts refused charges.
func TestTokenBudgetRoute(t *testing.T) {
	limits := routeRateLimits(t, "token-budget-route.yaml")
	if len(limits) != 2 {
		t.Fatalf("%d rate_limits; want the check and the charge", len(limits))
	}
	check, charge := limits[0], limits[1]
	if check.GetApplyOnStreamDone() || check.GetHitsAddend().GetNumber().GetValue() != 0 || check.GetHitsAddend().GetNumber() == nil {
		t.Errorf("the request-time entry is not a check costing 0: %v", check)
	}
	if !charge.GetApplyOnStreamDone() || charge.GetHitsAddend().GetFormat() == "" {
		t.Errorf("the stream-end entry does not charge from metadata: %v", charge)
	}
	for i, l := range aiLimits(t, limits) {
		if l == nil || !l.RateLimit.CountRefused {
			t.Errorf("rate_limits[%d] selects %v in domain ai; want a limit with count_refused", i, l)
		}
	}
}

// aiLimits is the limit of envoy/ratelimit-config's domain ai that each
// of limits' descriptors (one request_headers action) selects.
func aiLimits(t *testing.T, limits []*routev3.RateLimit) []*config.Limit {
	t.Helper()
	cfg, err := config.Load(configDir)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]*config.Limit, len(limits))
	for i, rl := range limits {
		key := rl.GetActions()[0].GetRequestHeaders().GetDescriptorKey()
		out[i] = cfg.Match("ai", []config.Entry{{Key: key, Value: "tenant-a"}})
	}
	return out
}

// routeRateLimits reads the RouteConfiguration file, holds it to Envoy's
// protos all the way down (nothing deprecated), and returns its first
// route's rate_limits: the rate limit filter's per-route ones
// (RateLimitPerRoute), the only list where Envoy honours hits_addend.
func routeRateLimits(t *testing.T, file string) []*routev3.RateLimit {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	rc := &routev3.RouteConfiguration{}
	if err := envoyrl.ParseYAML(data, rc); err != nil {
		t.Fatal(err)
	}
	for _, err := range deepCheck(rc) {
		t.Error(err)
	}
	route := rc.GetVirtualHosts()[0].GetRoutes()[0]
	if len(route.GetRoute().GetRateLimits()) > 0 {
		t.Errorf("%s: RouteAction.rate_limits set; Envoy ignores their hits_addend: use the filter's per-route config", file)
	}
	per := &ratelimitv3.RateLimitPerRoute{}
	if err := route.GetTypedPerFilterConfig()["envoy.filters.http.ratelimit"].UnmarshalTo(per); err != nil {
		t.Fatalf("%s: the route's envoy.filters.http.ratelimit config: %v", file, err)
	}
	return per.GetRateLimits()
}
