package config

import (
	"slices"
	"testing"
)

func TestBucketEntries(t *testing.T) {
	cfg, err := Parse(map[string][]byte{"b.yaml": []byte(`domain: quota
descriptors:
  - key: name
    value: api
    descriptors:
      - key: tenant
        value: acme
        rate_limit: {name: acme-api, unit: minute, requests_per_unit: 50}
      - key: tenant
        rate_limit: {name: per-tenant-api, unit: minute, requests_per_unit: 10}
  - key: tenant
    rate_limit: {name: per-tenant, unit: minute, requests_per_unit: 100}
  - key: path
    value: "/v1/*"
    rate_limit: {name: v1, unit: second, requests_per_unit: 5}
`)})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		bucket map[string]string
		want   []Entry
		limit  string // "" for none
	}{
		{"nested, by the file's order", map[string]string{"tenant": "zed", "name": "api"}, []Entry{{"name", "api"}, {"tenant", "zed"}}, "per-tenant-api"},
		{"exact before key-only", map[string]string{"tenant": "acme", "name": "api"}, []Entry{{"name", "api"}, {"tenant", "acme"}}, "acme-api"},
		{"a top-level key alone", map[string]string{"tenant": "zed"}, []Entry{{"tenant", "zed"}}, "per-tenant"},
		{"a wildcard value", map[string]string{"path": "/v1/users"}, []Entry{{"path", "/v1/users"}}, "v1"},
		{"a value no descriptor takes", map[string]string{"path": "/v2/users"}, nil, ""},
		{"an entry left over", map[string]string{"tenant": "zed", "colour": "red"}, nil, ""},
		{"a path ending on no rate_limit", map[string]string{"name": "api"}, []Entry{{"name", "api"}}, ""},
		{"empty", map[string]string{}, nil, ""},
	}
	for _, c := range cases {
		entries, lim := cfg.BucketEntries("quota", c.bucket)
		if !slices.Equal(entries, c.want) {
			t.Errorf("%s: entries %v; want %v", c.name, entries, c.want)
		}
		got := ""
		if lim != nil {
			got = lim.RateLimit.Name
		}
		if got != c.limit {
			t.Errorf("%s: limit %q; want %q", c.name, got, c.limit)
		}
		// The same limit as the descriptor in that order.
		if entries != nil && cfg.Match("quota", entries) != lim {
			t.Errorf("%s: not the limit Match finds for %v", c.name, entries)
		}
	}
	if e, l := cfg.BucketEntries("other", map[string]string{"tenant": "a"}); e != nil || l != nil {
		t.Errorf("an unknown domain: %v %v", e, l)
	}
	big := map[string]string{}
	for i := range MaxBucketEntries + 1 {
		big[string(rune('a'+i%26))+string(rune('a'+i/26))] = "v"
	}
	if e, _ := cfg.BucketEntries("quota", big); e != nil {
		t.Error("a bucket past MaxBucketEntries read")
	}
}
