package httplimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConcurrency: 64 clients over HTTP/2 against a limit of 5
// requests at once per tenant, on a real handler: the handler never runs
// more than 5 at once, the rest get 429 with a Retry-After, and every slot
// is given back, in memory and on Redis.
func TestConcurrency(t *testing.T) {
	for name, leases := range map[string]Leases{
		"memory": memoryLeases(t),
		"redis":  redisLeases(t),
	} {
		t.Run(name, func(t *testing.T) {
			var running, most atomic.Int64
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := running.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(2 * time.Millisecond)
				running.Add(-1)
				fmt.Fprintln(w, "ok")
			})
			tenant := func(r *http.Request) (string, bool) { return r.Header.Get("X-Tenant"), true }
			mw, err := Concurrency(ConcurrencyOptions{Leases: leases, Key: tenant, Limit: 5, TTL: 10 * time.Second, Name: "reports"})
			if err != nil {
				t.Fatal(err)
			}
			// HTTP/2: the 64 clients' requests multiplexed on few connections,
			// as a proxy sends them.
			srv := httptest.NewUnstartedServer(mw(handler))
			srv.EnableHTTP2 = true
			srv.StartTLS()
			defer srv.Close()
			client := srv.Client()
			var ok, refused atomic.Int64
			var wg sync.WaitGroup
			for range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 20 {
						req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
						req.Header.Set("X-Tenant", "acme")
						resp, err := client.Do(req)
						if err != nil {
							t.Error(err)
							return
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						switch resp.StatusCode {
						case http.StatusOK:
							ok.Add(1)
						case http.StatusTooManyRequests:
							refused.Add(1)
							if resp.Header.Get("Retry-After") == "" {
								t.Error("a 429 without Retry-After")
							}
						default:
							t.Errorf("status %d", resp.StatusCode)
						}
					}
				}()
			}
			wg.Wait()
			if most.Load() > 5 {
				t.Errorf("the handler ran %d at once; the limit is 5", most.Load())
			}
			if ok.Load() == 0 {
				t.Error("nothing served")
			}
			// Every slot came back: five new holders fit at once.
			for i := range 5 {
				if got, held, _, err := leases.Acquire(context.Background(), leaseKey("reports", "acme"), fmt.Sprint("after", i), 5, time.Second); !got || err != nil {
					t.Fatalf("slot %d after the load: %v (held %d), %v; a slot was not released", i, got, held, err)
				}
			}
			t.Logf("%s: %d served, %d refused, at most %d at once", name, ok.Load(), refused.Load(), most.Load())
		})
	}
}

type failingLeases struct{}

func (failingLeases) Acquire(context.Context, string, string, int64, time.Duration) (bool, int64, time.Duration, error) {
	return false, 0, 0, errors.New("connection refused")
}
func (failingLeases) Release(context.Context, string, string, int64, time.Duration) error { return nil }

// TestConcurrencyFailsOpen: a store that fails serves the request.
func TestConcurrencyFailsOpen(t *testing.T) {
	mw, err := Concurrency(ConcurrencyOptions{Leases: failingLeases{}, Key: func(*http.Request) (string, bool) { return "k", true }, Limit: 1, Name: "k"})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != http.StatusNoContent {
		t.Errorf("with the store failing: %d; want the handler's answer", rec.Code)
	}
	if _, err := Concurrency(ConcurrencyOptions{}); err == nil {
		t.Error("no options: no error")
	}
}
