package envoy_test

import (
	"os"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/sluicehq/sluice/internal/testkit/envoyrl"
	"github.com/sluicehq/sluice/pkg/config"
)

// TestTokenBudgetRoute: the token-budget route is Envoy's API (validated
// all the way down, nothing deprecated), asks first with a check that
// costs nothing and charges at stream end from dynamic metadata, and its
// descriptor selects a limit that counts refused charges.
func TestTokenBudgetRoute(t *testing.T) {
	data, err := os.ReadFile("token-budget-route.yaml")
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
	route := rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute()
	limits := route.GetRateLimits()
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
	cfg, err := config.Load(configDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, rl := range limits {
		key := rl.GetActions()[0].GetRequestHeaders().GetDescriptorKey()
		l := cfg.Match("ai", []config.Entry{{Key: key, Value: "tenant-a"}})
		if l == nil || !l.RateLimit.CountRefused {
			t.Errorf("descriptor %q selects %v in domain ai; want a limit with count_refused", key, l)
		}
	}
}
