package httplimit

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// holdSlot sends a request for value through mw to a handler that runs
// until release is called: the request holds its slot until then.
func holdSlot(t *testing.T, mw func(http.Handler) http.Handler, value string) (release func()) {
	t.Helper()
	entered, unblock, done := make(chan struct{}), make(chan struct{}), make(chan int, 1)
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(entered)
		<-unblock
	}))
	go func() {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set("X-Key", value)
		h.ServeHTTP(rec, req)
		done <- rec.Code
	}()
	select {
	case <-entered:
	case code := <-done:
		t.Fatalf("the first request for %q was answered %d; want it to hold a slot", value, code)
	case <-time.After(10 * time.Second):
		t.Fatalf("the first request for %q never reached the handler", value)
	}
	return func() {
		close(unblock)
		if code := <-done; code != http.StatusOK {
			t.Errorf("the held request for %q: %d; want 200", value, code)
		}
	}
}

// status is the status a request for value gets through mw.
func status(mw func(http.Handler) http.Handler, value string) int {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("X-Key", value)
	mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(rec, req)
	return rec.Code
}

// TestConcurrencyNames is finding 9 of issue 21: two Concurrency limits
// left at the default Name shared their keys, so "alice" the tenant held
// the slot of "alice" the user; and "sluice:" + Name + ":" + value let
// Name "a:b" with value "c" share the slots of Name "a" with value "b:c".
// A limit now needs a Name, and its slots are those of (Name, value) and
// no other pair's; two middlewares with one Name on one store are one
// limit, as the replicas of a service are.
func TestConcurrencyNames(t *testing.T) {
	key := Header("X-Key")
	for _, o := range []ConcurrencyOptions{
		{Key: key, Limit: 1},
		{Key: key, Limit: 1, Name: "bad\nname"},
		{Key: key, Limit: 1, Name: "admin\u202etxt.exe"},
		{Key: key, Limit: 1, Name: "acme\xff"},
		{Key: key, Limit: 1, Name: strings.Repeat("n", 1<<10)},
	} {
		o.Leases = memoryLeases(t)
		if _, err := Concurrency(o); err == nil {
			t.Errorf("Concurrency(Name %.20q) = nil error; want a Name refused", o.Name)
		}
	}
	for _, c := range []struct {
		name          string
		nameA, valueA string
		nameB, valueB string
		shared        bool
	}{
		{"tenant and user", "tenant", "alice", "user", "alice", false},
		{"separator in the name", "a:b", "c", "a", "b:c", false},
		{"hash tag", "t", "{x}", "u", "{x}", false},
		{"replicas of one limit", "reports", "alice", "reports", "alice", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			leases := memoryLeases(t)
			mw := func(name string) func(http.Handler) http.Handler {
				m, err := Concurrency(ConcurrencyOptions{Leases: leases, Key: key, Limit: 1, Name: name})
				if err != nil {
					t.Fatal(err)
				}
				return m
			}
			a, b := mw(c.nameA), mw(c.nameB)
			release := holdSlot(t, a, c.valueA)
			defer release()
			want := http.StatusOK
			if c.shared {
				want = http.StatusTooManyRequests
			}
			if got := status(b, c.valueB); got != want {
				t.Errorf("(%q, %q) holding its one slot, a request of (%q, %q): %d; want %d", c.nameA, c.valueA, c.nameB, c.valueB, got, want)
			}
			if got := status(a, c.valueA); got != http.StatusTooManyRequests {
				t.Errorf("(%q, %q) holding its one slot, another of its own: %d; want 429", c.nameA, c.valueA, got)
			}
		})
	}
}

// TestConcurrencyLeaseKey: a lease key is short and carries one hash tag
// of its own, whatever the value (1 MiB, braces, bytes that are not
// UTF-8), so it fits the stores' bound on keys and one value cannot steer
// it to a Cluster slot.
func TestConcurrencyLeaseKey(t *testing.T) {
	for _, v := range []string{"alice", strings.Repeat("v", 1<<20), "{tag}", "\xff\xfe"} {
		if k := leaseKey("n", v); len(k) > 64 || strings.Count(k, "{") != 1 || !strings.HasSuffix(k, "}") {
			t.Errorf("leaseKey(n, %.20q) = %.80q (%d bytes); want a short key ending in its one hash tag", v, k, len(k))
		}
	}
}
