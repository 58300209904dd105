package config

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse feeds arbitrary files to Parse. Parse must never panic; it
// returns either an error that names the file or a Config whose every
// method, and Match on any entries, is safe.
func FuzzParse(f *testing.F) {
	seeds := []string{
		"",
		"domain: d\n",
		matchConfig,
		laughs(),
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 0}\n",
		"domain: d\ndescriptors: &a\n  - key: k\n    descriptors: *a\n",
		"domain: d\ndescriptors:\n  - &a\n    key: k\n    <<: *a\n",
		"domain: d\ndescriptors:\n  - key: k\n    value: \"*a*b*\"\n    rate_limit: {unit: YEAR, unit_multiplier: 100, requests_per_unit: 4294967295, algorithm: gcra, burst: 1}\n",
		"domain: d\ndescriptors:\n  - key: a_b\n    rate_limit: {unlimited: true}\n  - key: a\n    value: b\n    rate_limit: {unlimited: true}\n",
		"domain: [\n",
		"domain: a\n---\ndomain: b\n",
		"{domain: x, descriptors: [{key: k, value: v, rate_limit: {unit: day, requests_per_unit: 1, replaces: [{name: n}]}}]}",
	}
	if files, err := filepath.Glob("testdata/*/*.y*ml"); err == nil {
		for _, name := range files {
			if data, err := os.ReadFile(name); err == nil {
				seeds = append(seeds, string(data))
			}
		}
	}
	for _, s := range seeds {
		f.Add([]byte(s), "k", "v", "sub", "")
	}
	f.Fuzz(func(t *testing.T, data []byte, k1, v1, k2, v2 string) {
		c, err := Parse(map[string][]byte{"fuzz.yaml": data})
		if err != nil {
			var ce *Error
			if !errors.As(err, &ce) || ce.File != "fuzz.yaml" {
				t.Fatalf("Parse error %q does not name fuzz.yaml", err)
			}
			return
		}
		if len(c.Domains()) != 1 || c.Version() == "" {
			t.Fatalf("Parse gave domains %v, version %q", c.Domains(), c.Version())
		}
		domain := c.Domains()[0]
		for _, entries := range [][]Entry{{{k1, v1}}, {{k1, v1}, {k2, v2}}, {{k1, v1}, {k2, v2}, {k1, v2}}} {
			if l := c.Match(domain, entries); l != nil && l.Domain != domain {
				t.Fatalf("Match(%q) gave a limit of domain %q", domain, l.Domain)
			}
			c.Match(k1, entries)
		}
		seen := make(map[string]bool)
		for _, l := range c.Limits() {
			if seen[l.Path] {
				t.Fatalf("two limits share the path %q", l.Path)
			}
			seen[l.Path] = true
			r := l.RateLimit
			counted := !r.Unlimited && !r.Blocks()
			if counted && (r.RequestsPerUnit < 1 || r.UnitMultiplier < 1 || r.Burst < 1 || r.Window() <= 0 || r.Window() > MaxWindow) {
				t.Fatalf("limit %s has an invalid RateLimit %+v", l.Path, r)
			}
		}
		if _, err := json.Marshal(c); err != nil {
			t.Fatalf("MarshalJSON: %v", err)
		}
	})
}
