package retry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func TestTransportConnectionErrors(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens: every attempt is refused
	tests := []struct {
		name      string
		method    string
		header    string
		wantCalls int
	}{
		{"GET is retried", http.MethodGet, "", 3},
		{"DELETE is retried", http.MethodDelete, "", 3},
		{"POST is not", http.MethodPost, "", 1},
		{"PATCH with an Idempotency-Key is", http.MethodPatch, "Idempotency-Key", 3},
		{"POST with an X-Idempotency-Key is", http.MethodPost, "X-Idempotency-Key", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next := &tracking{next: &http.Transport{}}
			clock := newFakeClock()
			tr := NewTransport(Options{MaxAttempts: 3, Clock: clock, Next: next, Rand: fixedRand(0.5)})
			req, _ := http.NewRequest(tt.method, url, nil)
			if tt.header != "" {
				req.Header.Set(tt.header, "k1")
			}
			resp, err := tr.RoundTrip(req)
			if resp != nil || !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("RoundTrip = %v, %v; want nil, connection refused", resp, err)
			}
			if got := next.Calls(); got != tt.wantCalls {
				t.Errorf("%d attempts; want %d", got, tt.wantCalls)
			}
			if got := len(clock.Waits()); got != tt.wantCalls-1 {
				t.Errorf("%d waits; want %d", got, tt.wantCalls-1)
			}
		})
	}
}

func TestTransportErrorThenSuccess(t *testing.T) {
	_, srv := newServer(t, reply{status: 200, body: "ok"})
	var calls atomic.Int32
	flaky := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if calls.Add(1) == 1 {
			return nil, errors.New("connection reset by peer")
		}
		return srv.Client().Transport.RoundTrip(r)
	})
	tr := NewTransport(Options{Clock: newFakeClock(), Next: flaky, Rand: fixedRand(0)})
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("RoundTrip error: %v", err)
	}
	defer resp.Body.Close()
	if body, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || string(body) != "ok" || calls.Load() != 2 {
		t.Errorf("RoundTrip = %d %q after %d calls; want 200 \"ok\" after 2", resp.StatusCode, body, calls.Load())
	}
}

// blockingClock's Sleep waits for ctx alone, announcing each wait.
type blockingClock struct {
	fakeClock
	sleeping chan struct{}
}

func (c *blockingClock) Sleep(ctx context.Context, d time.Duration) error {
	c.sleeping <- struct{}{}
	<-ctx.Done()
	return ctx.Err()
}

func TestTransportContextCancelledDuringWait(t *testing.T) {
	_, srv := newServer(t, reply{status: 429, header: map[string][]string{"Retry-After": {"3600"}}})
	clock := &blockingClock{fakeClock: fakeClock{now: t0}, sleeping: make(chan struct{}, 1)}
	next := &tracking{next: srv.Client().Transport}
	tr := NewTransport(Options{MaxElapsed: 2 * time.Hour, Clock: clock, Next: next})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	type result struct {
		resp *http.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := tr.RoundTrip(req)
		done <- result{resp, err}
	}()
	<-clock.sleeping
	cancel()
	select {
	case r := <-done:
		if r.resp != nil || !errors.Is(r.err, context.Canceled) {
			t.Errorf("RoundTrip = %v, %v; want nil, context.Canceled", r.resp, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RoundTrip still waiting 10s after its context was cancelled")
	}
	if next.Calls() != 1 {
		t.Errorf("%d attempts; want 1", next.Calls())
	}
	if _, closed := next.bodies[0].state(); !closed {
		t.Error("the discarded 429's body was not closed")
	}
}

func TestTransportContextCancelledDuringAttempt(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var calls int
	next := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		calls++
		cancel()
		return nil, r.Context().Err()
	})
	tr := NewTransport(Options{Clock: newFakeClock(), Next: next})
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://example.invalid/", nil)
	if _, err := tr.RoundTrip(req); !errors.Is(err, context.Canceled) || calls != 1 {
		t.Errorf("RoundTrip error %v after %d calls; want context.Canceled after 1", err, calls)
	}
}

func TestTransportDiscardsBodies(t *testing.T) {
	big := strings.Repeat("e", 1<<20)
	_, srv := newServer(t,
		reply{status: 503, body: "small error page"},
		reply{status: 503, body: big},
		reply{status: 503, body: "another"},
		reply{status: 200, body: "ok"})
	next := &tracking{next: srv.Client().Transport}
	tr := NewTransport(Options{Clock: newFakeClock(), Next: next, Rand: fixedRand(0)})
	var reused atomic.Int32
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		if info.Reused {
			reused.Add(1)
		}
	}}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace),
		http.MethodGet, srv.URL, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("RoundTrip error: %v", err)
	}
	if len(next.bodies) != 4 {
		t.Fatalf("%d attempts; want 4", len(next.bodies))
	}
	for i, b := range next.bodies[:3] {
		read, closed := b.state()
		if !closed || read > drainLimit {
			t.Errorf("discarded body %d: closed %v after reading %d bytes; want closed after at most %d",
				i, closed, read, drainLimit)
		}
	}
	if _, closed := next.bodies[3].state(); closed {
		t.Error("the returned body was closed before the caller read it")
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "ok" {
		t.Errorf("body = %q; want \"ok\"", body)
	}
	// The drained small bodies give their connection back; the 1 MiB one
	// is not drained, so the attempt after it needs a new connection.
	if got := reused.Load(); got != 2 {
		t.Errorf("%d attempts reused a connection; want 2", got)
	}
}

func TestTransportRewindFails(t *testing.T) {
	_, srv := newServer(t, reply{status: 503, body: "busy"}, reply{status: 200})
	tr := NewTransport(Options{Clock: newFakeClock(), Next: srv.Client().Transport})
	req, _ := http.NewRequest(http.MethodPut, srv.URL, strings.NewReader("payload"))
	req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("spool gone") }
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("RoundTrip error: %v; want the 503", err)
	}
	defer resp.Body.Close()
	if body, _ := io.ReadAll(resp.Body); resp.StatusCode != 503 || string(body) != "busy" {
		t.Errorf("RoundTrip = %d %q; want 503 \"busy\"", resp.StatusCode, body)
	}
}

func TestTransportDoesNotModifyRequest(t *testing.T) {
	_, srv := newServer(t, reply{status: 503}, reply{status: 200})
	tr := NewTransport(Options{Clock: newFakeClock(), Next: srv.Client().Transport})
	body := io.NopCloser(strings.NewReader("payload"))
	req, _ := http.NewRequest(http.MethodPut, srv.URL, body)
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader("payload")), nil }
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if req.Body != body {
		t.Error("RoundTrip replaced the caller's request body")
	}
}

func TestZeroTransport(t *testing.T) {
	_, srv := newServer(t, reply{status: 200, body: "ok"})
	resp, err := (&http.Client{Transport: &Transport{}}).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if body, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || string(body) != "ok" {
		t.Errorf("Get = %d %q; want 200 \"ok\"", resp.StatusCode, body)
	}
}

func TestSystemClockSleep(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	if err := (systemClock{}).Sleep(ctx, 0); err != nil {
		t.Errorf("Sleep(0) = %v; want nil", err)
	}
	cancel()
	done := make(chan error, 1)
	go func() { done <- (systemClock{}).Sleep(ctx, time.Hour) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Sleep(cancelled, 1h) = %v; want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Sleep(cancelled, 1h) did not return")
	}
}

type idleCloser struct {
	http.RoundTripper
	closed int
}

func (c *idleCloser) CloseIdleConnections() { c.closed++ }

func TestTransportCloseIdleConnections(t *testing.T) {
	next := &idleCloser{RoundTripper: http.DefaultTransport}
	(&http.Client{Transport: NewTransport(Options{Next: next})}).CloseIdleConnections()
	if next.closed != 1 {
		t.Errorf("Next.CloseIdleConnections called %d times; want 1", next.closed)
	}
	NewTransport(Options{Next: roundTripFunc(nil)}).CloseIdleConnections() // Next without it: no-op
}

// deafClock's Sleep ignores ctx, as a Clock honouring its contract must
// not, to show that the Transport itself never retries once ctx is done.
type deafClock struct{ fakeClock }

func (c *deafClock) Sleep(_ context.Context, d time.Duration) error {
	return c.fakeClock.Sleep(context.Background(), d)
}

func TestTransportContextDoneAfterRetryableResponse(t *testing.T) {
	_, srv := newServer(t, reply{status: 503, body: "busy"}, reply{status: 200})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	next := &tracking{next: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := srv.Client().Transport.RoundTrip(r)
		cancel() // the caller gives up while the 503 is on its way back
		return resp, err
	})}
	tr := NewTransport(Options{Clock: &deafClock{fakeClock{now: t0}}, Next: next})
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	resp, err := tr.RoundTrip(req)
	if resp != nil || !errors.Is(err, context.Canceled) {
		t.Errorf("RoundTrip = %v, %v; want nil, context.Canceled", resp, err)
	}
	if got := next.Calls(); got != 1 {
		t.Errorf("%d attempts; want 1 (none after the context was done)", got)
	}
	if _, closed := next.bodies[0].state(); !closed {
		t.Error("the discarded 503's body was not closed")
	}
}

// TestTransportConcurrent shares one Transport among goroutines whose
// requests each fail twice before succeeding; run with -race.
func TestTransportConcurrent(t *testing.T) {
	const workers, each = 16, 20
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.URL.Query().Get("id")
		mu.Lock()
		seen[id]++
		n := seen[id]
		mu.Unlock()
		switch n {
		case 1:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		case 2:
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			_, _ = io.WriteString(w, id)
		}
	}))
	t.Cleanup(srv.Close)
	clock := newFakeClock()
	client := &http.Client{Transport: NewTransport(Options{MaxElapsed: time.Hour, Clock: clock,
		Next: srv.Client().Transport})} // Rand: the default, math/rand/v2
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				id := fmt.Sprintf("%d-%d", w, i)
				resp, err := client.Get(srv.URL + "?id=" + id)
				if err != nil {
					errs <- err
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || string(body) != id {
					errs <- fmt.Errorf("Get(%s) = %d %q; want 200 %q", id, resp.StatusCode, body, id)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got, want := len(clock.Waits()), 2*workers*each; got != want {
		t.Errorf("%d waits; want %d (two per request)", got, want)
	}
	var retryAfters int
	for _, w := range clock.Waits() {
		switch {
		case w == time.Second:
			retryAfters++ // or, rarely, a backoff that drew exactly 1s
		case w < 0 || w > 2*DefaultBase:
			t.Errorf("wait %v; want 1s (Retry-After) or within [0, %v] (the second backoff)", w, 2*DefaultBase)
		}
	}
	if retryAfters < workers*each {
		t.Errorf("%d waits of 1s; want at least %d (one Retry-After per request)", retryAfters, workers*each)
	}
}
