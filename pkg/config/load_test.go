package config

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// TestEnvoyExamples loads envoyproxy/ratelimit's own example configs (the
// README's examples and two files from its repository) unchanged and checks
// the matches its README documents.
func TestEnvoyExamples(t *testing.T) {
	c, err := Load("testdata/envoy")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	wantDomains := []string{"example4", "example6", "example7", "example8", "example9", "internal", "messaging", "mongo_cps", "rl", "test-domain"}
	if got := c.Domains(); !slices.Equal(got, wantDomains) {
		t.Errorf("Domains() = %v; want %v", got, wantDomains)
	}
	tests := []struct {
		name    string
		domain  string
		entries []Entry
		path    string // "" for no match
		rpu     uint32
		unit    Unit
	}{
		{"ex1 users", "mongo_cps", []Entry{{"database", "users"}}, "mongo_cps.database_users", 500, UnitSecond},
		{"ex1 default", "mongo_cps", []Entry{{"database", "default"}}, "mongo_cps.database_default", 500, UnitSecond},
		{"ex1 other database", "mongo_cps", []Entry{{"database", "other"}}, "", 0, 0},
		{"ex2 marketing to a number", "messaging", []Entry{{"message_type", "marketing"}, {"to_number", "2061111111"}}, "messaging.message_type_marketing.to_number", 5, UnitDay},
		{"ex2 any number", "messaging", []Entry{{"to_number", "2061111111"}}, "messaging.to_number", 100, UnitDay},
		{"ex2 placeholder alone", "messaging", []Entry{{"message_type", "marketing"}}, "", 0, 0},
		{"ex4 two tuples", "example4", []Entry{{"key", "value"}, {"subkey", "subvalue"}}, "example4.key_value.subkey", 300, UnitSecond},
		{"ex4 one tuple", "example4", []Entry{{"key", "value"}}, "", 0, 0},
		{"ex6 user-a", "example6", []Entry{{"service", "auth-service"}, {"user", "user-a"}}, "example6.service.user_user-a", 10, UnitSecond},
		{"ex6 user-b", "example6", []Entry{{"service", "auth-service"}, {"user", "user-b"}}, "example6.service.user_user-b", 20, UnitSecond},
		{"ex7 specific", "example7", []Entry{{"key_1", "value_1"}, {"user", "bkthomps"}}, "example7.key_1_value_1.user_bkthomps", 5, UnitSecond},
		{"ex7 replacing", "example7", []Entry{{"key_2", "value_2"}, {"user", "bkthomps"}}, "example7.key_2_value_2.user_bkthomps", 10, UnitSecond},
		{"ex8 unspecified value", "example8", []Entry{{"key1", "unspecified_value"}}, "example8.key1", 10, UnitMinute},
		{"ex8 value1", "example8", []Entry{{"key1", "value1"}}, "example8.key1_value1", 20, UnitMinute},
		{"ex9 value_1", "example9", []Entry{{"key1", "value_1"}}, "example9.key1_value*", 20, UnitMinute},
		{"ex9 value_2", "example9", []Entry{{"key1", "value_2"}}, "example9.key1_value*", 20, UnitMinute},
		{"rl nested", "rl", []Entry{{"source_cluster", "proxy"}, {"destination_cluster", "mock"}}, "rl.source_cluster_proxy.destination_cluster_mock", 1, UnitMinute},
		{"rl foo", "rl", []Entry{{"foo", "f"}}, "rl.foo", 2, UnitMinute},
		{"rl foo bar", "rl", []Entry{{"foo", "f"}, {"bar", "b"}}, "rl.foo.bar", 3, UnitMinute},
		{"rl shady", "rl", []Entry{{"foo", "f"}, {"baz", "shady"}}, "rl.foo.baz_shady", 1, UnitMinute},
		{"rl baz", "rl", []Entry{{"foo", "f"}, {"baz", "not-so-shady"}}, "rl.foo.baz", 1, UnitSecond},
		{"basic subkey default", "test-domain", []Entry{{"key1", "value1"}, {"subkey1", "something"}}, "test-domain.key1_value1.subkey1", 5, UnitSecond},
		{"basic subkey override", "test-domain", []Entry{{"key1", "value1"}, {"subkey1", "subvalue1"}}, "test-domain.key1_value1.subkey1_subvalue1", 10, UnitSecond},
		{"basic whitelisted", "test-domain", []Entry{{"key2", "value3"}}, "", 0, 0},
		{"basic key5 at depth 1", "test-domain", []Entry{{"key5", "value5"}}, "test-domain.key5_value5", 15, UnitDay},
		{"basic key5 at depth 2", "test-domain", []Entry{{"key5", "value5"}, {"subkey5", "subvalue5"}}, "test-domain.key5_value5.subkey5_subvalue5", 25, UnitDay},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := c.Match(tt.domain, tt.entries)
			if tt.path == "" {
				if l != nil {
					t.Fatalf("Match = %s; want no match", l.Path)
				}
				return
			}
			if l == nil {
				t.Fatalf("Match = nil; want %s", tt.path)
			}
			if l.Path != tt.path || l.RateLimit.RequestsPerUnit != tt.rpu || l.RateLimit.Unit != tt.unit {
				t.Errorf("Match = %s %d/%v; want %s %d/%v", l.Path, l.RateLimit.RequestsPerUnit, l.RateLimit.Unit, tt.path, tt.rpu, tt.unit)
			}
		})
	}

	// The flags the README's examples set.
	if l := c.Match("internal", []Entry{{"ldap", "x"}}); l == nil || !l.RateLimit.Unlimited {
		t.Errorf("internal ldap = %+v; want unlimited", l)
	}
	if l := c.Match("example6", []Entry{{"service", "s"}, {"user", "user-a"}}); !l.ShadowMode {
		t.Error("example6 user-a is not in shadow mode")
	}
	if l := c.Match("example7", []Entry{{"key_2", "value_2"}, {"user", "bkthomps"}}); !slices.Equal(l.Replaces, []string{"specific_limit"}) {
		t.Errorf("example7 Replaces = %v; want [specific_limit]", l.Replaces)
	}
	if l := c.Match("example7", []Entry{{"key_1", "value_1"}, {"user", "bkthomps"}}); l.PolicyName() != "specific_limit" {
		t.Errorf("example7 PolicyName = %q; want specific_limit", l.PolicyName())
	}
	if l := c.Match("example8", []Entry{{"key1", "v"}}); !l.DetailedMetric {
		t.Error("example8 key1 has no detailed_metric")
	}
	if l := c.Match("rl", []Entry{{"foo", "f"}}); l.File != filepath.Join("testdata", "envoy", "rl.yaml") || l.Line != 15 {
		t.Errorf("rl foo source = %s:%d; want testdata/envoy/rl.yaml:15", l.File, l.Line)
	}
}

// TestEnvoyExampleBlockList: the reference's requests_per_unit: 0 block
// list loads unchanged and matches a limit that blocks everything.
func TestEnvoyExampleBlockList(t *testing.T) {
	c, err := Load("testdata/envoy-banned/rl-banned.yaml")
	if err != nil {
		t.Fatalf("Load = %v; want the reference's block list accepted", err)
	}
	l := c.Match("rl", []Entry{{"foo", "bar"}, {"bar", "banned"}})
	if l == nil || !l.RateLimit.Blocks() || l.Line != 22 {
		t.Errorf("Match(foo=bar, bar=banned) = %+v; want the blocking limit of line 22", l)
	}
}

func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "any-extension.conf")
	writeFile(t, path, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	c, err := Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if l := c.Match("d", []Entry{{"k", "v"}}); l == nil || l.File != path {
		t.Errorf("Match = %+v; want a limit from %s", l, path)
	}
}

func TestLoadDirectory(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), "domain: a\n")
	writeFile(t, filepath.Join(dir, "b.YML"), "domain: b\n")
	writeFile(t, filepath.Join(dir, "notes.txt"), "not yaml")
	writeFile(t, filepath.Join(dir, ".hidden.yaml"), "not: loaded")
	writeFile(t, filepath.Join(dir, "sub", "c.yaml"), "domain: c\n")   // not recursive
	writeFile(t, filepath.Join(dir, "other", "d.yaml"), "domain: d\n") // reached by a symlink
	symlink(t, filepath.Join(dir, "other", "d.yaml"), filepath.Join(dir, "d.yaml"))
	symlink(t, filepath.Join(dir, "sub"), filepath.Join(dir, "dir.yaml")) // a directory: skipped
	c, err := Load(dir)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got, want := c.Domains(), []string{"a", "b", "d"}; !slices.Equal(got, want) {
		t.Errorf("Domains() = %v; want %v", got, want)
	}
	for _, d := range []string{"a", "b", "d"} {
		if !c.HasDomain(d) {
			t.Errorf("HasDomain(%q) = false; want true", d)
		}
	}
	if c.HasDomain("c") {
		t.Error(`HasDomain("c") = true for a domain not configured`)
	}
}

func TestLoadConfigMap(t *testing.T) {
	// The layout the kubelet writes for a mounted ConfigMap: each key is a
	// symlink through ..data to a timestamped directory, swapped atomically.
	dir := t.TempDir()
	gen := "..2026_01_02_03_04_05.000000001"
	writeFile(t, filepath.Join(dir, gen, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 10}\n")
	writeFile(t, filepath.Join(dir, gen, "internal.yml"), "domain: internal\n")
	symlink(t, gen, filepath.Join(dir, "..data"))
	symlink(t, filepath.Join("..data", "edge.yaml"), filepath.Join(dir, "edge.yaml"))
	symlink(t, filepath.Join("..data", "internal.yml"), filepath.Join(dir, "internal.yml"))
	c, err := Load(dir)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got, want := c.Domains(), []string{"edge", "internal"}; !slices.Equal(got, want) {
		t.Errorf("Domains() = %v; want %v (each file once)", got, want)
	}
	if l := c.Match("edge", []Entry{{"remote_address", "1.2.3.4"}}); l == nil || l.File != filepath.Join(dir, "edge.yaml") {
		t.Errorf("Match = %+v; want a limit from %s", l, filepath.Join(dir, "edge.yaml"))
	}

	// The same files mounted elsewhere have the same version.
	other := t.TempDir()
	writeFile(t, filepath.Join(other, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 10}\n")
	writeFile(t, filepath.Join(other, "internal.yml"), "domain: internal\n")
	c2, err := Load(other)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if c.Version() != c2.Version() {
		t.Errorf("Version() = %s and %s for the same files; want equal", c.Version(), c2.Version())
	}
}

func TestLoadErrors(t *testing.T) {
	empty := t.TempDir()
	writeFile(t, filepath.Join(empty, "README.md"), "no config here")
	broken := t.TempDir()
	symlink(t, filepath.Join(broken, "missing.yaml"), filepath.Join(broken, "dangling.yaml"))
	tests := []struct {
		name, path, want string
	}{
		{"empty directory", empty, "no config files in " + empty},
		{"missing path", filepath.Join(empty, "nope"), "no such file"},
		{"dangling symlink", broken, "dangling.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(tt.path)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Load(%s) = %v, %v; want an error containing %q", tt.path, c, err, tt.want)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	a := map[string][]byte{"a.yaml": []byte("domain: a\n"), "b.yaml": []byte("domain: b\n")}
	c1, err := Parse(a)
	if err != nil {
		t.Fatal(err)
	}
	c2, _ := Parse(map[string][]byte{"b.yaml": []byte("domain: b\n"), "a.yaml": []byte("domain: a\n")})
	c3, _ := Parse(map[string][]byte{"a.yaml": []byte("domain: a\n"), "b.yaml": []byte("domain: b \n")})
	c4, _ := Parse(map[string][]byte{"a.yaml": []byte("domain: a\n"), "c.yaml": []byte("domain: b\n")})
	if len(c1.Version()) != 16 || c1.Version() != c2.Version() {
		t.Errorf("Version() = %q, %q; want equal 16-digit versions for equal files", c1.Version(), c2.Version())
	}
	if c1.Version() == c3.Version() || c1.Version() == c4.Version() {
		t.Error("Version() is equal for different contents or names")
	}
}

func TestLimitsAndJSON(t *testing.T) {
	c, err := Parse(map[string][]byte{
		"z.yaml": []byte("domain: zeta\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true}\n"),
		"a.yaml": []byte(`domain: alpha
descriptors:
  - key: b
    rate_limit: {unit: minute, unit_multiplier: 5, requests_per_unit: 20, algorithm: gcra, burst: 4}
    descriptors:
      - key: c
        value: "x*"
        shadow_mode: true
        rate_limit: {name: cx, unit: hour, requests_per_unit: 3, algorithm: sliding_window, replaces: [{name: other}]}
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1}
`),
	})
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, l := range c.Limits() {
		paths = append(paths, l.Path)
	}
	if want := []string{"alpha.b", "alpha.b.c_x*", "alpha.a", "zeta.k"}; !slices.Equal(paths, want) {
		t.Errorf("Limits() = %v; want %v", paths, want)
	}

	data, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Version string
		Domains []struct {
			Domain, Source string
			Descriptors    []struct {
				Key, Value, Source string
				RateLimit          map[string]any `json:"rate_limit"`
				Descriptors        []struct {
					Key, Value string
					ShadowMode bool           `json:"shadow_mode"`
					RateLimit  map[string]any `json:"rate_limit"`
				}
			}
		}
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatalf("Unmarshal(%s): %v", data, err)
	}
	if got.Version != c.Version() || len(got.Domains) != 2 || got.Domains[0].Domain != "alpha" || got.Domains[0].Source != "a.yaml:1" {
		t.Fatalf("JSON = %s", data)
	}
	b := got.Domains[0].Descriptors[0]
	wantB := map[string]any{"path": "alpha.b", "policy": "alpha.b", "algorithm": "gcra", "unit": "minute",
		"unit_multiplier": 5.0, "requests_per_unit": 20.0, "window_seconds": 300.0, "burst": 4.0}
	if b.Key != "b" || b.Source != "a.yaml:3" || !mapsEqual(b.RateLimit, wantB) {
		t.Errorf("JSON descriptor b = %+v; want rate_limit %v", b, wantB)
	}
	cx := b.Descriptors[0]
	wantCX := map[string]any{"path": "alpha.b.c_x*", "policy": "cx", "name": "cx", "algorithm": "sliding_window", "unit": "hour",
		"unit_multiplier": 1.0, "requests_per_unit": 3.0, "window_seconds": 3600.0, "replaces": []any{"other"}}
	if cx.Value != "x*" || !cx.ShadowMode || !mapsEqual(cx.RateLimit, wantCX) {
		t.Errorf("JSON descriptor c = %+v; want rate_limit %v", cx, wantCX)
	}
	if k := got.Domains[1].Descriptors[0].RateLimit; k["unlimited"] != true || k["algorithm"] != nil {
		t.Errorf("JSON unlimited = %v; want unlimited and nothing else resolved", k)
	}
}

func mapsEqual(a, b map[string]any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
