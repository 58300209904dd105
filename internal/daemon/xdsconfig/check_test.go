package xdsconfig

import (
	"fmt"
	"strings"
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicehq/sluice/internal/testkit/xdstest"
	"github.com/sluicehq/sluice/pkg/config"
)

func anys(t testing.TB, rcs ...*rlsconf.RateLimitConfig) []*anypb.Any {
	t.Helper()
	out := make([]*anypb.Any, len(rcs))
	for i, rc := range rcs {
		a, err := anypb.New(rc)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = a
	}
	return out
}

// wide is domain gateway's config named name: n sibling descriptors
// under key client, keys k0, k1, ...
func wide(name string, n int) *rlsconf.RateLimitConfig {
	ds := make([]*rlsconf.RateLimitDescriptor, n)
	for i := range ds {
		ds[i] = &rlsconf.RateLimitDescriptor{Key: "k" + fmt.Sprint(i)}
	}
	return &rlsconf.RateLimitConfig{Name: name, Domain: "gateway", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "client", Descriptors: ds}}}
}

// TestPushBounds: a response's resources are held to the bounds of config
// files, on the protobuf; each refusal names the resource and the bound,
// within a bounded message (it becomes a NACK, a log line, /readyz).
func TestPushBounds(t *testing.T) {
	long := strings.Repeat("x", config.MaxScalarBytes+1)
	many := make([]*rlsconf.RateLimitConfig, config.MaxFiles+1)
	for i := range many {
		many[i] = xdstest.LimitConfig(fmt.Sprint("c", i), 1)
		many[i].Domain = fmt.Sprint("d", i)
	}
	withKey := func(key string) *rlsconf.RateLimitConfig {
		rc := xdstest.LimitConfig("long", 1)
		rc.Descriptors[0].Key = key
		return rc
	}
	named := func(name string) *rlsconf.RateLimitConfig {
		rc := xdstest.LimitConfig("x", 1)
		rc.Name = name
		return rc
	}
	wrongType, err := anypb.New(&rlsconf.RateLimitPolicy{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		resources []*anypb.Any
		sizes     config.SizeBounds
		want      []string
	}{
		{"none", nil, config.SizeBounds{}, []string{"no RateLimitConfig"}},
		{"too many", anys(t, many...), config.SizeBounds{}, []string{"1025 resources", "1024"}},
		{"a resource too large", anys(t, xdstest.LimitConfig("ok", 1), wide("wide", 100)), config.SizeBounds{MaxFileBytes: 200},
			[]string{`resource 1 ("wide")`, "bound of 200"}},
		{"too large together", anys(t, xdstest.LimitConfig("a", 1), named("b")), config.SizeBounds{MaxTotalBytes: int64(2*proto.Size(named("b")) - 1)},
			[]string{"add up to", fmt.Sprint("bound of ", 2*proto.Size(named("b"))-1)}},
		{"65 deep", anys(t, xdstest.DeepConfig("deep", config.MaxDepth+1)), config.SizeBounds{}, []string{"xds:deep.yaml", "nested more than 64 deep"}},
		{"9000 deep", anys(t, xdstest.DeepConfig("deep", 9000)), config.SizeBounds{}, []string{`resource 0 ("deep")`, "64 deep"}},
		{"too many nodes", anys(t, wide("wide", config.MaxNodes/3)), config.SizeBounds{MaxFileBytes: 8 << 20},
			[]string{"xds:wide.yaml", fmt.Sprint(config.MaxNodes)}},
		{"a long key", anys(t, withKey(long)), config.SizeBounds{}, []string{"xds:long.yaml", "key of 4097 bytes", "4096"}},
		{"a long name", anys(t, named(strings.Repeat("n", config.MaxNameBytes+1))), config.SizeBounds{}, []string{"256 bytes", "255"}},
		{"a long domain", anys(t, &rlsconf.RateLimitConfig{Name: "n", Domain: long}), config.SizeBounds{}, []string{"domain of 4097 bytes"}},
		{"wrong type", []*anypb.Any{wrongType}, config.SizeBounds{}, []string{"type", resource.RateLimitConfigType}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, err := New(Options{Server: "127.0.0.1:1", Sizes: tc.sizes})
			if err != nil {
				t.Fatal(err)
			}
			_, err = src.build(tc.resources)
			if err == nil {
				t.Fatalf("accepted; want an error naming %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %.300q does not name %q", err, w)
				}
			}
			if len(err.Error()) > 2<<10 {
				t.Errorf("error of %d bytes", len(err.Error()))
			}
		})
	}
	// At the bounds: accepted.
	src, _ := New(Options{Server: "127.0.0.1:1"})
	if _, err := src.build(anys(t, xdstest.DeepConfig("deep", config.MaxDepth))); err != nil {
		t.Errorf("descriptors %d deep: %v", config.MaxDepth, err)
	}
}

// TestWalkChargesAsParse: check counts the nodes a resource becomes as
// the config walk charges them, so a resource check lets through is never
// refused for its size by the walk, and one just past it is refused by
// check, before it is converted.
func TestWalkChargesAsParse(t *testing.T) {
	rc := wide("wide", 1)
	var w walk
	if err := w.config(rc); err != nil {
		t.Fatal(err)
	}
	fixed, per := w.nodes-3, 3 // wide's own nodes, and each sibling's: a mapping and its key
	n := (config.MaxNodes - fixed) / per
	src, _ := New(Options{Server: "127.0.0.1:1", Sizes: config.SizeBounds{MaxFileBytes: 8 << 20, MaxTotalBytes: 8 << 20}})
	if _, err := src.build(anys(t, wide("wide", n))); err != nil {
		t.Errorf("%d siblings (%d nodes): %v", n, fixed+per*n, err)
	}
	_, err := src.build(anys(t, wide("wide", n+1)))
	if err == nil || !strings.Contains(err.Error(), "once converted") {
		t.Errorf("%d siblings (%d nodes): %v; want check's refusal", n+1, fixed+per*(n+1), err)
	}
}

// TestDocumentMatchesFile: a resource converted to its YAML tree builds
// the config its YAML file does: the same limits, at the same paths.
func TestDocumentMatchesFile(t *testing.T) {
	rc := &rlsconf.RateLimitConfig{Name: "edge/limits", Domain: "edge", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "remote_address", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 5, Name: "per-ip"}},
		{Key: "path", Value: "/api/*", ShadowMode: true, DetailedMetric: true,
			RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: 100,
				Replaces: []*rlsconf.RateLimitReplace{{Name: "per-ip"}}}},
		{Key: "user", Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "tier", Value: "free", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_DAY, RequestsPerUnit: 0}},
			{Key: "tier", Value: "paid", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true}},
		}},
		// The fields of go-control-plane's ratelimit module after v0.1.0.
		{Key: "plan", Value: "trial", QuotaMode: true, Metadata: mustStruct(t, map[string]any{
			"team": "growth", "weight": 2.5, "beta": true, "tags": []any{"a", "b"}, "owner": map[string]any{"name": "x"}, "none": nil,
		}), RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: 7}},
	}}
	file := `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 5, name: per-ip}
  - key: path
    value: /api/*
    shadow_mode: true
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 100, replaces: [{name: per-ip}]}
  - key: user
    descriptors:
      - {key: tier, value: free, rate_limit: {unit: day, requests_per_unit: 0}}
      - {key: tier, value: paid, rate_limit: {unlimited: true}}
  - key: plan
    value: trial
    quota_mode: true
    metadata: {team: growth, weight: 2.5, beta: true, tags: [a, b], owner: {name: x}, none: null}
    rate_limit: {unit: minute, requests_per_unit: 7}
`
	src, _ := New(Options{Server: "127.0.0.1:1"})
	got, err := src.build(anys(t, rc))
	if err != nil {
		t.Fatal(err)
	}
	want, err := config.Parse(map[string][]byte{"f.yaml": []byte(file)})
	if err != nil {
		t.Fatal(err)
	}
	describe := func(c *config.Config) []string {
		var out []string
		for _, l := range c.Limits() {
			out = append(out, fmt.Sprintf("%s %s %v shadow=%v detailed=%v replaces=%v quota=%v metadata=%v", l.Path, l.RateLimit, l.RateLimit.Unlimited || l.RateLimit.Blocks(),
				l.ShadowMode, l.DetailedMetric, l.Replaces, l.QuotaMode, l.Metadata))
		}
		return out
	}
	g, w := describe(got), describe(want)
	if strings.Join(g, "\n") != strings.Join(w, "\n") {
		t.Errorf("from xDS:\n%s\nfrom the file:\n%s", strings.Join(g, "\n"), strings.Join(w, "\n"))
	}
	if f := got.Limits()[0].File; f != "xds:edge_limits.yaml" {
		t.Errorf("limits name their source %q; want xds:edge_limits.yaml", f)
	}
	if f := fileName("a/b\nc\u202ed e"); f != "a_b_c_d e" {
		t.Errorf("fileName: %q; want a_b_c_d e", f)
	}
	// The version digests the resources' bytes: the same push, the same version.
	again, _ := src.build(anys(t, proto.Clone(rc).(*rlsconf.RateLimitConfig)))
	if again.Version() != got.Version() {
		t.Errorf("the same resource built twice: versions %s and %s", got.Version(), again.Version())
	}
}

func mustStruct(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
