package retry

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// failingClock is a fakeClock whose sleeps are cut short by err.
type failingClock struct {
	*fakeClock
	err error
}

func (c failingClock) Sleep(context.Context, time.Duration) error { return c.err }

func TestPaceSpacesEveryAttempt(t *testing.T) {
	s, srv := newServer(t,
		reply{status: 503, header: map[string][]string{"Retry-After": {"0"}}},
		reply{status: 503, header: map[string][]string{"Retry-After": {"0"}}},
		reply{status: 200, body: "ok"})
	clock := newFakeClock()
	pace := rate.NewLimiter(2, 1) // one attempt every 500ms
	tr := NewTransport(Options{Clock: clock, Pace: pace, Rand: fixedRand(0)})
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || len(s.Bodies()) != 3 {
		t.Fatalf("status %d after %d attempts, want 200 after 3", resp.StatusCode, len(s.Bodies()))
	}
	// The server said retry at once (0); the pace made each retry wait
	// for its token: the first attempt spent the burst.
	want := []time.Duration{0, 500 * time.Millisecond, 0, 500 * time.Millisecond}
	if got := clock.Waits(); !slices.Equal(got, want) {
		t.Errorf("waits %v, want %v (Retry-After 0, then the pace)", got, want)
	}

	// The next request, a fresh RoundTrip, waits its turn as well: the
	// pace is across requests, not within one.
	req, _ = http.NewRequest(http.MethodGet, srv.URL, nil)
	if resp, err = tr.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := clock.Waits(); !slices.Equal(got[len(want):], []time.Duration{500 * time.Millisecond}) {
		t.Errorf("second request waited %v, want [500ms]", got[len(want):])
	}
}

func TestPaceNonReplayableRequest(t *testing.T) {
	s, srv := newServer(t, reply{status: 200})
	clock := newFakeClock()
	pace := rate.NewLimiter(1, 1)
	tr := NewTransport(Options{Clock: clock, Pace: pace})
	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("x"))
		req.GetBody = nil // sent once, but still paced
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if got := clock.Waits(); !slices.Equal(got, []time.Duration{time.Second}) || len(s.Bodies()) != 2 {
		t.Errorf("waits %v and %d requests, want [1s] and 2", got, len(s.Bodies()))
	}
}

func TestPaceRefusals(t *testing.T) {
	cancelled := errors.New("clock stopped")
	deadline, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	tests := []struct {
		name    string
		ctx     context.Context
		clock   Clock
		pace    *rate.Limiter
		want    error  // errors.Is
		wantMsg string // in the error
	}{
		{"burst 0 can never send", context.Background(), newFakeClock(), rate.NewLimiter(1, 0), nil, "can never allow"},
		{"a wait past the deadline is not begun", deadline, newFakeClock(), rate.NewLimiter(0.1, 1), context.DeadlineExceeded, "past the context deadline"},
		{"a wait cut short", context.Background(), failingClock{newFakeClock(), cancelled}, rate.NewLimiter(0.1, 1), cancelled, "pacing attempt 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := &tracking{next: http.DefaultTransport}
			tt.pace.Allow() // spend the burst, if any
			now := tt.clock.Now()
			before := tt.pace.TokensAt(now)
			o := Options{Clock: tt.clock, Pace: tt.pace, Next: tr}
			body := &trackedBody{ReadCloser: http.NoBody}
			req, _ := http.NewRequestWithContext(tt.ctx, http.MethodPut, "http://127.0.0.1:1/", body)
			req.GetBody = func() (io.ReadCloser, error) { return http.NoBody, nil }
			_, err := NewTransport(o).RoundTrip(req)
			if err == nil || !strings.Contains(err.Error(), tt.wantMsg) || (tt.want != nil && !errors.Is(err, tt.want)) {
				t.Fatalf("err %v, want %v containing %q", err, tt.want, tt.wantMsg)
			}
			if tr.Calls() != 0 {
				t.Errorf("%d attempts sent, want none", tr.Calls())
			}
			if _, closed := body.state(); !closed {
				t.Error("request body not closed (RoundTripper contract)")
			}
			if after := tt.pace.TokensAt(now); after != before {
				t.Errorf("tokens %v after the refusal, want %v back", after, before)
			}
		})
	}
}
