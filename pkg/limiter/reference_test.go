package limiter

import (
	"testing"
	"time"
)

// TestShareThreshold: every value a share_threshold wildcard matches
// counts on one counter; a wildcard without it counts each value apart.
func TestShareThreshold(t *testing.T) {
	h := start(t, Options{Config: configOf(t, referenceConfig)})
	for i, want := range []string{"OK:OK", "OK:OK", "OVER_LIMIT:OVER_LIMIT"} {
		file := []string{"files/a", "files/b", "files/c"}[i]
		if got := verdict(h.decide(t, edge(desc("files", file)))); got != want {
			t.Errorf("request %d (%s) on the shared limit of 2: %s; want %s", i+1, file, got, want)
		}
	}
	for _, page := range []string{"pages/a", "pages/b", "pages/c", "pages/a"} {
		if got := verdict(h.decide(t, edge(desc("pages", page)))); got != "OK:OK" {
			t.Errorf("%s on its own counter: %s; want OK", page, got)
		}
	}
}

// TestReferenceCounting: with ReferenceCounting a limit that names no
// algorithm counts as the reference's fixed window, and every hit counts
// on every limit, a rejected request's included; without it, a request
// one limit rejects costs the others nothing.
func TestReferenceCounting(t *testing.T) {
	cfg := configOf(t, `domain: edge
descriptors:
  - key: tight
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: wide
    rate_limit: {unit: minute, requests_per_unit: 5}
`)
	both := edge(desc("tight", "t"), desc("wide", "w"))
	for _, reference := range []bool{true, false} {
		h := start(t, Options{Config: cfg, ReferenceCounting: reference})
		for i, want := range []string{"OK:OK,OK", "OVER_LIMIT:OVER_LIMIT,OK", "OVER_LIMIT:OVER_LIMIT,OK"} {
			if got := verdict(h.decide(t, both)); got != want {
				t.Errorf("reference %v, request %d: %s; want %s", reference, i+1, got, want)
			}
		}
		left := h.decide(t, edge(desc("wide", "w"))).Statuses[0].Remaining
		// The reference counted all four requests on wide (5 − 4 = 1);
		// sluice only the admitted two (the first, and this one: 3).
		want := uint32(3)
		if reference {
			want = 1
		}
		if left != want {
			t.Errorf("reference %v: wide has %d left after the requests; want %d", reference, left, want)
		}
	}
}

// TestReferenceCountingFixedWindow: with ReferenceCounting a limit that
// names no algorithm turns over with the clock's minute, as the
// reference's fixed window does; a token bucket would still be empty.
func TestReferenceCountingFixedWindow(t *testing.T) {
	cfg := configOf(t, `domain: edge
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 4}
`)
	minute := 60 * second
	for _, reference := range []bool{true, false} {
		h := start(t, Options{Config: cfg, ReferenceCounting: reference})
		h.store.now.Store(1000*minute - 100_000) // 0.1 s before a minute turns
		for i := range 5 {
			want := "OK:OK"
			if i == 4 {
				want = "OVER_LIMIT:OVER_LIMIT"
			}
			if got := verdict(h.decide(t, edge(desc("k", "x")))); got != want {
				t.Fatalf("reference %v, request %d: %s; want %s", reference, i+1, got, want)
			}
		}
		h.store.now.Store(1000*minute + 100_000) // 0.1 s after
		want := "OVER_LIMIT:OVER_LIMIT"          // a token bucket refilled a hundredth of a token
		if reference {
			want = "OK:OK" // a new fixed window
		}
		if got := verdict(h.decide(t, edge(desc("k", "x")))); got != want {
			t.Errorf("reference %v, after the minute turned: %s; want %s", reference, got, want)
		}
	}
}

// TestCalendarMonth: a fixed window on Paris's calendar turns at midnight
// on the 1st, local time, and says so in Retry-After; the reference's
// 30-day month does not.
func TestCalendarMonth(t *testing.T) {
	cfg := configOf(t, `domain: edge
descriptors:
  - key: calendar
    rate_limit: {unit: month, requests_per_unit: 2, algorithm: fixed_window, calendar: Europe/Paris}
  - key: days30
    rate_limit: {unit: month, requests_per_unit: 2, algorithm: fixed_window}
`)
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, Options{Config: cfg})
	before := time.Date(2026, 1, 31, 23, 59, 59, 500_000_000, paris)
	h.store.now.Store(before.UnixMicro())
	for _, key := range []string{"calendar", "days30"} {
		for i, want := range []string{"OK:OK", "OK:OK", "OVER_LIMIT:OVER_LIMIT"} {
			if got := verdict(h.decide(t, edge(desc(key, "tenant")))); got != want {
				t.Fatalf("%s request %d: %s; want %s", key, i+1, got, want)
			}
		}
	}
	if got := headerMap(h.decide(t, edge(desc("calendar", "tenant"))))[HeaderRetryAfter]; got != "1" {
		t.Errorf("Retry-After half a second before the 1st: %q; want 1", got)
	}
	h.store.now.Store(before.Add(time.Second).UnixMicro()) // 1 February, 00:00:00.5 in Paris
	if got := verdict(h.decide(t, edge(desc("calendar", "tenant")))); got != "OK:OK" {
		t.Errorf("the calendar month on the 1st: %s; want OK", got)
	}
	if got := verdict(h.decide(t, edge(desc("days30", "tenant")))); got != "OVER_LIMIT:OVER_LIMIT" {
		t.Errorf("the 30-day month on the 1st: %s; want still OVER_LIMIT", got)
	}
}
