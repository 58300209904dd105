package config

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// maxErrorText bounds an error's text in these tests: what an error may
// put in a log line, on /readyz or in a NACK.
const maxErrorText = 2 << 10

// TestScalarBound: issue 21's finding 6 accepted a 100 MB scalar. Every
// string of a config is at most MaxScalarBytes, and the error quotes only
// a bounded prefix of it.
func TestScalarBound(t *testing.T) {
	long := strings.Repeat("x", MaxScalarBytes+1)
	fits := strings.Repeat("x", MaxScalarBytes)
	for _, tc := range []struct{ name, src string }{
		{"domain", "domain: " + long + "\n"},
		{"key", "domain: d\ndescriptors:\n  - key: " + long + okRate},
		{"value", "domain: d\ndescriptors:\n  - key: k\n    value: " + long + okRate},
		{"name", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, name: " + long + "}\n"},
		{"field name", "domain: d\ndescriptors:\n  - key: k\n    ? " + long + "\n    : 1\n"},
		{"metadata", "domain: d\ndescriptors:\n  - key: k\n    metadata: {a: [" + long + "]}\n" + okRate[1:]},
		{"metadata key", "domain: d\ndescriptors:\n  - key: k\n    metadata:\n      ? " + long + "\n      : 1\n" + okRate[1:]},
		{"integer", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1" + strings.Repeat("0", MaxScalarBytes) + "}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(map[string][]byte{"f.yaml": []byte(tc.src)})
			if err == nil {
				t.Fatalf("a %d-byte %s was accepted", MaxScalarBytes+1, tc.name)
			}
			if msg := err.Error(); !strings.Contains(msg, fmt.Sprint(MaxScalarBytes)) || len(msg) > maxErrorText {
				t.Errorf("error %.300q (%d bytes): want the bound %d named in at most %d bytes", msg, len(msg), MaxScalarBytes, maxErrorText)
			}
		})
	}
	if _, err := Parse(map[string][]byte{"f.yaml": []byte("domain: d\ndescriptors:\n  - key: k\n    value: " + fits + okRate)}); err != nil {
		t.Errorf("a value of exactly MaxScalarBytes: %v", err)
	}
}

// TestNamesRefuseControlCharacters: a domain, key, value or limit name
// becomes a response header, a log field and a metric label; one holding a
// newline, NUL or escape is refused with its file, line and the character,
// and a name with any printable Unicode is accepted.
func TestNamesRefuseControlCharacters(t *testing.T) {
	for _, tc := range []struct{ name, src string }{
		{"domain", "domain: \"d\\x00\"\n"},
		{"key", "domain: d\ndescriptors:\n  - key: \"k\\n\"" + okRate},
		{"value", "domain: d\ndescriptors:\n  - key: k\n    value: \"v\\e[31m\"" + okRate},
		{"name", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, name: \"a\\rb\"}\n"},
		{"replaces", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: \"a\\x85\"}]}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(map[string][]byte{"f.yaml": []byte(tc.src)})
			if err == nil {
				t.Fatalf("%s accepted", tc.src)
			}
			if msg := err.Error(); !strings.Contains(msg, "f.yaml:") || !strings.Contains(msg, "control character") {
				t.Errorf("error %q: want the file, line and the control character named", msg)
			}
		})
	}
	src := "domain: d\ndescriptors:\n  - key: clé\n    value: \"日本 ✓\"\n    rate_limit: {unit: second, requests_per_unit: 1, name: \"per-clé ✓\"}\n"
	if _, err := Parse(map[string][]byte{"f.yaml": []byte(src)}); err != nil {
		t.Errorf("printable Unicode names: %v", err)
	}
}

// TestCalendarZoneBound: issue 21's finding 11. `Local` followed the
// process's TZ (so replicas in different zones counted different months)
// and a 1 MiB zone name was echoed whole into logs, /readyz and the page.
func TestCalendarZoneBound(t *testing.T) {
	calendar := func(zone string) string {
		return "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: month, requests_per_unit: 1, algorithm: fixed_window, calendar: " + zone + "}\n"
	}
	for _, tc := range []struct{ name, zone, reason string }{
		{"Local", "Local", "Local"},
		{"local, quoted", `"Local"`, "Local"},
		{"empty", `""`, "calendar"},
		{"one past the bound", strings.Repeat("A", MaxZoneBytes+1), fmt.Sprint(MaxZoneBytes)},
		{"1 MiB", strings.Repeat("Europe/", 1<<20/7), fmt.Sprint(MaxScalarBytes)},
		{"path traversal", "../../../etc/passwd", "not a time zone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(map[string][]byte{"f.yaml": []byte(calendar(tc.zone))})
			if err == nil {
				t.Fatalf("calendar %.40q accepted", tc.zone)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.reason) || len(msg) > maxErrorText {
				t.Errorf("error %.300q (%d bytes): want %q in at most %d bytes", msg, len(msg), tc.reason, maxErrorText)
			}
		})
	}
	for _, zone := range []string{"UTC", "Europe/Paris", "America/Argentina/ComodRivadavia", "Etc/GMT+5"} {
		cfg, err := Parse(map[string][]byte{"f.yaml": []byte(calendar(zone))})
		if err != nil {
			t.Errorf("calendar %s: %v", zone, err)
			continue
		}
		if got := cfg.Limits()[0].RateLimit.Calendar.String(); got != zone {
			t.Errorf("calendar %s reads as %s", zone, got)
		}
	}
}

// TestErrorsBounded: one Parse reports at most maxErrors errors, the rest
// counted, and quotes a bounded prefix of the strings it names.
func TestErrorsBounded(t *testing.T) {
	files := map[string][]byte{}
	for i := range 50 {
		files[fmt.Sprintf("f%02d.yaml", i)] = []byte("domain: d" + fmt.Sprint(i) + "\nbogus: 1\n")
	}
	_, err := Parse(files)
	if got := len(configErrors(err)); got != maxErrors {
		t.Errorf("%d errors reported; want %d", got, maxErrors)
	}
	if !strings.Contains(err.Error(), "and 40 more errors") {
		t.Errorf("error %q does not count the rest", err)
	}

	long := strings.Repeat("k", MaxScalarBytes)
	src := "domain: d\ndescriptors:\n  - key: " + long + okRate + "  - key: " + long + okRate
	_, err = Parse(map[string][]byte{"f.yaml": []byte(src)})
	if err == nil || !strings.Contains(err.Error(), "duplicate descriptor") || len(err.Error()) > maxErrorText {
		t.Errorf("duplicate of a long key: %.300q (%d bytes); want a duplicate error within %d bytes", err, len(err.Error()), maxErrorText)
	}
}

func TestQuote(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", `""`},
		{"Europe/Paris", `"Europe/Paris"`},
		{strings.Repeat("a", MaxQuotedBytes), `"` + strings.Repeat("a", MaxQuotedBytes) + `"`},
		{strings.Repeat("a", MaxQuotedBytes+1), `"` + strings.Repeat("a", MaxQuotedBytes) + `"… (129 bytes)`},
		// A rune cut in two is left out whole.
		{strings.Repeat("a", MaxQuotedBytes-1) + "é", `"` + strings.Repeat("a", MaxQuotedBytes-1) + `"… (129 bytes)`},
	} {
		if got := Quote(tc.in); got != tc.want {
			t.Errorf("Quote(%.20q…) = %s; want %s", tc.in, got, tc.want)
		}
	}
}

// TestLoadSizeBounds: issue 21's finding 6. A file larger than its bound
// is refused before it is read, and so is a directory whose files add up
// to more than the total, or that holds more than MaxFiles of them; the
// errors name the file (or directory) and the bound.
func TestLoadSizeBounds(t *testing.T) {
	small := SizeBounds{MaxFileBytes: 1 << 10, MaxTotalBytes: 4 << 10}
	pad := func(n int) string { // a valid config of n bytes
		head := "domain: d\n# "
		return head + strings.Repeat("x", n-len(head)-1) + "\n"
	}
	t.Run("file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "big.yaml")
		writeFile(t, path, pad(1<<10+1))
		_, err := LoadWith(path, small)
		wantError(t, err, path, "1025 bytes", "1024")
		writeFile(t, path, pad(1<<10))
		if _, err := LoadWith(path, small); err != nil {
			t.Errorf("a file of exactly MaxFileBytes: %v", err)
		}
	})
	t.Run("file in a directory", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "a.yaml"), "domain: a\n")
		writeFile(t, filepath.Join(dir, "b.yaml"), pad(1<<10+1))
		_, err := LoadWith(dir, small)
		wantError(t, err, filepath.Join(dir, "b.yaml"), "1024")
	})
	t.Run("directory total", func(t *testing.T) {
		dir := t.TempDir()
		for i := range 5 {
			writeFile(t, filepath.Join(dir, fmt.Sprintf("f%d.yaml", i)), strings.Replace(pad(1000), "domain: d", fmt.Sprintf("domain: %d", i), 1))
		}
		_, err := LoadWith(dir, small)
		wantError(t, err, dir, "5000 bytes", "4096")
	})
	t.Run("default directory total", func(t *testing.T) {
		dir := t.TempDir()
		for i := range DefaultMaxTotalBytes/DefaultMaxFileBytes + 1 {
			writeFile(t, filepath.Join(dir, fmt.Sprintf("f%d.yaml", i)), strings.Replace(pad(DefaultMaxFileBytes), "domain: d", fmt.Sprintf("domain: %d", i), 1))
		}
		_, err := Load(dir)
		wantError(t, err, dir, fmt.Sprint(DefaultMaxTotalBytes))
	})
	t.Run("file count", func(t *testing.T) {
		dir := t.TempDir()
		for i := range MaxFiles + 1 {
			writeFile(t, filepath.Join(dir, fmt.Sprintf("f%04d.yaml", i)), fmt.Sprintf("domain: d%d\n", i))
		}
		_, err := Load(dir)
		wantError(t, err, dir, fmt.Sprint(MaxFiles))
	})
	t.Run("not a regular file", func(t *testing.T) {
		_, err := LoadWith("/dev/zero", small) // endless, were it read
		wantError(t, err, "/dev/zero")
	})
}

func wantError(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want one naming %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not name %q", err, p)
		}
	}
	if len(err.Error()) > maxErrorText {
		t.Errorf("error of %d bytes; want at most %d", len(err.Error()), maxErrorText)
	}
}

// TestNodeBudgetSpansFiles: MaxNodes bounds the whole config, not each
// file: files each within it are refused together when they exceed it.
func TestNodeBudgetSpansFiles(t *testing.T) {
	// Each file expands to about 60% of MaxNodes: 1,000 × 600 aliased
	// descriptors of one key each (1 + 2 nodes).
	bomb := func(domain string) string {
		var b strings.Builder
		b.WriteString("domain: " + domain + "\ndescriptors:\n  - key: top\n    descriptors: &inner\n")
		for i := range 200 {
			fmt.Fprintf(&b, "      - {key: i%d}\n", i)
		}
		for i := range 1000 {
			fmt.Fprintf(&b, "  - {key: o%d, descriptors: *inner}\n", i)
		}
		return b.String()
	}
	if _, err := Parse(map[string][]byte{"a.yaml": []byte(bomb("a"))}); err != nil {
		t.Fatalf("one file within the budget: %v", err)
	}
	_, err := Parse(map[string][]byte{"a.yaml": []byte(bomb("a")), "b.yaml": []byte(bomb("b"))})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprint(MaxNodes)) {
		t.Errorf("two files over the budget together: %v; want the bound named", err)
	}
}
