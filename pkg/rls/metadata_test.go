package rls

import (
	"reflect"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/limiter"
)

func request(d ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: d}
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
	plain := start(t, limiter.Options{})
	if md := plain.call(t, request(desc("api_key", "a"))).GetDynamicMetadata(); md != nil {
		t.Errorf("dynamic metadata without the option: %v", md)
	}
	// A descriptor's own hits_addend and override are said with it.
	d := desc("nothing", "y")
	d.HitsAddend = wrapperspb.UInt64(3)
	d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 4, Unit: typev3.RateLimitUnit_MINUTE}
	got = h.call(t, request(d)).GetDynamicMetadata().AsMap()
	sent := got["descriptors"].([]any)[0].(map[string]any)
	if limit, _ := sent["limit"].(string); sent["hitsAddend"] != float64(3) || !strings.Contains(limit, "requests_per_unit:4") && !strings.Contains(limit, "requests_per_unit: 4") {
		t.Errorf("descriptor with hits_addend 3 and an override: %v", sent)
	}
}
