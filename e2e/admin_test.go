package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/pkg/console"
)

// adminYAML has one limit that fires at once (demo), one in shadow mode
// and one no test traffic reaches.
const adminYAML = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {name: per-client, unit: second, requests_per_unit: 100000}
  - key: generic_key
    value: demo
    rate_limit: {name: demo, unit: minute, requests_per_unit: 5, algorithm: sliding_window}
  - key: user
    shadow_mode: true
    rate_limit: {name: per-user, unit: hour, requests_per_unit: 3, algorithm: fixed_window}
`

// TestAdminPageInBrowser loads both daemons' admin pages in real headless
// Chromium, a server on Redis and an async sidecar in front of it, with
// traffic, and reads the rendered DOM: the config table, the chart's data,
// the store's and the tier's state, and a key limited after the page was
// loaded appearing in its top list by the page's own refresh. The
// screenshots are left in artifacts/ (or $SLUICE_ARTIFACTS).
func TestAdminPageInBrowser(t *testing.T) {
	tr := startTier(t, adminYAML, 1, "async")
	server, sidecar := tr.server, tr.fronts[0]
	direct, front := server.client(t), sidecar.client(t)

	// Traffic the chart must show: admitted requests on both daemons.
	for i := range 200 {
		ask(t, direct, "remote_address", "10.0.0."+strconv.Itoa(i%50))
		ask(t, front, "remote_address", "10.0.1."+strconv.Itoa(i%50))
	}
	ctx := browser(t)
	page := func(p *proc) string { return "http://" + p.HTTP + "/" }
	if err := chromedp.Do(ctx, chromedp.Navigate(page(server)), chromedp.WaitVisible("#limits-table")); err != nil {
		t.Fatal(err)
	}

	// The config table: every limit, with the file and line defining it.
	rows := eval[[]string](t, ctx, `[...document.querySelectorAll("#limits-table tbody tr")].map(r => [...r.cells].map(c => c.textContent).join("|"))`)
	want := []string{
		"edge|remote_address|per-client|token_bucket|100000|second|100000|||limits.yaml:3",
		"edge|generic_key_demo|demo|sliding_window|5|minute|—|||limits.yaml:5",
		"edge|user|per-user|fixed_window|3|hour|—|shadow||limits.yaml:8",
	}
	if strings.Join(rows, "\n") != strings.Join(want, "\n") {
		t.Errorf("config table:\n%s\nwant:\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}
	if got := eval[string](t, ctx, `document.querySelector('[data-section="Store"] [data-field="breaker"]').textContent`); !strings.HasPrefix(got, "closed") {
		t.Errorf("store breaker reads %q; want closed", got)
	}
	if got := eval[string](t, ctx, `document.querySelector('#config-status [data-field="last-reload"]').textContent`); !strings.HasPrefix(got, "loaded") {
		t.Errorf("last reload reads %q", got)
	}

	// The chart's data: the admitted requests, counted within a sample
	// (a second) and a refresh.
	okTotal := `(() => { const l = document.querySelector('#chart polyline[data-result="ok"]'); return l ? +l.dataset.total : 0 })()`
	pageTrue(t, ctx, okTotal+` >= 200`, 2*console.Refresh+2*time.Second, "the chart's ok series to count the 200 admitted requests")
	values := eval[string](t, ctx, `document.querySelector('#chart polyline[data-result="ok"]').dataset.values`)
	sum := 0.0
	for _, v := range strings.Split(values, ",") {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("chart value %q: %v", v, err)
		}
		sum += f
	}
	if total := eval[float64](t, ctx, okTotal); sum < total-0.5 || sum > total+0.5 {
		t.Errorf("the chart's ok points sum to %v, its total says %v", sum, total)
	}

	// Nothing refused yet; then demo is, after the page loaded: its key
	// appears by the page's own refresh, within two of its intervals (and
	// the second a sample may take): on a loaded machine the browser's
	// timer runs late (the key took 1.9 s of the 3 s once allowed).
	if n := eval[float64](t, ctx, `document.querySelectorAll(".toplimit").length`); n != 0 {
		t.Fatalf("%v limits in the top list before any refusal", n)
	}
	over := 0
	for range 12 {
		if ask(t, direct, "generic_key", "demo") == rlsv3.RateLimitResponse_OVER_LIMIT {
			over++
		}
	}
	// 7 on 3 an hour: refused at least once even if they straddle the
	// fixed window's end (3 in each window at most).
	for range 7 {
		ask(t, direct, "user", "mallory")
	}
	if over != 7 {
		t.Fatalf("demo refused %d of 12; want 7", over)
	}
	refused := time.Now()
	pageTrue(t, ctx, `[...document.querySelectorAll('.toplimit[data-limit="demo"] .topkey .key')].some(k => k.textContent === "generic_key=demo")`,
		2*console.Refresh+time.Second, "generic_key=demo in demo's top keys")
	t.Logf("the refused key showed on the page %v after its last refusal", time.Since(refused).Round(time.Millisecond))
	if got := eval[string](t, ctx, `document.querySelector('.toplimit[data-limit="demo"] .topkey .num').textContent`); got != "7" {
		t.Errorf("demo's top key counts %s refusals; want 7", got)
	}
	pageTrue(t, ctx, `[...document.querySelectorAll('.toplimit[data-limit="per-user"] .topkey .key')].some(k => k.textContent === "user=mallory")`,
		2*console.Refresh+time.Second, "the shadow-mode refusals of user=mallory")
	pageTrue(t, ctx, `(() => { const l = document.querySelector('#chart polyline[data-result="over_limit"]'); return l ? +l.dataset.total : 0 })() >= 7`,
		2*console.Refresh+2*time.Second, "the chart's over_limit series to count the 7 refusals")
	screenshot(t, ctx, "admin-server.png")

	// The sidecar's page: its tier and upstream.
	if err := chromedp.Do(ctx, chromedp.Navigate(page(sidecar)), chromedp.WaitVisible("#limits-table")); err != nil {
		t.Fatal(err)
	}
	tierField := func(name string) string {
		return eval[string](t, ctx, fmt.Sprintf(`document.querySelector('[data-section="Local tier"] [data-field=%q]').textContent`, name))
	}
	if got := tierField("upstream address"); got != server.GRPC {
		t.Errorf("sidecar page: upstream address %q; want %q", got, server.GRPC)
	}
	if got := tierField("mode"); got != "async" {
		t.Errorf("sidecar page: mode %q", got)
	}
	if got := tierField("upstream"); !strings.HasPrefix(got, "answering") {
		t.Errorf("sidecar page: upstream %q; want answering", got)
	}
	if n := len(eval[[]string](t, ctx, `[...document.querySelectorAll("#limits-table tbody tr")].map(r => r.textContent)`)); n != 3 {
		t.Errorf("sidecar page: %d limits; want 3", n)
	}
	pageTrue(t, ctx, okTotal+` >= 200`, 2*console.Refresh+2*time.Second, "the sidecar chart's ok series")
	// The upstream goes away: the page says so by itself, as an alert, once
	// the sidecar has tried it (a flush of the hits it admits).
	server.kill()
	deadline := time.Now().Add(3 * console.Refresh)
	for time.Now().Before(deadline) {
		ask(t, front, "remote_address", "10.0.2.1")
		if eval[float64](t, ctx, `document.querySelectorAll('[data-section="Local tier"] [data-field="upstream"].alert').length`) == 1 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := tierField("upstream"); !strings.HasPrefix(got, "unavailable") {
		t.Errorf("sidecar page, upstream killed: upstream %q; want unavailable", got)
	}
	screenshot(t, ctx, "admin-sidecar.png")
}

// ask sends one request of a single entry to c and returns its code.
func ask(t *testing.T, c rlsv3.RateLimitServiceClient, key, value string) rlsv3.RateLimitResponse_Code {
	t.Helper()
	// Long enough for the first call's connection on a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}},
	}})
	if err != nil {
		t.Fatalf("%s=%s: %v", key, value, err)
	}
	return resp.OverallCode
}

// browser starts headless Chromium (Debian's chromium, installed by make
// deps) for the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium not found: run make deps (scripts/install-test-deps.sh installs it)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1300, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	tctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	if err := chromedp.Do(tctx); err != nil { // starts the browser
		t.Fatalf("chromium: %v", err)
	}
	return tctx
}

// eval is what js evaluates to on the page.
func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	return v
}

// pageTrue polls the page until js is true, failing after within. The
// page is never reloaded: what changes on it, its own script brought.
func pageTrue(t *testing.T, ctx context.Context, js string, within time.Duration, what string) {
	t.Helper()
	waitFor(t, within, what, func() bool {
		return eval[bool](t, ctx, js)
	})
}

// screenshot saves the page as an artifact: $SLUICE_ARTIFACTS, else
// artifacts/ at the repository's root.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("SLUICE_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("..", "artifacts")
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(path)
	t.Logf("screenshot: %s", abs)
}
