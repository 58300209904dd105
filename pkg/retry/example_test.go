package retry_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/pkg/retry"
)

func ExampleTransport() {
	// A server that is over its limit on the first request and says to
	// come back at once.
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "0")
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return
		}
		fmt.Fprint(w, "hello")
	}))
	defer srv.Close()

	client := &http.Client{
		Transport: retry.NewTransport(retry.Options{MaxAttempts: 3, MaxElapsed: 10 * time.Second}),
		Timeout:   30 * time.Second, // bounds every attempt and wait together
	}
	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body), "after", calls.Load(), "attempts")
	// Output: 200 hello after 2 attempts
}

func ExampleLimiter() {
	// Pace bulk work at 2 requests a second with bursts of 3, stepping
	// through time instead of sleeping.
	l := retry.NewLimiter(2, 3)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, at := range []time.Duration{0, 0, 0, 0, 250 * time.Millisecond, 500 * time.Millisecond} {
		fmt.Printf("t+%v: %v\n", at, l.AllowAt(t0.Add(at), 1))
	}
	wait, _ := l.ReserveAt(t0.Add(500*time.Millisecond), 1, time.Minute)
	fmt.Println("next token in", wait)

	// In real code, Wait blocks until a token is due.
	if err := retry.NewLimiter(10, 1).Wait(context.Background()); err != nil {
		fmt.Println(err)
	}
	// Output:
	// t+0s: true
	// t+0s: true
	// t+0s: true
	// t+0s: false
	// t+250ms: false
	// t+500ms: true
	// next token in 500ms
}
