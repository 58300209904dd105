package httplimit

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"
)

func queued(t *testing.T, clock *fakeClock, q Queue) *Middleware {
	t.Helper()
	m, err := New(Options{Limiter: engine(t, clock), Domain: "api", Queue: &q,
		Descriptors: []Descriptor{{{Key: "api_key", Value: Header("X-Api-Key")}}}})
	if err != nil {
		t.Fatal(err)
	}
	m.queue.clock = clock
	return m
}

// TestQueueDelays: over the limit of one a second, requests are delayed to
// leave one a second, in turn, and then served, not refused.
func TestQueueDelays(t *testing.T) {
	clock := newFakeClock()
	m := queued(t, clock, Queue{Size: 10, MaxWait: 5 * time.Second})
	start := clock.Now()
	for i := range 3 {
		rec := serve(t, m, get("/", "X-Api-Key", "k"))
		if rec.Code != http.StatusOK {
			t.Fatalf("request %d: %d; want served after a delay", i+1, rec.Code)
		}
	}
	if want := []time.Duration{time.Second, time.Second}; !slices.Equal(clock.slept, want) {
		t.Errorf("delays %v; want %v (the first admitted at once, then one a second)", clock.slept, want)
	}
	if got := clock.Now().Sub(start); got != 2*time.Second {
		t.Errorf("three requests at one a second took %v; want 2s", got)
	}
}

// TestQueueRejectsWhenFull: a request that finds the queue full, or whose
// turn would come after MaxWait, is refused at once.
func TestQueueRejectsWhenFull(t *testing.T) {
	clock := newFakeClock()
	m := queued(t, clock, Queue{Size: 1, MaxWait: 5 * time.Second})
	if rec := serve(t, m, get("/", "X-Api-Key", "k")); rec.Code != http.StatusOK {
		t.Fatalf("first request: %d", rec.Code)
	}
	// Park the second in the queue.
	clock.hold, clock.parked = make(chan struct{}), make(chan struct{})
	second := make(chan int)
	go func() { second <- serve(t, m, get("/", "X-Api-Key", "k")).Code }()
	<-clock.parked
	if rec := serve(t, m, get("/", "X-Api-Key", "k")); rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Errorf("with the queue full: %d, Retry-After %q; want 429 with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
	}
	close(clock.hold)
	if code := <-second; code != http.StatusOK {
		t.Errorf("the queued request: %d; want served after its delay", code)
	}

	// MaxWait 1.5s: the next turn is a second away, the one after two.
	clock = newFakeClock()
	m = queued(t, clock, Queue{Size: 10, MaxWait: 1500 * time.Millisecond})
	serve(t, m, get("/", "X-Api-Key", "k"))
	clock.hold, clock.parked = make(chan struct{}), make(chan struct{})
	go func() { second <- serve(t, m, get("/", "X-Api-Key", "k")).Code }()
	<-clock.parked // waits for its turn at +1s
	if rec := serve(t, m, get("/", "X-Api-Key", "k")); rec.Code != http.StatusTooManyRequests {
		t.Errorf("a turn 2s away with MaxWait 1.5s: %d; want 429 at once", rec.Code)
	}
	close(clock.hold)
	if code := <-second; code != http.StatusOK {
		t.Errorf("the request within MaxWait: %d; want served", code)
	}
}

// TestQueueUnderWindowLimit: a fixed window gives nothing back until it
// turns, so a queued request is refused once MaxWait has passed.
func TestQueueUnderWindowLimit(t *testing.T) {
	clock := newFakeClock()
	m, err := New(Options{Limiter: engine(t, clock), Domain: "api", Queue: &Queue{Size: 10, MaxWait: time.Minute},
		Descriptors: []Descriptor{{{Key: "client", Value: ClientIP()}}}})
	if err != nil {
		t.Fatal(err)
	}
	m.queue.clock = clock
	for range 3 {
		serve(t, m, get("/"))
	}
	// The window (3 a minute, 45 s left) turns within the minute of MaxWait:
	// the fourth waits its turns, one every 20 s, until then.
	if rec := serve(t, m, get("/")); rec.Code != http.StatusOK {
		t.Fatalf("fourth request: %d; want served once the window turned", rec.Code)
	}
	if waited := clock.Now().Sub(newFakeClock().Now()); waited < 45*time.Second || waited > time.Minute {
		t.Errorf("waited %v; want from 45s (the window's end) to the 1m MaxWait", waited)
	}
}

// TestQueueReleasesAbandonedTurn: a queued client that goes away frees its
// turn for the next.
func TestQueueReleasesAbandonedTurn(t *testing.T) {
	clock := newFakeClock()
	m := queued(t, clock, Queue{Size: 10, MaxWait: 5 * time.Second})
	serve(t, m, get("/", "X-Api-Key", "k"))
	clock.hold, clock.parked = make(chan struct{}), make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		serve(t, m, get("/", "X-Api-Key", "k").WithContext(ctx))
	}()
	<-clock.parked
	cancel()
	<-gone
	clock.hold = nil
	clock.slept = nil
	if rec := serve(t, m, get("/", "X-Api-Key", "k")); rec.Code != http.StatusOK {
		t.Fatalf("the next request: %d", rec.Code)
	}
	if want := []time.Duration{time.Second}; !slices.Equal(clock.slept, want) {
		t.Errorf("the next request waited %v; want %v (the abandoned turn freed)", clock.slept, want)
	}
}
