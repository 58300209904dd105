package retry

import (
	"cmp"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestTransport(t *testing.T) {
	const s = time.Second
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	date := func(d time.Duration) []string { return []string{t0.Add(d).Format(http.TimeFormat)} }
	ok := reply{status: 200, body: "ok"}
	r429 := func(retryAfter ...string) reply {
		return reply{status: 429, body: "slow down", header: map[string][]string{"Retry-After": retryAfter}}
	}
	r503 := func(body string) reply { return reply{status: 503, body: body} }
	rl := func(status int, rateLimit string) reply {
		return reply{status: status, header: map[string][]string{"Ratelimit": {rateLimit}}}
	}

	tests := []struct {
		name       string
		opts       Options // Clock and Next are set by the test; Rand defaults to 0.5
		method     string  // default GET
		header     map[string]string
		body       string
		noGetBody  bool
		replies    []reply
		wantStatus int
		wantBody   string
		wantWaits  []time.Duration
		wantBodies []string // what the server received, when set
	}{
		{
			name:    "429 Retry-After seconds",
			replies: []reply{r429("2"), ok}, wantStatus: 200, wantBody: "ok",
			wantWaits: []time.Duration{2 * s},
		},
		{
			name: "429 Retry-After HTTP-date",
			replies: []reply{{status: 429, header: map[string][]string{
				"Retry-After": date(3 * s), "Date": date(0)}}, ok},
			wantStatus: 200, wantBody: "ok", wantWaits: []time.Duration{3 * s},
		},
		{
			name: "HTTP-date without Date is measured from the client clock",
			replies: []reply{{status: 429, header: map[string][]string{
				"Retry-After": date(5 * s), "Date": nil}}, ok},
			wantStatus: 200, wantBody: "ok", wantWaits: []time.Duration{5 * s},
		},
		{
			name: "HTTP-date in the past retries at once",
			replies: []reply{{status: 429, header: map[string][]string{
				"Retry-After": date(-time.Hour), "Date": date(0)}}, ok},
			wantStatus: 200, wantBody: "ok", wantWaits: []time.Duration{0},
		},
		{
			name:    "garbage Retry-After falls back to backoff",
			opts:    Options{Base: ms(100)},
			replies: []reply{r429("soon"), ok}, wantStatus: 200, wantBody: "ok",
			wantWaits: []time.Duration{ms(50)},
		},
		{
			name: "429 without Retry-After: full jitter, capped",
			opts: Options{Base: ms(100), Cap: s, MaxAttempts: 7},
			replies: []reply{
				r429(), r429(), r429(), r429(), r429(), r429(), ok},
			wantStatus: 200, wantBody: "ok",
			wantWaits: []time.Duration{ms(50), ms(100), ms(200), ms(400), ms(500), ms(500)},
		},
		{
			name:    "503 then success",
			opts:    Options{Base: ms(100), Rand: fixedRand(0.25)},
			replies: []reply{r503(""), ok}, wantStatus: 200, wantBody: "ok",
			wantWaits: []time.Duration{ms(25)},
		},
		{
			name:       "defaults: Base 500ms",
			replies:    []reply{r503(""), {status: 502}, {status: 504}, {status: 500}, ok},
			wantStatus: 200, wantBody: "ok",
			wantWaits: []time.Duration{ms(250), ms(500), ms(1000), ms(2000)},
		},
		{
			name:       "defaults: 5 attempts",
			replies:    []reply{r503("1"), r503("2"), r503("3"), r503("4"), r503("5"), ok},
			wantStatus: 503, wantBody: "5",
			wantWaits: []time.Duration{ms(250), ms(500), ms(1000), ms(2000)},
		},
		{
			name:    "404 is not retried",
			replies: []reply{{status: 404, body: "no"}, ok}, wantStatus: 404, wantBody: "no",
		},
		{
			name:    "Retryable narrows the set",
			opts:    Options{Retryable: RetryOnStatus(429)},
			replies: []reply{r503("busy"), ok}, wantStatus: 503, wantBody: "busy",
		},
		{
			name:       "MaxAttempts surfaces the last response",
			opts:       Options{Base: ms(100), MaxAttempts: 3},
			replies:    []reply{r503("attempt 1"), r503("attempt 2"), r503("attempt 3"), ok},
			wantStatus: 503, wantBody: "attempt 3", wantWaits: []time.Duration{ms(50), ms(100)},
		},
		{
			name:    "MaxAttempts 1 disables retries",
			opts:    Options{MaxAttempts: 1},
			replies: []reply{r503("once"), ok}, wantStatus: 503, wantBody: "once",
		},
		{
			name:    "Retry-After beyond MaxElapsed returns at once",
			opts:    Options{MaxElapsed: time.Minute},
			replies: []reply{r429("120"), ok}, wantStatus: 429, wantBody: "slow down",
		},
		{
			name:    "Retry-After beyond what is left of MaxElapsed",
			opts:    Options{MaxElapsed: 10 * s},
			replies: []reply{r429("6"), r429("6"), ok}, wantStatus: 429, wantBody: "slow down",
			wantWaits: []time.Duration{6 * s},
		},
		{
			name: "MaxElapsed clips the backoff and then gives up",
			opts: Options{Base: 10 * s, Cap: 10 * s, MaxElapsed: 30 * s, MaxAttempts: 10,
				Rand: fixedRand(0.9)},
			replies:    []reply{r503("late")},
			wantStatus: 503, wantBody: "late", wantWaits: []time.Duration{9 * s, 9 * s, 9 * s, 3 * s},
		},
		{
			name:    "Retry-After plus jitter",
			opts:    Options{RetryAfterJitter: s, Rand: fixedRand(0.25)},
			replies: []reply{r429("2"), ok}, wantStatus: 200, wantBody: "ok",
			wantWaits: []time.Duration{2*s + ms(250)},
		},
		{
			name:    "Retry-After jitter is clipped to MaxElapsed",
			opts:    Options{RetryAfterJitter: 10 * s, MaxElapsed: 4 * s},
			replies: []reply{r429("2"), ok}, wantStatus: 200, wantBody: "ok",
			wantWaits: []time.Duration{4 * s},
		},
		{
			name:    "Retry-After beyond MaxWait returns at once",
			opts:    Options{MaxWait: 10 * s},
			replies: []reply{r429("11"), ok}, wantStatus: 429, wantBody: "slow down",
		},
		{
			name: "HTTP-date beyond MaxWait returns at once",
			opts: Options{MaxWait: 10 * s},
			replies: []reply{{status: 503, body: "down", header: map[string][]string{
				"Retry-After": date(20 * s), "Date": date(0)}}, ok},
			wantStatus: 503, wantBody: "down",
		},
		{
			name:    "Retry-After of exactly MaxWait is waited",
			opts:    Options{MaxWait: 10 * s},
			replies: []reply{r429("10"), ok}, wantStatus: 200, wantBody: "ok",
			wantWaits: []time.Duration{10 * s},
		},
		{
			name:    "MaxWait clips Retry-After jitter",
			opts:    Options{MaxWait: 10 * s, RetryAfterJitter: 4 * s},
			replies: []reply{r429("9"), ok}, wantStatus: 200, wantBody: "ok",
			wantWaits: []time.Duration{10 * s},
		},
		{
			name:    "MaxWait clips the backoff",
			opts:    Options{Base: 8 * s, Cap: 20 * s, MaxWait: 5 * s, MaxAttempts: 3},
			replies: []reply{r503(""), r503(""), ok}, wantStatus: 200, wantBody: "ok",
			wantWaits: []time.Duration{4 * s, 5 * s},
		},
		{
			name:    "429 RateLimit reset without Retry-After is waited",
			replies: []reply{rl(429, `"per-client";r=0;t=5`), ok}, wantStatus: 200, wantBody: "ok",
			wantWaits: []time.Duration{5 * s},
		},
		{
			name:       "429 RateLimit reset: the longest exhausted policy",
			replies:    []reply{rl(429, `"daily";r=900;t=50000, "burst";r=0;t=2, "minute";r=0;t=7`), ok},
			wantStatus: 200, wantBody: "ok", wantWaits: []time.Duration{7 * s},
		},
		{
			name: "Retry-After wins over a RateLimit reset",
			replies: []reply{{status: 429, header: map[string][]string{
				"Retry-After": {"2"}, "Ratelimit": {`"a";r=0;t=5`}}}, ok},
			wantStatus: 200, wantBody: "ok", wantWaits: []time.Duration{2 * s},
		},
		{
			name: "malformed Retry-After falls back to a RateLimit reset",
			replies: []reply{{status: 429, header: map[string][]string{
				"Retry-After": {"soon"}, "Ratelimit": {`"a";r=0;t=5`}}}, ok},
			wantStatus: 200, wantBody: "ok", wantWaits: []time.Duration{5 * s},
		},
		{
			name: "429 RateLimit reset beyond what is left of MaxElapsed returns at once",
			opts: Options{MaxElapsed: 30 * s},
			replies: []reply{{status: 429, body: "quota", header: map[string][]string{
				"Ratelimit": {`"a";r=0;t=31`}}}, ok},
			wantStatus: 429, wantBody: "quota",
		},
		{
			name:    "429 RateLimit reset beyond MaxWait returns at once",
			opts:    Options{MaxWait: 4 * s},
			replies: []reply{rl(429, `"a";r=0;t=5`), ok}, wantStatus: 429,
		},
		{
			name:    "429 RateLimit with quota left: backoff",
			replies: []reply{rl(429, `"a";r=3;t=40`), ok}, wantStatus: 200, wantBody: "ok",
			wantWaits: []time.Duration{ms(250)},
		},
		{
			name:    "503 RateLimit reset is not a hint: backoff",
			replies: []reply{rl(503, `"a";r=0;t=40`), ok}, wantStatus: 200, wantBody: "ok",
			wantWaits: []time.Duration{ms(250)},
		},
		{
			name:    "malformed RateLimit: backoff",
			replies: []reply{rl(429, `"a";r=0;t=5, (`), ok}, wantStatus: 200, wantBody: "ok",
			wantWaits: []time.Duration{ms(250)},
		},
		{
			name:       "other 5xx are retried by default",
			opts:       Options{MaxAttempts: 6},
			replies:    []reply{{status: 507}, {status: 520}, {status: 522}, {status: 529}, {status: 599}, ok},
			wantStatus: 200, wantBody: "ok",
			wantWaits: []time.Duration{ms(250), ms(500), ms(1000), ms(2000), ms(4000)},
		},
		{
			name:    "501 is not retried",
			replies: []reply{{status: 501, body: "no such method"}, ok}, wantStatus: 501, wantBody: "no such method",
		},
		{
			name:    "505 is not retried",
			replies: []reply{{status: 505, body: "HTTP/9"}, ok}, wantStatus: 505, wantBody: "HTTP/9",
		},
		{
			name:    "511 is not retried",
			replies: []reply{{status: 511, body: "log in"}, ok}, wantStatus: 511, wantBody: "log in",
		},
		{
			name:   "POST is sent once",
			method: http.MethodPost, body: "payload",
			replies: []reply{r503("busy"), ok}, wantStatus: 503, wantBody: "busy",
			wantBodies: []string{"payload"},
		},
		{
			name:   "POST with Idempotency-Key is retried with its body",
			method: http.MethodPost, body: "payload", header: map[string]string{"Idempotency-Key": "k1"},
			replies: []reply{r503(""), r429("1"), ok}, wantStatus: 200, wantBody: "ok",
			wantWaits: []time.Duration{250 * time.Millisecond, s}, wantBodies: []string{"payload", "payload", "payload"},
		},
		{
			name:   "PUT body is replayed",
			method: http.MethodPut, body: strings.Repeat("x", 100_000),
			replies: []reply{r503(""), ok}, wantStatus: 200, wantBody: "ok",
			wantWaits:  []time.Duration{250 * time.Millisecond},
			wantBodies: []string{strings.Repeat("x", 100_000), strings.Repeat("x", 100_000)},
		},
		{
			name:   "PUT body without GetBody is sent once",
			method: http.MethodPut, body: "payload", noGetBody: true,
			replies: []reply{r503("busy"), ok}, wantStatus: 503, wantBody: "busy",
			wantBodies: []string{"payload"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			server, srv := newServer(t, tt.replies...)
			clock := newFakeClock()
			o := tt.opts
			o.Clock, o.Next = clock, srv.Client().Transport
			if o.Rand == nil {
				o.Rand = fixedRand(0.5)
			}
			method := cmp.Or(tt.method, http.MethodGet)
			var body io.Reader
			if tt.body != "" {
				body = strings.NewReader(tt.body)
				if tt.noGetBody {
					body = io.NopCloser(body)
				}
			}
			req, err := http.NewRequest(method, srv.URL, body)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			resp, err := (&http.Client{Transport: NewTransport(o)}).Do(req)
			if err != nil {
				t.Fatalf("Do(%s) error: %v", tt.name, err)
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatalf("reading the body: %v", err)
			}
			if resp.StatusCode != tt.wantStatus || string(got) != tt.wantBody {
				t.Errorf("response = %d %q; want %d %q", resp.StatusCode, got, tt.wantStatus, tt.wantBody)
			}
			if waits := clock.Waits(); !slices.Equal(waits, tt.wantWaits) {
				t.Errorf("waits = %v; want %v", waits, tt.wantWaits)
			}
			if elapsed, budget := clock.Now().Sub(t0), cmp.Or(o.MaxElapsed, DefaultMaxElapsed); elapsed > budget {
				t.Errorf("fake time elapsed %v; want at most MaxElapsed %v", elapsed, budget)
			}
			bodies := server.Bodies()
			if want := len(tt.wantWaits) + 1; len(bodies) != want {
				t.Errorf("server saw %d requests; want %d", len(bodies), want)
			}
			if tt.wantBodies != nil && !slices.Equal(bodies, tt.wantBodies) {
				t.Errorf("server saw bodies of lengths %v; want %v", lens(bodies), lens(tt.wantBodies))
			}
		})
	}
}

// TestTransportFullJitterBounds checks, over random sources, that the wait
// before retry n stays in [0, min(Cap, Base·2ⁿ)].
func TestTransportFullJitterBounds(t *testing.T) {
	const base, ceiling = 30 * time.Millisecond, time.Second
	_, srv := newServer(t, reply{status: 429})
	for seed := range uint64(20) {
		waits := seededWaits(t, srv, Options{Base: base, Cap: ceiling}, seed, 1)
		for n, w := range waits {
			if hi := min(ceiling, base<<n); w < 0 || w > hi {
				t.Errorf("seed %d: wait before retry %d = %v; want within [0, %v]", seed, n, w, hi)
			}
		}
	}
}

func TestBackoffNoOverflow(t *testing.T) {
	o := Options{Base: time.Hour, Cap: 1<<63 - 1, Rand: fixedRand(1)}.withDefaults()
	for _, n := range []int{0, 10, 20, 40, 62, 63, 64, 1000} {
		if d := o.backoff(n); d < 0 || d > o.Cap {
			t.Errorf("backoff(%d) = %v; want within [0, Cap]", n, d)
		}
	}
	o.Rand = func() float64 { return -3 }
	if d := o.backoff(3); d != 0 {
		t.Errorf("backoff with Rand < 0 = %v; want 0", d)
	}
}

// seededWaits runs one GET through a transport built from o with 12
// attempts, a fake clock and a PCG source (seed, stream), against a server
// that always refuses, and returns the 11 waits between the attempts.
func seededWaits(t *testing.T, srv *httptest.Server, o Options, seed, stream uint64) []time.Duration {
	t.Helper()
	clock := newFakeClock()
	o.MaxAttempts, o.MaxElapsed = 12, time.Hour
	o.Clock, o.Next, o.Rand = clock, srv.Client().Transport, rand.New(rand.NewPCG(seed, stream)).Float64
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	resp, err := NewTransport(o).RoundTrip(req)
	if err != nil {
		t.Fatalf("seed %d: RoundTrip error: %v", seed, err)
	}
	resp.Body.Close()
	waits := clock.Waits()
	if len(waits) != 11 {
		t.Fatalf("seed %d: %d waits; want 11", seed, len(waits))
	}
	return waits
}

func lens(ss []string) []int {
	out := make([]int, len(ss))
	for i, s := range ss {
		out[i] = len(s)
	}
	return out
}

// TestTransportRetryAfterJitterBounds checks, over random sources, that a
// Retry-After of d with RetryAfterJitter j waits within [d, d+j].
func TestTransportRetryAfterJitterBounds(t *testing.T) {
	const d, j = 2 * time.Second, 3 * time.Second
	_, srv := newServer(t, reply{status: 429, header: map[string][]string{"Retry-After": {"2"}}})
	for seed := range uint64(20) {
		waits := seededWaits(t, srv, Options{RetryAfterJitter: j}, seed, 2)
		for n, w := range waits {
			if w < d || w > d+j {
				t.Errorf("seed %d: wait before retry %d = %v; want within [%v, %v]", seed, n, w, d, d+j)
			}
		}
	}
}
