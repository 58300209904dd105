package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// limitConfig is 3 per 10 s per address, on fixed windows.
const limitConfig = `domain: login
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      unit_multiplier: 10
      requests_per_unit: 3
      algorithm: fixed_window
`

// boundaryTrace sends 3 just before and 3 just after the boundary at 10 s
// from one address, and one request no limit matches.
const boundaryTrace = `time,entries,cost
9.7,remote_address=10.0.0.1
9.8,remote_address=10.0.0.1
9.9,remote_address=10.0.0.1,
10.0,remote_address=10.0.0.1
10.1,remote_address=10.0.0.1
10.2,remote_address=10.0.0.1,1
10.3,user=alice
`

func write(t *testing.T, dir, name, data string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func runCmd(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// fields collapses runs of spaces, so table rows compare as words.
func fields(s string) string { return strings.Join(strings.Fields(s), " ") }

func TestUsage(t *testing.T) {
	for _, tt := range []struct {
		args []string
		code int
		want string // in stdout or stderr
	}{
		{nil, exitUsage, "simulate run -config PATH"},
		{[]string{"help"}, exitOK, "simulate accuracy"},
		{[]string{"frobnicate"}, exitUsage, `unknown subcommand "frobnicate"`},
		{[]string{"run", "-h"}, exitOK, "-pattern"},
		{[]string{"check", "-h"}, exitOK, "Exits 1 if any is invalid"},
		{[]string{"accuracy", "-h"}, exitOK, "same history"},
		{[]string{"run", "-nope"}, exitUsage, "flag provided but not defined: -nope"},
	} {
		code, out, errs := runCmd(tt.args...)
		if code != tt.code || !strings.Contains(out+errs, tt.want) {
			t.Errorf("simulate %q = %d, %q %q; want %d and %q", tt.args, code, out, errs, tt.code, tt.want)
		}
	}
}

func TestRunFlagErrors(t *testing.T) {
	dir := t.TempDir()
	cfg := write(t, dir, "login.yaml", limitConfig)
	trace := write(t, dir, "trace.csv", boundaryTrace)
	two := write(t, dir, "two", "")
	os.Remove(two)
	os.Mkdir(two, 0o755)
	write(t, two, "a.yaml", limitConfig)
	write(t, two, "b.yaml", strings.Replace(limitConfig, "domain: login", "domain: api", 1))
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-trace", trace}, "-config is required"},
		{[]string{"-config", cfg}, "give exactly one of -trace and -pattern"},
		{[]string{"-config", cfg, "-trace", trace, "-pattern", "steady"}, "give exactly one of -trace and -pattern"},
		{[]string{"-config", cfg, "-trace", trace, "-rate", "5"}, "-rate shapes a generated trace"},
		{[]string{"-config", cfg, "-pattern", "zigzag"}, `-pattern "zigzag": want one of steady, bursty, boundary, many`},
		{[]string{"-config", cfg, "-trace", trace, "-algorithm", "leaky"}, `-algorithm: unknown algorithm "leaky"`},
		{[]string{"-config", cfg, "-trace", trace, "-compare", "leaky"}, `-compare: unknown algorithm "leaky"`},
		{[]string{"-config", cfg, "-trace", trace, "-bucket", "0s"}, "-bucket 0s: must be positive"},
		{[]string{"-config", cfg, "-pattern", "many", "-rate", "-1"}, "-rate -1: must not be negative"},
		{[]string{"-config", cfg, "-pattern", "bursty", "-on", "0s"}, "-on 0s, -off 8s: both must be positive"},
		{[]string{"-config", two, "-trace", trace}, "-domain is required: the config has the domains api, login"},
		{[]string{"-config", cfg, "-pattern", "boundary", "-rate", "5"}, "-rate does not apply to -pattern boundary"},
		{[]string{"-config", cfg, "-pattern", "steady", "-clients", "4"}, "-clients 4: -pattern steady sends from one client"},
		{[]string{"-config", cfg, "-pattern", "many", "-off", "1s"}, "-on and -off apply to -pattern bursty only"},
		{[]string{"-config", cfg, "-trace", trace, "extra"}, `unexpected arguments ["extra"]`},
	} {
		code, _, errs := runCmd(append([]string{"run"}, tt.args...)...)
		if code != exitUsage || !strings.Contains(errs, tt.want) {
			t.Errorf("run %q = %d, %q; want %d and %q", tt.args, code, errs, exitUsage, tt.want)
		}
	}
}

func TestRunTrace(t *testing.T) {
	dir := t.TempDir()
	cfg := write(t, dir, "login.yaml", limitConfig)
	trace := write(t, dir, "trace.csv", boundaryTrace)
	svg := filepath.Join(dir, "out.svg")
	code, out, errs := runCmd("run", "-config", cfg, "-domain", "login", "-trace", trace, "-compare", "sliding_log", "-svg", svg)
	if code != exitOK {
		t.Fatalf("run = %d: %s", code, errs)
	}
	// The fixed window takes all six across the boundary, twice its limit
	// in one window; the sliding log the first three.
	for _, want := range []string{
		"7 requests in domain login, 1 matched no limit",
		"login.remote_address fixed_window 3/10s 1 6 6 0 6 6",
		"login.remote_address sliding_log 3/10s 1 6 3 3 3 3",
		"login.remote_address 6 3 50.000 0 0.000",
	} {
		if !strings.Contains(fields(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	data, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, []byte("<svg ")) || bytes.Count(data, []byte("<polyline ")) != 3 {
		t.Errorf("svg: %d bytes, %d polylines; want an <svg> with 3", len(data), bytes.Count(data, []byte("<polyline ")))
	}
}

func TestRunJSON(t *testing.T) {
	dir := t.TempDir()
	cfg := write(t, dir, "login.yaml", limitConfig)
	trace := write(t, dir, "trace.csv", boundaryTrace)
	code, out, errs := runCmd("run", "-config", cfg, "-trace", trace, "-algorithm", "sliding_window", "-json")
	if code != exitOK {
		t.Fatalf("run = %d: %s", code, errs)
	}
	var got struct {
		Runs []struct {
			Algorithm string
			Unmatched int
			Limits    []struct {
				Path        string
				Admitted    int
				WorstWindow int `json:"worst_window"`
				Series      []struct{ Offered, Admitted int }
			}
		}
		Comparison *json.RawMessage
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if len(got.Runs) != 1 || got.Comparison != nil || got.Runs[0].Algorithm != "sliding_window" || got.Runs[0].Unmatched != 1 {
		t.Fatalf("JSON %+v; want one sliding_window run, one unmatched, no comparison", got)
	}
	l := got.Runs[0].Limits[0]
	// Buckets of 1 s from 9 s: three requests in [9,10), three in [10,11).
	if l.Path != "login.remote_address" || l.Admitted != 3 || l.WorstWindow != 3 || len(l.Series) != 2 || l.Series[0].Offered != 3 || l.Series[1].Admitted != 0 {
		t.Errorf("limit %+v; want 3 admitted, series [{3 3} {3 0}]", l)
	}
}

func TestRunPatterns(t *testing.T) {
	dir := t.TempDir()
	cfg := write(t, dir, "login.yaml", limitConfig)
	// Boundary takes its target from the config: 3 per 10 s, attacked at
	// 10, 30 and 50 s.
	code, out, errs := runCmd("run", "-config", cfg, "-pattern", "boundary", "-duration", "1m")
	if code != exitOK || !strings.Contains(fields(out), "fixed_window 3/10s 1 18 18 0") {
		t.Errorf("boundary = %d, %s %s; want 18 offered and admitted", code, out, errs)
	}
	// The same seed, the same report; another seed, another.
	args := []string{"run", "-config", cfg, "-pattern", "many", "-clients", "20", "-duration", "30s", "-rate", "0.5"}
	_, a, _ := runCmd(append(args, "-seed", "3")...)
	_, b, _ := runCmd(append(args, "-seed", "3")...)
	_, c, _ := runCmd(append(args, "-seed", "4")...)
	if a != b || a == c || !strings.Contains(a, "20 clients") {
		t.Errorf("seed 3 twice and seed 4:\n%s\n%s\n%s", a, b, c)
	}
	// Patterns need a key-only descriptor to match.
	code, _, errs = runCmd("run", "-config", cfg, "-pattern", "steady", "-key", "user")
	if code != exitError || !strings.Contains(errs, "no counted limit in domain login") {
		t.Errorf("steady on an unmatched key = %d, %q; want %d and the reason", code, errs, exitError)
	}
}

func TestRunBadInputs(t *testing.T) {
	dir := t.TempDir()
	cfg := write(t, dir, "login.yaml", limitConfig)
	trace := write(t, dir, "trace.csv", "1,remote_address=a\nsoon,remote_address=a\n3,remote_address=a,0\n")
	code, _, errs := runCmd("run", "-config", cfg, "-trace", trace)
	if code != exitError || !strings.Contains(errs, trace+`:2: time "soon"`) || !strings.Contains(errs, trace+`:3: cost "0"`) {
		t.Errorf("bad trace = %d, %q; want %d naming lines 2 and 3", code, errs, exitError)
	}
	bad := write(t, dir, "bad.yaml", limitConfig+"    shadow: true\n")
	code, _, errs = runCmd("run", "-config", bad, "-trace", trace)
	if code != exitError || !regexp.MustCompile(regexp.QuoteMeta(bad)+`:\d+: `).MatchString(errs) {
		t.Errorf("bad config = %d, %q; want %d with file:line", code, errs, exitError)
	}
}

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	good := write(t, dir, "good.yaml", limitConfig)
	bad := write(t, dir, "bad.yaml", strings.Replace(limitConfig, "unit: second", "unit: fortnight", 1))
	code, out, errs := runCmd("check", good, "../../pkg/config/testdata/envoy")
	if code != exitOK || errs != "" {
		t.Fatalf("check = %d, %q", code, errs)
	}
	for _, want := range []string{
		good + ": ok",
		"login login.remote_address - 3 second 10 fixed_window - false false " + good + ":3",
		"../../pkg/config/testdata/envoy: ok",
		"rl rl.foo.baz_shady - 1 minute 1 token_bucket 1 true false",
	} {
		if !strings.Contains(fields(out), want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
	code, out, errs = runCmd("check", good, bad)
	if code != exitError || !strings.HasPrefix(errs, bad+":5: ") || !strings.Contains(out, good+": ok") {
		t.Errorf("check good bad = %d, %q, %q; want %d, %s:5: on stderr and the good table", code, out, errs, exitError, bad)
	}
	if code, _, errs = runCmd("check"); code != exitUsage || !strings.Contains(errs, "name at least one") {
		t.Errorf("check with no paths = %d, %q; want %d", code, errs, exitUsage)
	}
}

func TestAccuracy(t *testing.T) {
	args := []string{"accuracy", "-clients", "50", "-duration", "3m", "-limit", "20", "-window", "20s"}
	code, out, errs := runCmd(args...)
	if code != exitOK {
		t.Fatalf("accuracy = %d: %s", code, errs)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`offered: \d+ requests from 50 clients; over the limit \(the exact log rejected\): \d+ \([\d.]+%\)`),
		regexp.MustCompile(`(?m)^independent +\d+ +[\d.]+ +\d+ +[\d.]+$`),
		regexp.MustCompile(`(?m)^same history +\d+ +[\d.]+ +\d+ +[\d.]+$`),
		regexp.MustCompile(`(?m)^0\.0-0\.5 +\d+ +\d+ +0\.000 +0\.000 / 0\.000`),
	} {
		if !want.MatchString(out) {
			t.Errorf("accuracy output does not match %s:\n%s", want, out)
		}
	}
	code, out, _ = runCmd(append(args, "-json")...)
	var got struct {
		Trace struct {
			Duration string
		}
		Report struct {
			Clients  int64
			Requests int64
		}
	}
	if err := json.Unmarshal([]byte(out), &got); code != exitOK || err != nil || got.Report.Clients != 50 || got.Report.Requests == 0 || got.Trace.Duration != "3m0s" {
		t.Errorf("accuracy -json = %d, %v: %+v", code, err, got)
	}
	for _, bad := range [][]string{{"-limit", "0"}, {"-limit", "10001"}, {"-window", "0s"}, {"-clients", "0"}, {"-rate", "-2"}} {
		if code, _, errs := runCmd(append([]string{"accuracy"}, bad...)...); code != exitUsage || errs == "" {
			t.Errorf("accuracy %q = %d, %q; want %d with a reason", bad, code, errs, exitUsage)
		}
	}
}

// TestRunConcurrencyFlag: -concurrency holds each key to that many
// requests at once, each for the duration the trace gives it.
func TestRunConcurrencyFlag(t *testing.T) {
	dir := t.TempDir()
	cfg := write(t, dir, "login.yaml", limitConfig)
	trace := write(t, dir, "trace.csv", "time,entries,cost,duration\n0,remote_address=10.0.0.1,,5\n1,remote_address=10.0.0.1,,5\n6,remote_address=10.0.0.1,,1\n")
	code, out, errs := runCmd("run", "-config", cfg, "-domain", "login", "-trace", trace, "-concurrency", "1")
	if code != exitOK {
		t.Fatalf("run = %d: %s", code, errs)
	}
	// The second starts while the first runs: refused; the third after it.
	if !strings.Contains(fields(out), "login.remote_address fixed_window 3/10s 1 3 2 1 (1 at once)") {
		t.Errorf("output:\n%s", out)
	}
	if code, _, _ := runCmd("run", "-config", cfg, "-domain", "login", "-trace", trace, "-concurrency", "-1"); code == exitOK {
		t.Error("-concurrency -1 accepted")
	}
}
