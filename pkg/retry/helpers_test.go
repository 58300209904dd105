package retry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// t0 is where fake time starts: a whole second, so HTTP-dates are exact.
var t0 = time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC)

// fakeClock advances only when slept on and records each wait.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	waits []time.Duration
}

func newFakeClock() *fakeClock { return &fakeClock{now: t0} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.waits = append(c.waits, d)
	return nil
}

func (c *fakeClock) Waits() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.waits...)
}

// fixedRand always returns r.
func fixedRand(r float64) func() float64 { return func() float64 { return r } }

// reply is one scripted answer. A nil header value suppresses the header
// (net/http would otherwise add Date).
type reply struct {
	status int
	header map[string][]string
	body   string
}

// scripted answers the i-th request with replies[i], repeating the last,
// and records what it was sent.
type scripted struct {
	mu      sync.Mutex
	replies []reply
	bodies  []string
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	i := min(len(s.bodies), len(s.replies)-1)
	s.bodies = append(s.bodies, string(body))
	rep := s.replies[i]
	s.mu.Unlock()
	for k, v := range rep.header {
		w.Header()[k] = v
	}
	w.WriteHeader(rep.status)
	_, _ = io.WriteString(w, rep.body)
}

func (s *scripted) Bodies() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.bodies...)
}

func newServer(t *testing.T, replies ...reply) (*scripted, *httptest.Server) {
	t.Helper()
	s := &scripted{replies: replies}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv
}

// roundTripFunc adapts a function to http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// trackedBody records how a response body was consumed.
type trackedBody struct {
	io.ReadCloser
	mu     sync.Mutex
	read   int64
	closed bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.mu.Lock()
	b.read += int64(n)
	b.mu.Unlock()
	return n, err
}

func (b *trackedBody) Close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	return b.ReadCloser.Close()
}

func (b *trackedBody) state() (read int64, closed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.read, b.closed
}

// tracking wraps a RoundTripper, counting attempts and tracking bodies.
type tracking struct {
	next   http.RoundTripper
	mu     sync.Mutex
	calls  int
	bodies []*trackedBody
}

func (tr *tracking) RoundTrip(r *http.Request) (*http.Response, error) {
	tr.mu.Lock()
	tr.calls++
	tr.mu.Unlock()
	resp, err := tr.next.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	b := &trackedBody{ReadCloser: resp.Body}
	resp.Body = b
	tr.mu.Lock()
	tr.bodies = append(tr.bodies, b)
	tr.mu.Unlock()
	return resp, nil
}

func (tr *tracking) Calls() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.calls
}
