package config

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// matchConfig exercises every kind of match. Each limit's name says which
// descriptor it is, so tests can assert on PolicyName.
const matchConfig = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {name: any-ip, unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {name: one-ip, unit: second, requests_per_unit: 1}
  - key: remote_address
    value: "10.*"
    rate_limit: {name: ten-net, unit: second, requests_per_unit: 100}
  - key: remote_address
    value: "10.1.*"
    rate_limit: {name: ten-one-net, unit: second, requests_per_unit: 200}

  - key: path
    value: "/api/*"
    rate_limit: {name: api-prefix, unit: minute, requests_per_unit: 60}
  - key: path
    value: "*/admin"
    rate_limit: {name: admin-suffix, unit: minute, requests_per_unit: 5}
  - key: path
    value: "/v*/users/*/posts"
    rate_limit: {name: posts-middle, unit: minute, requests_per_unit: 7}
  - key: path
    value: "/api/v2/*"
    rate_limit: {name: api-v2, unit: minute, requests_per_unit: 120}

  # Equally specific patterns: the first in the file wins.
  - key: tie
    value: "x*"
    rate_limit: {name: tie-first, unit: second, requests_per_unit: 1}
  - key: tie
    value: "*y"
    rate_limit: {name: tie-second, unit: second, requests_per_unit: 1}
  - key: star
    value: "*"
    rate_limit: {name: star-any, unit: second, requests_per_unit: 1}
  - key: star
    rate_limit: {name: star-key-only, unit: second, requests_per_unit: 1}

  # A limit half way down, and a deeper one.
  - key: user
    rate_limit: {name: user, unit: hour, requests_per_unit: 1000}
    descriptors:
      - key: plan
        value: free
        rate_limit: {name: user-free, unit: hour, requests_per_unit: 10}
      - key: plan
        descriptors:
          - key: region
            rate_limit: {name: user-plan-region, unit: hour, requests_per_unit: 50}

  # A placeholder with no limit of its own.
  - key: tenant
    value: acme
    descriptors:
      - key: method
        value: POST
        shadow_mode: true
        detailed_metric: true
        rate_limit:
          name: acme-post
          unit: second
          requests_per_unit: 3
          replaces: [{name: any-ip}, {name: api-prefix}]
      - key: method
        rate_limit: {unit: second, requests_per_unit: 30}
  # An exact match that leads nowhere does not fall back to the wildcard.
  - key: tenant
    value: "a*"
    descriptors:
      - key: method
        rate_limit: {name: a-tenants, unit: second, requests_per_unit: 1}
      - key: region
        rate_limit: {name: a-region, unit: second, requests_per_unit: 1}
`

func TestMatch(t *testing.T) {
	c := parseOne(t, matchConfig)
	tests := []struct {
		name    string
		domain  string
		entries []Entry
		want    string // PolicyName, or "" for no match
	}{
		{"key only", "edge", []Entry{{"remote_address", "1.2.3.4"}}, "any-ip"},
		{"exact beats wildcard and key only", "edge", []Entry{{"remote_address", "50.0.0.5"}}, "one-ip"},
		{"wildcard beats key only", "edge", []Entry{{"remote_address", "10.9.9.9"}}, "ten-net"},
		{"longer wildcard wins", "edge", []Entry{{"remote_address", "10.1.2.3"}}, "ten-one-net"},
		{"wildcard at the end", "edge", []Entry{{"path", "/api/users"}}, "api-prefix"},
		{"wildcard matches empty", "edge", []Entry{{"path", "/api/"}}, "api-prefix"},
		{"wildcard at the start", "edge", []Entry{{"path", "/internal/admin"}}, "admin-suffix"},
		{"wildcards in the middle", "edge", []Entry{{"path", "/v1/users/42/posts"}}, "posts-middle"},
		{"middle wildcard needs its literal tail", "edge", []Entry{{"path", "/v1/users/42/likes"}}, ""},
		{"most specific of several matches", "edge", []Entry{{"path", "/api/v2/admin"}}, "api-v2"},
		{"no pattern and no key only", "edge", []Entry{{"path", "/other"}}, ""},
		{"tie goes to the first in the file", "edge", []Entry{{"tie", "xy"}}, "tie-first"},
		{"tie loser still matches alone", "edge", []Entry{{"tie", "zy"}}, "tie-second"},
		{"star beats key only", "edge", []Entry{{"star", ""}}, "star-any"},
		{"limit half way down, request ends there", "edge", []Entry{{"user", "u1"}}, "user"},
		{"nested exact", "edge", []Entry{{"user", "u1"}, {"plan", "free"}}, "user-free"},
		{"request ends on a node without a limit", "edge", []Entry{{"user", "u1"}, {"plan", "pro"}}, ""},
		{"three levels", "edge", []Entry{{"user", "u1"}, {"plan", "pro"}, {"region", "eu"}}, "user-plan-region"},
		{"longer than the config", "edge", []Entry{{"user", "u1"}, {"plan", "free"}, {"region", "eu"}}, ""},
		{"limit half way does not match a longer request", "edge", []Entry{{"remote_address", "1.2.3.4"}, {"path", "/api/x"}}, ""},
		{"placeholder alone", "edge", []Entry{{"tenant", "acme"}}, ""},
		{"under a placeholder", "edge", []Entry{{"tenant", "acme"}, {"method", "POST"}}, "acme-post"},
		{"key only under a placeholder", "edge", []Entry{{"tenant", "acme"}, {"method", "GET"}}, "edge.tenant_acme.method"},
		{"wildcard placeholder", "edge", []Entry{{"tenant", "abc"}, {"method", "GET"}}, "a-tenants"},
		{"no backtracking from an exact match", "edge", []Entry{{"tenant", "acme"}, {"region", "eu"}}, ""},
		{"the wildcard sibling would have matched", "edge", []Entry{{"tenant", "abc"}, {"region", "eu"}}, "a-region"},
		{"key mismatch", "edge", []Entry{{"nothing", "x"}}, ""},
		{"keys are case sensitive", "edge", []Entry{{"Remote_Address", "1.2.3.4"}}, ""},
		{"unknown domain", "nowhere", []Entry{{"remote_address", "1.2.3.4"}}, ""},
		{"no entries", "edge", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ""
			if l := c.Match(tt.domain, tt.entries); l != nil {
				got = l.PolicyName()
				if l.Domain != tt.domain {
					t.Errorf("Limit.Domain = %q; want %q", l.Domain, tt.domain)
				}
			}
			if got != tt.want {
				t.Errorf("Match(%q, %v) = %q; want %q", tt.domain, tt.entries, got, tt.want)
			}
		})
	}
}

func TestMatchCarriesDescriptorFields(t *testing.T) {
	c := parseOne(t, matchConfig)
	l := c.Match("edge", []Entry{{"tenant", "acme"}, {"method", "POST"}})
	if l == nil {
		t.Fatal("Match = nil")
	}
	want := Limit{Domain: "edge", Path: "edge.tenant_acme.method_POST", ShadowMode: true, DetailedMetric: true,
		Replaces: []string{"any-ip", "api-prefix"}, File: "f.yaml", Line: 58}
	if l.Path != want.Path || l.ShadowMode != want.ShadowMode || l.DetailedMetric != want.DetailedMetric ||
		!slices.Equal(l.Replaces, want.Replaces) || l.File != want.File || l.Line != want.Line {
		t.Errorf("Match = %+v; want %+v", *l, want)
	}
	if l.PolicyName() != "acme-post" {
		t.Errorf("PolicyName() = %q; want acme-post", l.PolicyName())
	}
	plain := c.Match("edge", []Entry{{"remote_address", "1.2.3.4"}})
	if plain.ShadowMode || plain.DetailedMetric || plain.Replaces != nil {
		t.Errorf("Match(remote_address) = %+v; want no shadow, detail or replaces", *plain)
	}
	if l := c.Match("edge", []Entry{{"path", "/api/x"}}); l.Path != "edge.path_/api/*" {
		t.Errorf("wildcard Path = %q; want edge.path_/api/*", l.Path)
	}
}

func TestMatchNilConfig(t *testing.T) {
	var c *Config
	if l := c.Match("d", []Entry{{"k", "v"}}); l != nil {
		t.Errorf("nil Config Match = %v; want nil", l)
	}
	if c.Domains() != nil || c.Limits() != nil || c.Version() != "" || c.HasDomain("d") {
		t.Error("nil Config has domains, limits or a version")
	}
}

func TestGlob(t *testing.T) {
	tests := []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", true},
		{"*", "anything", true},
		{"a*", "a", true},
		{"a*", "ab", true},
		{"a*", "ba", false},
		{"*a", "ba", true},
		{"*a", "ab", false},
		{"a*b", "ab", true},
		{"a*b", "axxb", true},
		{"a*b", "axxbx", false},
		{"a*b*c", "abc", true},
		{"a*b*c", "aXbYbZc", true},
		{"a*b*c", "aXbYc", true},
		{"a*b*c", "acb", false},
		{"**", "x", true},
		{"*ab*ab*", "xabyab", true},
		{"*ab*ab*", "xaby", false},
		{"*aab", "aaab", true}, // needs backtracking into the star
		{"exact", "exact", true},
		{"exact", "exac", false},
		{"", "", true},
		{"", "x", false},
		{"a*", "a*", true},
		{"ü*", "über", true},
	}
	for _, tt := range tests {
		if got := glob(tt.pattern, tt.s); got != tt.want {
			t.Errorf("glob(%q, %q) = %v; want %v", tt.pattern, tt.s, got, tt.want)
		}
	}
}

func TestMatchDoesNotAllocate(t *testing.T) {
	c := parseOne(t, matchConfig)
	requests := [][]Entry{
		{{"remote_address", "50.0.0.5"}},
		{{"remote_address", "10.1.2.3"}},
		{{"path", "/v1/users/42/posts"}},
		{{"user", "u1"}, {"plan", "pro"}, {"region", "eu"}},
		{{"nothing", "x"}},
	}
	for _, r := range requests {
		if n := testing.AllocsPerRun(100, func() { c.Match("edge", r) }); n != 0 {
			t.Errorf("Match(%v) allocates %v times; want 0", r, n)
		}
	}
}

// benchConfig is a domain of n top-level keys, each with an exact value, a
// wildcard and a key-only entry, and a nested level under each.
func benchConfig(b *testing.B, n int) *Config {
	src := "domain: bench\ndescriptors:\n"
	for i := range n {
		k := "key" + strconv.Itoa(i)
		src += "  - key: " + k + "\n    value: exact\n    rate_limit: {unit: second, requests_per_unit: 10}\n" +
			"  - key: " + k + "\n    value: \"pre*\"\n    rate_limit: {unit: second, requests_per_unit: 10}\n" +
			"  - key: " + k + "\n    value: \"*mid*dle*\"\n    rate_limit: {unit: second, requests_per_unit: 10}\n" +
			"  - key: " + k + "\n    rate_limit: {unit: second, requests_per_unit: 10}\n" +
			"    descriptors:\n      - key: sub\n        rate_limit: {unit: minute, requests_per_unit: 10}\n"
	}
	c, err := Parse(map[string][]byte{"bench.yaml": []byte(src)})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

func BenchmarkMatch(b *testing.B) {
	c := benchConfig(b, 100)
	cases := []struct {
		name    string
		entries []Entry
	}{
		{"exact", []Entry{{"key50", "exact"}}},
		{"wildcard-prefix", []Entry{{"key50", "prefix-value"}}},
		{"wildcard-middle", []Entry{{"key50", "a-middle-value"}}},
		{"key-only", []Entry{{"key50", "10.0.0.1"}}},
		{"nested", []Entry{{"key50", "10.0.0.1"}, {"sub", "x"}}},
		{"miss", []Entry{{"unknown", "x"}}},
	}
	for _, bc := range cases {
		if c.Match("bench", bc.entries) == nil && bc.name != "miss" {
			b.Fatalf("%s: no match", bc.name)
		}
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.Match("bench", bc.entries)
			}
		})
	}
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				c.Match("bench", cases[i%len(cases)].entries)
				i++
			}
		})
	})
}

// FuzzGlob holds glob to its definition, a regular expression in which
// each '*' is ".*" and everything else is literal.
func FuzzGlob(f *testing.F) {
	for _, seed := range [][2]string{{"*sqlmap*", "x sqlmap/1.7 y"}, {"a*a", "a"}, {"*a*b*a*", "abba"}, {"", ""}, {"**", "\xff"}} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, pattern, s string) {
		pieces := strings.Split(pattern, "*")
		for i, p := range pieces {
			pieces[i] = regexp.QuoteMeta(p)
		}
		re, err := regexp.Compile(`(?s)\A` + strings.Join(pieces, ".*") + `\z`)
		if err != nil {
			t.Skip() // not UTF-8: regexp cannot say
		}
		if !utf8.ValidString(s) {
			t.Skip()
		}
		if got, want := glob(pattern, s), re.MatchString(s); got != want {
			t.Fatalf("glob(%q, %q) = %v; want %v", pattern, s, got, want)
		}
	})
}
