package retry_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

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

func ExampleOptions_pace() {
	// A server whose limit is 100 requests a second: pace the client at
	// 80 a second, bursts of 10, retries included.
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
	}))
	defer srv.Close()

	client := &http.Client{Transport: retry.NewTransport(retry.Options{
		Pace: rate.NewLimiter(80, 10),
	})}
	start := time.Now()
	for range 12 { // the burst, then one every 12.5ms
		resp, err := client.Get(srv.URL)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
	}
	fmt.Println(calls.Load(), "requests, the last two paced:", time.Since(start) >= 20*time.Millisecond)
	// Output: 12 requests, the last two paced: true
}
