package httplimit

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/global"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/rls"
)

const limits = `domain: api
descriptors:
  - key: client
    rate_limit: {name: per-client, unit: minute, requests_per_unit: 3, algorithm: fixed_window}
  - key: api_key
    rate_limit: {name: per-key, unit: second, requests_per_unit: 1}
  - key: tenant
    descriptors:
      - key: path
        rate_limit: {name: per-tenant-path, unit: hour, requests_per_unit: 10}
`

// fakeClock is time the tests step: Sleep advances it (and blocks while
// hold is set, so a test can park a request in the queue).
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	slept  []time.Duration
	hold   chan struct{}
	parked chan struct{}
}

func newFakeClock() *fakeClock {
	// 15 s into a minute: fixed windows have 45 s left.
	return &fakeClock{now: time.Unix(1_780_000_215, 0)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	wake := c.now.Add(d)
	c.slept = append(c.slept, d)
	hold, parked := c.hold, c.parked
	c.mu.Unlock()
	if hold != nil {
		parked <- struct{}{}
		select {
		case <-hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	c.mu.Lock()
	if wake.After(c.now) {
		c.now = wake
	}
	c.mu.Unlock()
	return nil
}

// clockedStore is the in-memory store deciding at the fake clock's time.
type clockedStore struct {
	m     *global.Memory
	clock *fakeClock
}

func (s clockedStore) Decide(_ context.Context, b *limiter.Batch) error {
	return s.m.DecideAt(b.Items, b.Results, s.clock.Now().UnixMicro())
}

// engine is sluice's request path on the test limits at the fake clock:
// what NewEngine builds, with time injected.
func engine(t *testing.T, clock *fakeClock) Limiter {
	t.Helper()
	cfg, err := config.Parse(map[string][]byte{"limits.yaml": []byte(limits)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := global.NewMemory(global.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	core, err := limiter.New(limiter.Options{Config: func() *config.Config { return cfg }, Decider: clockedStore{m, clock}, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return rls.NewService(core)
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "served") })

func serve(t *testing.T, m *Middleware, r *http.Request) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler(ok).ServeHTTP(rec, r)
	return rec
}

func get(path string, header ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.RemoteAddr = "192.0.2.10:40000"
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	return r
}

// TestRejectionGolden: a 429 carries exactly what the service tells Envoy
// to send, and an admitted response carries the RateLimit headers.
func TestRejectionGolden(t *testing.T) {
	m, err := New(Options{Limiter: engine(t, newFakeClock()), Domain: "api",
		Descriptors: []Descriptor{{{Key: "client", Value: ClientIP()}}}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		rec := serve(t, m, get("/"))
		if rec.Code != http.StatusOK || rec.Body.String() != "served" {
			t.Fatalf("request %d: %d %q; want 200 served", i+1, rec.Code, rec.Body)
		}
		wantState := `"per-client";r=` + string(rune('2'-i)) + `;t=45`
		if got := rec.Header().Get("RateLimit"); got != wantState || rec.Header().Get("RateLimit-Policy") != `"per-client";q=3;w=60` {
			t.Errorf("request %d: RateLimit %q, RateLimit-Policy %q; want %q and \"per-client\";q=3;w=60", i+1, got, rec.Header().Get("RateLimit-Policy"), wantState)
		}
	}
	rec := serve(t, m, get("/"))
	want := map[string]string{
		"Retry-After":        "45",
		"RateLimit-Policy":   `"per-client";q=3;w=60`,
		"RateLimit":          `"per-client";r=0;t=45`,
		"X-RateLimit-Reason": "per-client",
		"Content-Type":       "application/problem+json",
	}
	if rec.Code != http.StatusTooManyRequests {
		t.Fatalf("fourth request: %d; want 429", rec.Code)
	}
	for k, v := range want {
		if got := rec.Header().Get(k); got != v {
			t.Errorf("429 %s = %q; want %q", k, got, v)
		}
	}
	body := `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"Rate limit \"per-client\" exceeded; retry in 45 s.","violated-policies":["per-client"]}`
	if rec.Body.String() != body {
		t.Errorf("429 body:\n%s\nwant:\n%s", rec.Body, body)
	}
}

// TestKeysAndCost: descriptors are built per request; one whose value is
// missing is left out, the rest still apply, and the route's cost counts.
func TestKeysAndCost(t *testing.T) {
	m, err := New(Options{Limiter: engine(t, newFakeClock()), Domain: "api",
		Descriptors: []Descriptor{
			{{Key: "api_key", Value: Header("X-Api-Key")}},
			{{Key: "tenant", Value: Header("X-Tenant")}, {Key: "path", Value: Path()}},
		},
		Cost: RouteCost(map[string]uint64{"/reports": 4, "/reports/big": 8}, 1),
	})
	if err != nil {
		t.Fatal(err)
	}
	// No API key and no tenant: nothing to limit.
	for range 5 {
		if rec := serve(t, m, get("/anything")); rec.Code != http.StatusOK || rec.Header().Get("RateLimit") != "" {
			t.Fatalf("a request with no descriptor: %d, RateLimit %q; want served, no headers", rec.Code, rec.Header().Get("RateLimit"))
		}
	}
	// Tenant and path: 10 an hour per path, a report costs 4, a big one 8:
	// /reports has room for two (8 of 10), /reports/big and /x are their
	// own keys, and a third /reports needs 4 of the 2 left.
	var got []string
	for _, path := range []string{"/reports", "/reports", "/reports/big", "/x", "/reports"} {
		rec := serve(t, m, get(path, "X-Tenant", "acme"))
		got = append(got, strings.Fields(http.StatusText(rec.Code))[0]+" "+rec.Header().Get("RateLimit"))
	}
	want := []string{
		`OK "per-tenant-path";r=6;t=1440`,
		`OK "per-tenant-path";r=2;t=2880`,
		`OK "per-tenant-path";r=2;t=2880`,
		`OK "per-tenant-path";r=9;t=360`,
		`Too "per-tenant-path";r=2;t=720`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("per tenant and path with route costs:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestClientIP(t *testing.T) {
	lb1 := netip.MustParsePrefix("10.0.0.1/32")
	lb2 := netip.MustParsePrefix("10.0.1.0/24")
	tests := []struct {
		name    string
		trusted []netip.Prefix
		peer    string
		xff     []string
		want    string
	}{
		{"no proxies: the peer", nil, "198.51.100.7:5000", []string{"203.0.113.9"}, "198.51.100.7"},
		{"spoofed XFF from an untrusted peer is ignored", []netip.Prefix{lb1}, "198.51.100.7:5000", []string{"203.0.113.9"}, "198.51.100.7"},
		{"behind one trusted proxy: the entry it appended", []netip.Prefix{lb1}, "10.0.0.1:5000", []string{"203.0.113.9, 198.51.100.7"}, "198.51.100.7"},
		{"behind two trusted proxies", []netip.Prefix{lb1, lb2}, "10.0.1.5:5000", []string{"203.0.113.9, 198.51.100.7, 10.0.0.1"}, "198.51.100.7"},
		{"two trusted proxies, header over two lines", []netip.Prefix{lb1, lb2}, "10.0.1.5:5000", []string{"203.0.113.9, 198.51.100.7", "10.0.0.1"}, "198.51.100.7"},
		{"trusted peer without XFF: the peer", []netip.Prefix{lb1}, "10.0.0.1:5000", nil, "10.0.0.1"},
		{"garbage left of the client is never reached", []netip.Prefix{lb1}, "10.0.0.1:5000", []string{"not-an-ip, 198.51.100.7"}, "198.51.100.7"},
		{"IPv6 and an IPv4-mapped peer", []netip.Prefix{netip.MustParsePrefix("2001:db8::1/128")}, "[2001:db8::1]:5000", []string{"2001:db8::42"}, "2001:db8::42"},
		{"IPv4-mapped IPv6 peer is the IPv4 proxy", []netip.Prefix{lb1}, "[::ffff:10.0.0.1]:5000", []string{"198.51.100.7"}, "198.51.100.7"},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = tt.peer
		for _, v := range tt.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		if got, _ := ClientIP(tt.trusted...)(r); got != tt.want {
			t.Errorf("%s: ClientIP = %s; want %s", tt.name, got, tt.want)
		}
	}
}

// failing is a Limiter that is down.
type failing struct{}

func (failing) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return nil, errors.New("connection refused")
}

func TestLimiterDown(t *testing.T) {
	for _, closed := range []bool{false, true} {
		m, err := New(Options{Limiter: failing{}, Domain: "api", FailClosed: closed,
			Descriptors: []Descriptor{{{Key: "client", Value: Constant("x")}}}})
		if err != nil {
			t.Fatal(err)
		}
		rec := serve(t, m, get("/"))
		want := http.StatusOK
		if closed {
			want = http.StatusServiceUnavailable
		}
		if rec.Code != want {
			t.Errorf("FailClosed %v with the limiter down: %d; want %d", closed, rec.Code, want)
		}
	}
}

func TestNewValidates(t *testing.T) {
	l := failing{}
	for _, o := range []Options{
		{Domain: "api"},
		{Limiter: l},
		{Limiter: l, Domain: "api", Descriptors: []Descriptor{{}}},
		{Limiter: l, Domain: "api", Descriptors: []Descriptor{{{Key: "k"}}}},
		{Limiter: l, Domain: "api", Queue: &Queue{Size: 1}},
	} {
		if _, err := New(o); err == nil || !strings.Contains(err.Error(), "httplimit") {
			t.Errorf("New(%+v) = %v; want an error", o, err)
		}
	}
}

// bare is a limiter that refuses without headers or body, as
// envoyproxy/ratelimit does.
type bare struct{}

func (bare) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT}, nil
}

func TestRejectWithoutBody(t *testing.T) {
	m, err := New(Options{Limiter: bare{}, Domain: "api", Descriptors: []Descriptor{{{Key: "k", Value: Constant("v")}}}})
	if err != nil {
		t.Fatal(err)
	}
	rec := serve(t, m, get("/"))
	if rec.Code != http.StatusTooManyRequests || rec.Body.String() != "Too Many Requests\n" || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain") {
		t.Errorf("a refusal without a body: %d %q %q", rec.Code, rec.Body, rec.Header().Get("Content-Type"))
	}
}
