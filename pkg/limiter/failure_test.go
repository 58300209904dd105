package limiter

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/breaker"
	"github.com/sluicehq/sluice/pkg/cache"
	"github.com/sluicehq/sluice/pkg/global"
)

// second is a second in the clockStore's unit, µs.
const second = int64(time.Second / time.Microsecond)

// TestFailureModes: while the store refuses connections, each failure mode
// decides (error: ErrUnavailable, which the caller's own failure mode
// decides); the breaker opens after its MinCalls failures and the store is
// not called again until the cooldown, when one probe closes it; each
// transition is logged once; and no failure-mode answer is remembered in
// the flag cache (it would hide the outage from the breaker and outlast it).
func TestFailureModes(t *testing.T) {
	r := edge(desc("remote_address", "x"))
	for _, tt := range []struct {
		mode FailureMode
		want string // the first request's codes; "" for ErrUnavailable
	}{
		{FailAllow, "OK:OK"},
		{FailDeny, "OVER_LIMIT:OVER_LIMIT"},
		{FailError, ""},
		{FailLocal, "OK:OK"},
	} {
		t.Run(tt.mode.String(), func(t *testing.T) {
			var logs bytes.Buffer
			flags, _ := cache.New(100)
			h := startStore(t, Options{Cache: flags}, StoreOptions{Mode: tt.mode, LocalShare: 0.5,
				Breaker: breaker.Options{MinCalls: 3}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			h.store.err = errors.New("connection refused")
			for i := range 10 {
				a, err := h.svc.Decide(context.Background(), r, DecideOptions{Content: true})
				if tt.mode == FailError {
					// The store's error is said while the breaker is closed.
					if !errors.Is(err, ErrUnavailable) || (i < 3) != strings.Contains(err.Error(), "connection refused") {
						t.Fatalf("request %d: %v; want ErrUnavailable", i, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("request %d: %v; want an answer", i, err)
				}
				want := tt.want
				if tt.mode == FailLocal && i > 0 {
					want = "OVER_LIMIT:OVER_LIMIT" // half of 3 a minute is 1 in this process
				}
				if got := verdict(a); got != want {
					t.Fatalf("request %d: %s; want %s", i, got, want)
				}
				st, hd := a.Statuses[0], headerMap(a)
				switch tt.mode {
				case FailAllow:
					if st.Remaining != 3 {
						t.Errorf("allow: %d left; want the limit untouched, 3", st.Remaining)
					}
				case FailDeny:
					if hd[HeaderReason] != "rate limit store unavailable" || hd[HeaderRetryAfter] != "1" || st.RetryAfter != time.Second ||
						!bytes.Contains(a.Body, []byte("The rate limit store is unavailable")) {
						t.Fatalf("deny: reason %q, Retry-After %q (%v), body %s; want the store named unavailable, a retry in 1 s",
							hd[HeaderReason], hd[HeaderRetryAfter], st.RetryAfter, a.Body)
					}
				}
			}
			// The breaker opened after 3 failures (all the calls it had
			// seen: the ratio 1 past 0.5, MinCalls 3): the store was not
			// called for the other 7.
			if n := h.store.calls.Load(); n != 3 {
				t.Errorf("store called %d times for 10 requests; want 3 (then the breaker opens)", n)
			}
			d := h.decider
			if d.Healthy() || d.State() != breaker.Open || d.Mode() != tt.mode {
				t.Errorf("Healthy() = %v, State() = %v, Mode() = %v; want false, open, %v", d.Healthy(), d.State(), d.Mode(), tt.mode)
			}
			if n := strings.Count(logs.String(), "unavailable"); n != 1 {
				t.Errorf("logged the outage %d times; want once:\n%s", n, logs.String())
			}
			if flags.Len() != 0 {
				t.Errorf("%d flags from failure-mode answers; want none", flags.Len())
			}
			m := h.metrics.Store
			if got := testutil.ToFloat64(m.failureMode.WithLabelValues(tt.mode.String())); got != 10 {
				t.Errorf("sluice_failure_mode_decisions_total = %v; want 10", got)
			}
			if got, up := testutil.ToFloat64(m.errors), testutil.ToFloat64(m.up); got != 3 || up != 0 {
				t.Errorf("sluice_store_errors_total = %v, sluice_store_up = %v; want 3, 0", got, up)
			}
			decided := h.decided(SourceFailureMode, "ok") + h.decided(SourceFailureMode, "over_limit")
			if tt.mode == FailError {
				decided = h.requests("error")
			}
			if decided != 10 {
				t.Errorf("10 requests decided by the failure mode counted %v times", decided)
			}
			// After the cooldown one probe succeeds and the breaker closes.
			h.store.err = nil
			h.store.now.Add(second)
			if _, err := h.svc.Decide(context.Background(), r, DecideOptions{Content: true}); err != nil {
				t.Fatal(err)
			}
			if !d.Healthy() || !strings.Contains(logs.String(), "recovered") || testutil.ToFloat64(m.up) != 1 || h.decided(SourceStore, "ok") != 1 {
				t.Errorf("after the store returned: Healthy() = %v, up %v, logs:\n%s", d.Healthy(), testutil.ToFloat64(m.up), logs.String())
			}
		})
	}
}

// lateStore answers nothing until its caller gives up, as a store whose
// replies this process has not got to yet (CPU saturation) looks.
type lateStore struct{ calls atomic.Int64 }

func (s *lateStore) Decide(ctx context.Context, _ []algorithm.Item, _ []algorithm.Result) error {
	s.calls.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

// TestOverloadIsShed: a store that has not answered by the time the
// caller's deadline is near, and has not failed, is not an outage: the
// request is decided in memory at the local share before the deadline,
// in every failure mode (never ErrUnavailable), the breaker stays closed,
// the store keeps being asked, and nothing is flagged.
func TestOverloadIsShed(t *testing.T) {
	r := edge(desc("remote_address", "x"))
	for _, mode := range []FailureMode{FailError, FailDeny, FailAllow, FailLocal} {
		t.Run(mode.String(), func(t *testing.T) {
			store := &lateStore{}
			flags, _ := cache.New(100)
			h := startStore(t, Options{Cache: flags}, StoreOptions{Store: store, Mode: mode, LocalShare: 0.5})
			for i := range 8 {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
				a, err := h.svc.Decide(ctx, r, DecideOptions{Content: true})
				cancel()
				if err != nil {
					t.Fatalf("request %d: %v; want a local answer", i, err)
				}
				want := "OK:OK" // half of 3 a minute: 1 admitted in this process
				if i > 0 {
					want = "OVER_LIMIT:OVER_LIMIT"
				}
				if got := verdict(a); got != want {
					t.Fatalf("request %d: %s; want %s", i, got, want)
				}
			}
			if !h.decider.Healthy() || store.calls.Load() != 8 {
				t.Errorf("healthy %v after %d store calls; want closed and all 8 asked", h.decider.Healthy(), store.calls.Load())
			}
			if ok, over := h.decided(SourceShed, "ok"), h.decided(SourceShed, "over_limit"); ok != 1 || over != 7 {
				t.Errorf("shed ok %v, over_limit %v; want 1, 7", ok, over)
			}
			if got := testutil.ToFloat64(h.metrics.Store.errors); got != 0 {
				t.Errorf("store errors = %v; want 0 (the store did not fail)", got)
			}
			if flags.Len() != 0 {
				t.Errorf("%d flags from shed answers; want none", flags.Len())
			}
		})
	}
}

// TestExactBatchIsNotShed: a request whose caller decides locally itself
// when the store is late (a sidecar: codes and times only) gets ErrLate,
// not an answer from this process's memory that the store would never
// count; a client's request is shed. MaxWait bounds a call without a
// deadline of its own.
func TestExactBatchIsNotShed(t *testing.T) {
	h := startStore(t, Options{}, StoreOptions{Store: &lateStore{}, MaxWait: 20 * time.Millisecond})
	r := edge(desc("api_key", "k"))
	if _, err := h.svc.Decide(context.Background(), r, DecideOptions{}); !errors.Is(err, ErrLate) {
		t.Errorf("a sidecar's request the store did not answer in time: %v; want ErrLate", err)
	}
	a, err := h.svc.Decide(context.Background(), r, DecideOptions{Content: true})
	if err != nil || verdict(a) != "OK:OK" || h.decided(SourceShed, "ok") != 1 {
		t.Errorf("a client's request the store did not answer in time: %v, shed %v; want shed", err, h.decided(SourceShed, "ok"))
	}
	if h.requests("late") != 1 || h.requests("ok") != 1 || !h.decider.Healthy() {
		t.Errorf("late %v, ok %v, healthy %v; want 1, 1, true", h.requests("late"), h.requests("ok"), h.decider.Healthy())
	}
}

// stalledStore is a store whose Redis has stopped answering.
type stalledStore struct{ calls atomic.Int64 }

func (s *stalledStore) Decide(context.Context, []algorithm.Item, []algorithm.Result) error {
	s.calls.Add(1)
	return global.ErrStalled
}

// TestStallIsShedUntilTheBreakerOpens: a Redis that has not answered for
// a while may only be waiting for a core: its requests are decided in
// memory, and while it answered anything within the last second the
// breaker is not told; silent for longer, its stalls are failures until
// the failure rate opens the breaker, then the failure mode decides
// (never ErrUnavailable before).
func TestStallIsShedUntilTheBreakerOpens(t *testing.T) {
	store := &stalledStore{}
	h := startStore(t, Options{}, StoreOptions{Store: store, Mode: FailError, Breaker: breaker.Options{MinCalls: 4}})
	r := edge(desc("api_key", "s"))
	// Within a second of its last answer (here: the start) a stall is
	// slowness: shed, the breaker untold.
	for i := range 6 {
		if _, err := h.svc.Decide(context.Background(), r, DecideOptions{Content: true}); err != nil || !h.decider.Healthy() {
			t.Fatalf("request %d, within a second of Redis's answer: %v, healthy %v; want a local answer, the breaker closed", i, err, h.decider.Healthy())
		}
	}
	if got := testutil.ToFloat64(h.metrics.Store.errors); got != 0 {
		t.Errorf("sluice_store_errors_total = %v after stalls within the second; want 0 (slowness is not the store's fault)", got)
	}
	store.calls.Store(0)
	h.store.now.Add(2 * second) // silent for longer: failures
	for i := range 6 {
		_, err := h.svc.Decide(context.Background(), r, DecideOptions{Content: true})
		if i < 3 && err != nil {
			t.Fatalf("request %d, breaker closed: %v; want a local answer", i, err)
		}
		if i >= 3 && !errors.Is(err, ErrUnavailable) {
			t.Fatalf("request %d, breaker open: %v; want ErrUnavailable (failure mode error)", i, err)
		}
	}
	if n := store.calls.Load(); n != 4 {
		t.Errorf("%d store calls; want 4 (then the breaker opened)", n)
	}
	if got := testutil.ToFloat64(h.metrics.Store.errors); got != 4 {
		t.Errorf("sluice_store_errors_total = %v; want the 4 stalls past the second", got)
	}
	if got := h.decided(SourceShed, "ok"); got != 9 {
		t.Errorf("shed %v requests; want the 6 stalls within the second and the 3 before the breaker opened", got)
	}
}

// TestParseFailureMode: every mode parses from its name; anything else is
// refused, naming the choices.
func TestParseFailureMode(t *testing.T) {
	for _, m := range []FailureMode{FailError, FailAllow, FailDeny, FailLocal} {
		if got, err := ParseFailureMode(m.String()); got != m || err != nil {
			t.Errorf("ParseFailureMode(%q) = %v, %v; want %v", m.String(), got, err, m)
		}
	}
	if _, err := ParseFailureMode("open"); err == nil || !strings.Contains(err.Error(), "allow, deny, error or local") {
		t.Errorf("ParseFailureMode(open) = %v; want the choices named", err)
	}
	if got := FailureMode(9).String(); got != "FailureMode(9)" {
		t.Errorf("FailureMode(9).String() = %q", got)
	}
}
