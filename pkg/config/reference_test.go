package config

import (
	"reflect"
	"testing"
)

// referenceFields uses each field of the reference's current YAML that
// came after sluice's first format: share_threshold (on a wildcard, also
// above the limit), value_to_metric, quota_mode and descriptor metadata.
const referenceFields = `domain: shop
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: route
    value: api/*
    share_threshold: true
    descriptors:
      - key: method
        value_to_metric: true
        rate_limit: {unit: minute, requests_per_unit: 60}
  - key: service
    value: checkout
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
    metadata:
      service_with_quota:
        name: checkout
        tier: 2
        tags: [eu, "web"]
`

func TestReferenceFields(t *testing.T) {
	cfg, err := Parse(map[string][]byte{"shop.yaml": []byte(referenceFields)})
	if err != nil {
		t.Fatal(err)
	}
	files := cfg.Match("shop", []Entry{{"files", "files/a.txt"}})
	if files == nil || !reflect.DeepEqual(files.Shared, []string{"files/*"}) || files.Metric != nil {
		t.Fatalf("files/*: %+v; want Shared [files/*], no Metric", files)
	}
	method := cfg.Match("shop", []Entry{{"route", "api/users"}, {"method", "GET"}})
	if method == nil || !reflect.DeepEqual(method.Shared, []string{"api/*", ""}) ||
		!reflect.DeepEqual(method.Metric, []MetricEntry{{Value: "api/*"}, {Runtime: true}}) {
		t.Fatalf("route api/* method: %+v; want Shared [api/* \"\"], Metric [api/* runtime]", method)
	}
	svc := cfg.Match("shop", []Entry{{"service", "checkout"}})
	want := map[string]any{"service_with_quota": map[string]any{"name": "checkout", "tier": float64(2), "tags": []any{"eu", "web"}}}
	if svc == nil || !svc.QuotaMode || !reflect.DeepEqual(svc.Metadata, want) {
		t.Fatalf("service checkout: %+v; want quota mode and metadata %v", svc, want)
	}
}
