package simulate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckValid(t *testing.T) {
	table, err := Check("../../../pkg/config/testdata/envoy/rl.yaml")
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	rows := strings.Split(strings.TrimSpace(table), "\n")
	// A header and the file's seven limits.
	if len(rows) != 8 {
		t.Fatalf("%d rows; want 8:\n%s", len(rows), table)
	}
	if got := strings.Fields(rows[0]); strings.Join(got, " ") != "DOMAIN PATH NAME REQUESTS_PER_UNIT UNIT MULTIPLIER ALGORITHM BURST SHADOW UNLIMITED DEFINED AT" {
		t.Errorf("header %q", rows[0])
	}
	want := map[string]string{
		// Defaults resolved: multiplier 1, token_bucket, burst = requests_per_unit.
		"rl.foo.bar":       "rl rl.foo.bar - 3 minute 1 token_bucket 3 false false ../../../pkg/config/testdata/envoy/rl.yaml:20",
		"rl.foo.baz_shady": "rl rl.foo.baz_shady - 1 minute 1 token_bucket 1 true false ../../../pkg/config/testdata/envoy/rl.yaml:31",
		"rl.qux":           "rl rl.qux - - - - - - false true ../../../pkg/config/testdata/envoy/rl.yaml:37",
	}
	for _, row := range rows[1:] {
		f := strings.Fields(row)
		if w, ok := want[f[1]]; ok {
			if got := strings.Join(f, " "); got != w {
				t.Errorf("row %q; want %q", got, w)
			}
			delete(want, f[1])
		}
	}
	if len(want) > 0 {
		t.Errorf("rows missing: %v", want)
	}
}

func TestCheckResolvesExtensions(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {name: per-ip, unit: minute, unit_multiplier: 5, requests_per_unit: 100, algorithm: gcra, burst: 20}
  - key: path
    rate_limit: {unit: hour, requests_per_unit: 7, algorithm: sliding_log}
`)
	table, err := Check(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"edge edge.remote_address per-ip 100 minute 5 gcra 20 false false",
		"edge edge.path - 7 hour 1 sliding_log - false false",
	} {
		if !strings.Contains(strings.Join(strings.Fields(table), " "), want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}

func TestCheckInvalid(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bad.yaml")
	writeFile(t, path, `domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: fortnight
      requests_per_unit: 10
`)
	_, err := Check(path)
	if err == nil || !strings.HasPrefix(err.Error(), path+":5: ") || !strings.Contains(err.Error(), "fortnight") {
		t.Errorf("Check = %v; want %s:5: naming the unit", err, path)
	}
	if _, err := Check(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("Check of a missing file succeeded")
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}
