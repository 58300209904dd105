package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/algorithm"
)

// configErrors returns every *Error inside err, unwrapping errors.Join.
func configErrors(err error) []*Error {
	var out []*Error
	var walk func(error)
	walk = func(err error) {
		if e, ok := err.(*Error); ok {
			out = append(out, e)
			return
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
		}
	}
	walk(err)
	return out
}

const okRate = "\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n"

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name   string
		files  map[string]string
		file   string // where the error is; "f.yaml" if empty
		line   int
		reason string
	}{
		{name: "empty file", files: map[string]string{"f.yaml": ""}, line: 1, reason: "no domain"},
		{name: "only comments", files: map[string]string{"f.yaml": "# nothing\n"}, line: 1, reason: "no domain"},
		{name: "no domain field", files: map[string]string{"f.yaml": "descriptors: []\n"}, line: 1, reason: "no domain"},
		{name: "empty domain", files: map[string]string{"f.yaml": "\ndomain: \"\"\n"}, line: 2, reason: "no domain"},
		{name: "domain not a string", files: map[string]string{"f.yaml": "domain: [a]\n"}, line: 1, reason: "domain must be a string"},
		{name: "file is a list", files: map[string]string{"f.yaml": "- domain: x\n"}, line: 1, reason: "the file must be a mapping"},
		{name: "unknown root field", files: map[string]string{"f.yaml": "domain: d\ndomian: x\n"}, line: 2, reason: `unknown field "domian" in the file`},
		{name: "unknown descriptor field", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    vaule: v\n"},
			line: 4, reason: `unknown field "vaule" in descriptor`},
		{name: "unknown rate_limit field", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimied: true\n"},
			line: 5, reason: `unknown field "unlimied" in rate_limit`},
		{name: "unknown replaces field", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - nam: x\n"},
			line: 8, reason: `unknown field "nam" in replaces entry`},
		{name: "unknown field deep", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        descriptors:\n          - key: c\n            colour: red\n"},
			line: 8, reason: `unknown field "colour"`},
		{name: "share_threshold without a wildcard", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n"},
			line: 5, reason: `share_threshold applies to a wildcard value (containing '*'); "v" has none`},
		{name: "concurrency without a holder", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: concurrency}\n"},
			line: 4, reason: "algorithm: concurrency needs holder: true"},
		{name: "holder on another algorithm", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5, holder: true}\n"},
			line: 4, reason: "holder applies only to algorithm: concurrency, not token_bucket"},
		{name: "holder with a value", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    value: v\n    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: concurrency, holder: true}\n"},
			line: 5, reason: "the descriptor must match its key only"},
		{name: "concurrency counting refused", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: concurrency, holder: true, count_refused: true}\n"},
			line: 4, reason: "count_refused does not apply to concurrency"},
		{name: "concurrency above its cap", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 10001, algorithm: concurrency, holder: true}\n"},
			line: 4, reason: "may be at most 10000"},
		{name: "metadata not a mapping", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    metadata: [a]\n"},
			line: 4, reason: `metadata must be a mapping`},
		{name: "quota_mode not a boolean", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    quota_mode: maybe\n"},
			line: 4, reason: `quota_mode`},
		{name: "field twice", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    key: j\n"},
			line: 4, reason: `field "key" given twice in descriptor (first at line 3)`},
		{name: "duplicate key and value", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n"},
			line: 5, reason: `duplicate descriptor key "k" value "v" at this level (first at line 3)`},
		{name: "duplicate key only", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k" + okRate + "  - key: k\n"},
			line: 7, reason: `duplicate descriptor key "k" without a value`},
		{name: "duplicate wildcard", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    value: a*\n  - key: k\n    value: a*\n"},
			line: 5, reason: "duplicate descriptor"},
		{name: "duplicate nested", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n      - key: b\n"},
			line: 6, reason: `duplicate descriptor key "b"`},
		{name: "duplicate domain across files", files: map[string]string{
			"a.yaml": "domain: d\n",
			"b.yaml": "# the same domain again\ndomain: d\n",
		}, file: "b.yaml", line: 2, reason: `duplicate domain "d": already defined at a.yaml:1`},
		{name: "path collision", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: a_b" + okRate + "  - key: a\n    value: b" + okRate},
			line: 7, reason: `limit path "d.a_b" is also the path of the limit at f.yaml:3`},
		{name: "unlimited with unit", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      unit: second\n"},
			line: 6, reason: "unlimited: true cannot be combined with unit"},
		{name: "unlimited with requests_per_unit", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      requests_per_unit: 5\n      unlimited: true\n"},
			line: 5, reason: "unlimited: true cannot be combined with requests_per_unit"},
		{name: "unlimited with algorithm", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      algorithm: gcra\n"},
			line: 6, reason: "cannot be combined with algorithm"},
		{name: "unknown unit", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n"},
			line: 5, reason: `unknown unit "fortnight"`},
		{name: "missing unit", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      requests_per_unit: 1\n"},
			line: 4, reason: "rate_limit needs a unit"},
		{name: "missing requests_per_unit", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n"},
			line: 4, reason: "rate_limit needs requests_per_unit"},
		{name: "unknown algorithm", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      algorithm: leaky_bucket\n"},
			line: 7, reason: `unknown algorithm "leaky_bucket"`},
		{name: "negative requests_per_unit", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: -3\n"},
			line: 6, reason: "requests_per_unit must not be negative"},
		{name: "zero unit_multiplier", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      unit_multiplier: 0\n"},
			line: 7, reason: "unit_multiplier must be at least 1"},
		{name: "negative unit_multiplier", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      unit_multiplier: -1\n"},
			line: 7, reason: "unit_multiplier must not be negative"},
		{name: "window too long", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: year\n      requests_per_unit: 1\n      unit_multiplier: 101\n"},
			line: 7, reason: "longer than the maximum"},
		{name: "zero burst", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      burst: 0\n"},
			line: 7, reason: "burst must be at least 1"},
		{name: "negative burst", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      burst: -2\n"},
			line: 7, reason: "burst must not be negative"},
		{name: "burst without a bucket", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      algorithm: fixed_window\n      burst: 5\n"},
			line: 8, reason: "burst applies only to token_bucket and gcra, not fixed_window"},
		{name: "sliding_log above cap", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 10001\n      algorithm: sliding_log\n"},
			line: 6, reason: "requests_per_unit (its limit) may be at most 10000"},
		{name: "descriptor without key", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - value: v\n"},
			line: 3, reason: "descriptor has no key"},
		{name: "descriptor with empty key", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n  - key: \"\"\n    value: v\n"},
			line: 4, reason: "descriptor has no key"},
		{name: "string requests_per_unit", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: \"10\"\n"},
			line: 6, reason: `requests_per_unit must be an integer, got the string "10"`},
		{name: "float requests_per_unit", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1.5\n"},
			line: 6, reason: "requests_per_unit must be an integer, got the number 1.5"},
		{name: "huge requests_per_unit", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 4294967296\n"},
			line: 6, reason: "requests_per_unit must be at most 4294967295"},
		{name: "bool shadow_mode", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: maybe\n"},
			line: 4, reason: `shadow_mode must be true or false, got the string "maybe"`},
		{name: "quoted bool", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    detailed_metric: \"yes\"\n"},
			line: 4, reason: "detailed_metric must be true or false"},
		{name: "unit a list", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: [second]\n      requests_per_unit: 1\n"},
			line: 5, reason: "unit must be a string, got a list"},
		{name: "key a mapping", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: {a: 1}\n"},
			line: 3, reason: "key must be a string, got a mapping"},
		{name: "descriptors a mapping", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  key: k\n"},
			line: 3, reason: "descriptors must be a list, got a mapping"},
		{name: "descriptor a string", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - k\n"},
			line: 3, reason: `descriptor must be a mapping, got the string "k"`},
		{name: "rate_limit a string", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: fast\n"},
			line: 4, reason: "rate_limit must be a mapping"},
		{name: "replaces without name", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: \"\"\n"},
			line: 8, reason: "replaces entry has no name"},
		{name: "replaces itself", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: me\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: me\n"},
			line: 9, reason: `a limit cannot replace itself ("me")`},
		{name: "invalid YAML", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - key: k\n   value: v\n"},
			line: 2, reason: "invalid YAML"}, // yaml.v3 names the line where the enclosing block starts
		{name: "tab indentation", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n\t- key: k\n"},
			line: 3, reason: "invalid YAML"},
		{name: "second document", files: map[string]string{"f.yaml": "domain: a\n---\ndomain: b\n"},
			line: 2, reason: "a second YAML document"},
		{name: "descriptors too deep", files: map[string]string{"f.yaml": "domain: d\ndescriptors: &a\n  - key: k\n    descriptors: *a\n"},
			reason: "nested more than 64 deep"},
		{name: "self-merging mapping", files: map[string]string{"f.yaml": "domain: d\ndescriptors:\n  - &a\n    key: k\n    <<: *a\n"},
			reason: "merge keys nested more than 64 deep"},
		{name: "billion laughs", files: map[string]string{"f.yaml": laughs()}, reason: "config too large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := make(map[string][]byte, len(tt.files))
			for name, s := range tt.files {
				files[name] = []byte(s)
			}
			c, err := Parse(files)
			if err == nil {
				t.Fatalf("Parse = %v, nil; want an error", c.Domains())
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("Parse error %v (%T) is not an *Error", err, err)
			}
			file := tt.file
			if file == "" {
				file = "f.yaml"
			}
			if ce.File != file || (tt.line != 0 && ce.Line != tt.line) || !strings.Contains(ce.Reason, tt.reason) {
				t.Errorf("Parse error = %q (file %q, line %d); want file %q, line %d, reason containing %q",
					err, ce.File, ce.Line, file, tt.line, tt.reason)
			}
			if want := ce.File + ":"; !strings.HasPrefix(err.Error(), want) {
				t.Errorf("Error() = %q; want it to start with %q", err, want)
			}
		})
	}
}

// laughs is the "billion laughs" document: each level merges ten copies of
// the one before, nine levels deep, a billion mappings when expanded.
func laughs() string {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n  - key: k0\n    rate_limit: &l0 {unit: second, requests_per_unit: 1}\n")
	for i := 1; i <= 9; i++ {
		prev := "*l" + strconv.Itoa(i-1)
		fmt.Fprintf(&b, "  - key: k%d\n    rate_limit: &l%d {<<: [%s%s]}\n", i, i, strings.Repeat(prev+", ", 9), prev)
	}
	return b.String()
}

func TestParseCollectsOneErrorPerFile(t *testing.T) {
	_, err := Parse(map[string][]byte{
		"a.yaml":  []byte("domain: a\ndescriptors:\n  - value: v\n  - nokey: 1\n"),
		"b.yaml":  []byte("dommain: b\n"),
		"ok.yaml": []byte("domain: ok\n"),
	})
	got := configErrors(err)
	if len(got) != 2 || got[0].File != "a.yaml" || got[0].Line != 3 || got[1].File != "b.yaml" || got[1].Line != 1 {
		t.Fatalf("Parse errors = %v; want a.yaml:3 then b.yaml:1", got)
	}
}

func TestParseNoFiles(t *testing.T) {
	if c, err := Parse(nil); err == nil {
		t.Fatalf("Parse(nil) = %v, nil; want an error", c)
	}
}

func parseOne(t *testing.T, src string) *Config {
	t.Helper()
	c, err := Parse(map[string][]byte{"f.yaml": []byte(src)})
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return c
}

func TestParseRateLimit(t *testing.T) {
	tests := []struct {
		name  string
		block string // the rate_limit block, indented by six spaces
		want  RateLimit
	}{
		{"defaults", "unit: second\n      requests_per_unit: 5",
			RateLimit{Unit: UnitSecond, UnitMultiplier: 1, RequestsPerUnit: 5, Burst: 5}},
		{"upper case unit, as the reference allows", "unit: MINUTE\n      requests_per_unit: 5",
			RateLimit{Unit: UnitMinute, UnitMultiplier: 1, RequestsPerUnit: 5, Burst: 5}},
		{"name", "name: api\n      unit: hour\n      requests_per_unit: 5",
			RateLimit{Name: "api", Unit: UnitHour, UnitMultiplier: 1, RequestsPerUnit: 5, Burst: 5}},
		{"unlimited", "unlimited: true",
			RateLimit{Unlimited: true, UnitMultiplier: 1}},
		{"unlimited with null unit", "unlimited: true\n      unit:",
			RateLimit{Unlimited: true, UnitMultiplier: 1}},
		{"gcra with burst", "unit: day\n      requests_per_unit: 100\n      algorithm: gcra\n      burst: 10",
			RateLimit{Unit: UnitDay, UnitMultiplier: 1, RequestsPerUnit: 100, Algorithm: algorithm.GCRA, AlgorithmSet: true, Burst: 10}},
		{"token bucket burst above the limit", "unit: second\n      requests_per_unit: 1\n      burst: 50",
			RateLimit{Unit: UnitSecond, UnitMultiplier: 1, RequestsPerUnit: 1, Burst: 50}},
		{"multiplier", "unit: minute\n      requests_per_unit: 20\n      unit_multiplier: 5\n      algorithm: Sliding_Window",
			RateLimit{Unit: UnitMinute, UnitMultiplier: 5, RequestsPerUnit: 20, Algorithm: algorithm.SlidingWindow, AlgorithmSet: true, Burst: 20}},
		{"sliding log at the cap", "unit: week\n      requests_per_unit: 10000\n      algorithm: sliding_log",
			RateLimit{Unit: UnitWeek, UnitMultiplier: 1, RequestsPerUnit: 10000, Algorithm: algorithm.SlidingLog, AlgorithmSet: true, Burst: 10000}},
		{"fixed window month", "unit: month\n      requests_per_unit: 0x10\n      algorithm: fixed_window",
			RateLimit{Unit: UnitMonth, UnitMultiplier: 1, RequestsPerUnit: 16, Algorithm: algorithm.FixedWindow, AlgorithmSet: true, Burst: 16}},
		{"concurrency", "unit: minute\n      requests_per_unit: 5\n      algorithm: concurrency\n      holder: true",
			RateLimit{Unit: UnitMinute, UnitMultiplier: 1, RequestsPerUnit: 5, Algorithm: algorithm.Concurrency, AlgorithmSet: true, Burst: 5, Holder: true}},
		{"longest window", "unit: year\n      requests_per_unit: 1\n      unit_multiplier: 100",
			RateLimit{Unit: UnitYear, UnitMultiplier: 100, RequestsPerUnit: 1, Burst: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := parseOne(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      "+tt.block+"\n")
			l := c.Match("d", []Entry{{"k", "x"}})
			if l == nil {
				t.Fatal("Match = nil")
			}
			if got := l.RateLimit; got != tt.want {
				t.Errorf("RateLimit = %+v; want %+v", got, tt.want)
			}
		})
	}
}

func TestParseYAMLFeatures(t *testing.T) {
	// Anchors, merge keys, YAML 1.1 booleans and numeric values are all
	// things yaml.v2 (the reference's parser) accepts in existing files.
	c := parseOne(t, `
domain: d
descriptors:
  - key: a
    rate_limit: &per_minute
      unit: minute
      requests_per_unit: 60
  - key: b
    rate_limit:
      <<: *per_minute
      requests_per_unit: 30
  - key: c
    value: 2061234567
    shadow_mode: yes
    detailed_metric: on
    rate_limit: *per_minute
`)
	perMinute := func(n uint32) RateLimit {
		return RateLimit{Unit: UnitMinute, UnitMultiplier: 1, RequestsPerUnit: n, Burst: n}
	}
	tests := []struct {
		entry            Entry
		want             RateLimit
		shadow, detailed bool
	}{
		{Entry{"a", "1"}, perMinute(60), false, false},
		{Entry{"b", "1"}, perMinute(30), false, false},
		{Entry{"c", "2061234567"}, perMinute(60), true, true},
	}
	for _, tt := range tests {
		l := c.Match("d", []Entry{tt.entry})
		if l == nil {
			t.Errorf("Match(%v) = nil", tt.entry)
			continue
		}
		if l.RateLimit != tt.want || l.ShadowMode != tt.shadow || l.DetailedMetric != tt.detailed {
			t.Errorf("Match(%v) = %+v shadow=%v detailed=%v; want %+v shadow=%v detailed=%v",
				tt.entry, l.RateLimit, l.ShadowMode, l.DetailedMetric, tt.want, tt.shadow, tt.detailed)
		}
	}
}

func TestUnitDurations(t *testing.T) {
	// envoyproxy/ratelimit src/utils/utilities.go UnitToDivider.
	want := map[Unit]time.Duration{
		UnitSecond: time.Second,
		UnitMinute: time.Minute,
		UnitHour:   time.Hour,
		UnitDay:    24 * time.Hour,
		UnitWeek:   7 * 24 * time.Hour,
		UnitMonth:  30 * 24 * time.Hour,
		UnitYear:   365 * 24 * time.Hour,
	}
	for u, d := range want {
		if got := u.Duration(); got != d {
			t.Errorf("%v.Duration() = %v; want %v", u, got, d)
		}
		if got, err := ParseUnit(strings.ToUpper(u.String())); err != nil || got != u {
			t.Errorf("ParseUnit(%q) = %v, %v; want %v", strings.ToUpper(u.String()), got, err, u)
		}
	}
	if d := Unit(0).Duration(); d != 0 {
		t.Errorf("Unit(0).Duration() = %v; want 0", d)
	}
	if _, err := ParseUnit("fortnight"); err == nil {
		t.Error("ParseUnit(fortnight) succeeded")
	}
	r := RateLimit{Unit: UnitMinute, UnitMultiplier: 5}
	if got := r.Window(); got != 5*time.Minute {
		t.Errorf("Window() = %v; want 5m", got)
	}
}

func TestStrings(t *testing.T) {
	tests := []struct {
		got, want string
	}{
		{RateLimit{Unlimited: true}.String(), "unlimited"},
		{RateLimit{Unit: UnitSecond, UnitMultiplier: 1, RequestsPerUnit: 5, Burst: 5}.String(), "5 per second, token_bucket"},
		{RateLimit{Unit: UnitMinute, UnitMultiplier: 5, RequestsPerUnit: 20, Algorithm: algorithm.GCRA, Burst: 2}.String(), "20 per 5 minutes, gcra, burst 2"},
		{RateLimit{Unit: UnitDay, UnitMultiplier: 1, RequestsPerUnit: 9, Algorithm: algorithm.SlidingLog, Burst: 9}.String(), "9 per day, sliding_log"},
		{Unit(0).String(), "Unit(0)"},
		{Unit(42).String(), "Unit(42)"},
		{algorithm.Kind(9).String(), "Kind(9)"},
		{(&Error{File: "f.yaml", Line: 3, Reason: "bad"}).Error(), "f.yaml:3: bad"},
		{(&Error{File: "f.yaml", Reason: "bad"}).Error(), "f.yaml: bad"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q; want %q", tt.got, tt.want)
		}
	}
}
