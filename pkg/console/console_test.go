package console

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/reload"
	"github.com/sluicehq/sluice/pkg/topkeys"
)

func testStatus(t testing.TB, yaml string) Status {
	t.Helper()
	cfg, err := config.Parse(map[string][]byte{"limits.yaml": []byte(yaml)})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	h := NewHistory([]string{"ok", "over_limit"}, 60)
	h.Sample(now.Add(-3*time.Second), []float64{0, 0})
	h.Sample(now.Add(-2*time.Second), []float64{40, 2})
	h.Sample(now.Add(-time.Second), []float64{100, 5})
	return Status{
		Daemon: "sluice server", Build: "v1.2.3", Started: now.Add(-time.Hour), Now: now,
		Config:    reload.Status{Source: "limits.yaml", Version: cfg.Version(), LoadedAt: now.Add(-time.Minute), LastAttempt: now.Add(-time.Second), LastResult: "error", LastError: "limits.yaml:3: bad unit"},
		Limits:    cfg,
		Sections:  []Section{{Title: "Store", Fields: []Field{{Name: "breaker", Value: "open", Alert: true}}}},
		Decisions: h.Series(now),
		Top: []topkeys.Limit{{Limit: "demo", Refused: 9, Keys: []topkeys.Key{
			{Key: `user=<script>alert(1)</script>`, Count: 9, Last: now.Add(-2 * time.Second)},
		}}},
		TopMinutes: 5,
	}
}

func get(t *testing.T, h http.Handler, path string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Result(), string(body)
}

func TestPage(t *testing.T) {
	st := testStatus(t, `domain: edge
descriptors:
  - key: user
    shadow_mode: true
    rate_limit: {name: per-user, unit: minute, requests_per_unit: 10, burst: 20}
  - key: tenant
    quota_mode: true
    rate_limit: {unit: hour, unit_multiplier: 2, requests_per_unit: 7, algorithm: fixed_window}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: free
    rate_limit: {unlimited: true}
`)
	h := Handler(Options{Status: func() Status { return st }})
	resp, body := get(t, h, "/")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
	for _, want := range []string{
		`<title>sluice server · admin</title>`, `v1.2.3`, `up 1h0m0s`,
		// The config table: one row per limit, its file and line.
		`<td>edge</td><td class="key">user</td><td>per-user</td><td>token_bucket</td><td class="num">10</td><td>minute</td><td class="num">20</td><td>shadow</td><td></td><td title="limits.yaml:3">limits.yaml:3</td>`,
		`<td class="key">tenant</td><td></td><td>fixed_window</td><td class="num">7</td><td>2 hours</td><td class="num">—</td><td></td><td>quota</td>`,
		`<td class="num">0 (refuses every request)</td>`,
		`<td class="num">unlimited</td>`,
		// The reload rejected: said as an alert, with the reason.
		`<span class="alert">rejected 1s ago: limits.yaml:3: bad unit</span>`,
		`<dd data-field="breaker" class="alert">open</dd>`,
		// The chart: 40 and 60 ok, 2 and 3 over_limit, scaled to 100.
		`data-result="ok" data-total="100"`, `data-result="over_limit" data-total="5"`, `data-max="100"`,
		// A hostile key is text, never markup.
		`<td class="key">user=&lt;script&gt;alert(1)&lt;/script&gt;</td><td class="num">9</td>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	if strings.Contains(body, "<script>alert") {
		t.Error("a key's markup reached the page unescaped")
	}

	_, part := get(t, h, "/?part=main")
	if strings.Contains(part, "<html") || !strings.Contains(part, `id="limits-table"`) {
		t.Errorf("?part=main is not the main part alone:\n%.200s", part)
	}
	for _, asset := range []string{"/console.js", "/console.css"} {
		if resp, body := get(t, h, asset); resp.StatusCode != 200 || len(body) == 0 || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: %d, %d bytes", asset, resp.StatusCode, len(body))
		}
	}
	if resp, _ := get(t, h, "/other"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /other: %d", resp.StatusCode)
	}
}

// TestPageBoundsRows: a config of more than MaxRows limits shows MaxRows
// and says how many more.
func TestPageBoundsRows(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: edge\ndescriptors:\n")
	for i := range MaxRows + 5 {
		fmt.Fprintf(&b, "  - key: k%d\n    rate_limit: {unit: second, requests_per_unit: 1}\n", i)
	}
	st := testStatus(t, b.String())
	_, body := get(t, Handler(Options{Status: func() Status { return st }}), "/")
	if n := strings.Count(body, `<td class="key">k`); n != MaxRows {
		t.Errorf("%d rows; want %d", n, MaxRows)
	}
	if !strings.Contains(body, "and 5 more") {
		t.Error("the page does not say how many limits it left out")
	}
}

func TestNiceCeil(t *testing.T) {
	for _, tt := range []struct{ in, want float64 }{{0, 1}, {0.3, 1}, {1, 1}, {1.5, 2}, {3, 5}, {7, 10}, {10, 10}, {11, 20}, {480, 500}, {501, 1000}} {
		if got := niceCeil(tt.in); got != tt.want {
			t.Errorf("niceCeil(%v) = %v; want %v", tt.in, got, tt.want)
		}
	}
}

// TestPageBoundsTopLimits: of many limits refusing, the page lists the
// MaxTopLimits that refused most and says how many more did.
func TestPageBoundsTopLimits(t *testing.T) {
	st := testStatus(t, "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	st.Top = nil
	for i := range MaxTopLimits + 5 {
		st.Top = append(st.Top, topkeys.Limit{Limit: fmt.Sprintf("limit-%02d", i), Refused: int64(i + 1),
			Keys: []topkeys.Key{{Key: "k=v", Count: int64(i + 1)}}})
	}
	_, body := get(t, Handler(Options{Status: func() Status { return st }}), "/")
	if n := strings.Count(body, `class="toplimit"`); n != MaxTopLimits {
		t.Errorf("%d top lists; want %d", n, MaxTopLimits)
	}
	if strings.Contains(body, `data-limit="limit-04"`) || !strings.Contains(body, `data-limit="limit-05"`) {
		t.Error("the lists shown are not those of the limits that refused most")
	}
	if !strings.Contains(body, "5 more refused") {
		t.Error("the page does not say how many more limits refused")
	}
}
