package rls

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/breaker"
	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/cache"
	"github.com/sluicehq/sluice/pkg/global"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestFailureModes(t *testing.T) {
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("remote_address", "x")}}
	for _, tt := range []struct {
		mode  limiter.FailureMode
		codes string
		grpc  codes.Code
	}{
		{limiter.FailAllow, "OK:OK", codes.OK},
		{limiter.FailDeny, "OVER_LIMIT:OVER_LIMIT", codes.OK},
		{limiter.FailError, "", codes.Unavailable},
		{limiter.FailLocal, "OK:OK", codes.OK},
	} {
		t.Run(tt.mode.String(), func(t *testing.T) {
			store := newClockStore(t)
			store.err = errors.New("connection refused")
			fallback, _ := global.NewMemory(global.MemoryOptions{})
			var logs syncBuffer
			now := time.Unix(1_780_000_000, 0)
			d, err := limiter.NewStoreDecider(limiter.StoreOptions{
				Store: store, Mode: tt.mode, Fallback: fallback, LocalShare: 0.5, Breaker: breaker.Options{MinCalls: 3},
				Logger: slog.New(slog.NewTextHandler(&logs, nil)), Now: func() time.Time { return now },
			})
			if err != nil {
				t.Fatal(err)
			}
			// With a flag cache: failure-mode answers must not be
			// remembered as the store's (they would hide the outage from
			// the breaker and outlast it).
			flags, _ := cache.New(100)
			h := start(t, limiter.Options{Decider: d, Cache: flags})
			for i := range 10 {
				resp, err := h.client.ShouldRateLimit(context.Background(), req)
				if status.Code(err) != tt.grpc {
					t.Fatalf("request %d: %v; want code %v", i, err, tt.grpc)
				}
				if err != nil {
					continue
				}
				// local: half of 3 per minute is 1 per process.
				want := tt.codes
				if tt.mode == limiter.FailLocal && i > 0 {
					want = "OVER_LIMIT:OVER_LIMIT"
				}
				if got := codesOf(resp); got != want {
					t.Fatalf("request %d: %s; want %s", i, got, want)
				}
				if tt.mode == limiter.FailDeny && headers(resp)["X-RateLimit-Reason"] != "rate limit store unavailable" {
					t.Fatalf("deny: reason %q", headers(resp)["X-RateLimit-Reason"])
				}
			}
			// The breaker opened after 3 failures (all the calls it had
			// seen: the ratio 1 past 0.5, MinCalls 3): the store was not
			// called for the other 7.
			if n := store.calls.Load(); n != 3 {
				t.Errorf("store called %d times for 10 requests; want 3 (then the breaker opens)", n)
			}
			if d.Healthy() {
				t.Error("Healthy() = true with the breaker open")
			}
			if n := strings.Count(logs.String(), "unavailable"); n != 1 {
				t.Errorf("logged the outage %d times; want once:\n%s", n, logs.String())
			}
			// After the cooldown one probe succeeds and the breaker closes.
			store.err = nil
			now = now.Add(time.Second)
			if _, err := h.client.ShouldRateLimit(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			if !d.Healthy() || !strings.Contains(logs.String(), "recovered") {
				t.Errorf("after the store returned: Healthy() = %v, logs:\n%s", d.Healthy(), logs.String())
			}
		})
	}
}

// stuckStore answers nothing until its caller gives up, as a store whose
// replies this process has not got to yet (CPU saturation) looks.
type stuckStore struct{ calls atomic.Int64 }

func (s *stuckStore) Decide(ctx context.Context, _ []algorithm.Item, _ []algorithm.Result) error {
	s.calls.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

// TestOverloadIsShed: a store that has not answered by the time the
// caller's deadline is near, and has not failed, is not an outage: the
// request is decided in memory at the local share before the deadline,
// in every failure mode (never UNAVAILABLE), the breaker stays closed and
// the store keeps being asked.
func TestOverloadIsShed(t *testing.T) {
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("remote_address", "x")}}
	for _, mode := range []limiter.FailureMode{limiter.FailError, limiter.FailDeny, limiter.FailAllow, limiter.FailLocal} {
		t.Run(mode.String(), func(t *testing.T) {
			store := &stuckStore{}
			fallback, _ := global.NewMemory(global.MemoryOptions{})
			reg := prometheus.NewRegistry()
			m := limiter.NewMetrics(reg)
			d, err := limiter.NewStoreDecider(limiter.StoreOptions{Store: store, Mode: mode, Fallback: fallback, LocalShare: 0.5, Metrics: m.Store})
			if err != nil {
				t.Fatal(err)
			}
			core, err := limiter.New(limiter.Options{Config: func() *config.Config { return mustConfig(t, testConfig) }, Decider: d, Metrics: m})
			svc := NewService(core)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 8 {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
				resp, err := svc.ShouldRateLimit(ctx, req)
				cancel()
				if err != nil {
					t.Fatalf("request %d: %v; want a local answer", i, err)
				}
				// Half of 3 a minute: 1 admitted in this process.
				want := "OK:OK"
				if i > 0 {
					want = "OVER_LIMIT:OVER_LIMIT"
				}
				if got := codesOf(resp); got != want {
					t.Fatalf("request %d: %s; want %s", i, got, want)
				}
			}
			if !d.Healthy() || store.calls.Load() != 8 {
				t.Errorf("healthy %v after %d store calls; want closed and all 8 asked", d.Healthy(), store.calls.Load())
			}
			if got := counter(t, reg, "sluice_tier_decisions_total", "tier", string(limiter.SourceShed), "result", "over_limit"); got != 7 {
				t.Errorf("shed over_limit = %v; want 7", got)
			}
			if got := counter(t, reg, "sluice_store_errors_total"); got != 0 {
				t.Errorf("store errors = %v; want 0 (the store did not fail)", got)
			}
		})
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
// (never UNAVAILABLE before).
func TestStallIsShedUntilTheBreakerOpens(t *testing.T) {
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("api_key", "s")}}
	store := &stalledStore{}
	fallback, _ := global.NewMemory(global.MemoryOptions{})
	now := time.Unix(1_780_000_000, 0)
	d, err := limiter.NewStoreDecider(limiter.StoreOptions{Store: store, Mode: limiter.FailError, Fallback: fallback, Breaker: breaker.Options{MinCalls: 4},
		Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	core, err := limiter.New(limiter.Options{Config: func() *config.Config { return mustConfig(t, testConfig) }, Decider: d})
	svc := NewService(core)
	if err != nil {
		t.Fatal(err)
	}
	// Within a second of its last answer (here: the start) a stall is
	// slowness: shed, the breaker untold.
	for i := range 6 {
		if _, err := svc.ShouldRateLimit(context.Background(), req); err != nil || !d.Healthy() {
			t.Fatalf("request %d, a second since Redis answered: %v, healthy %v; want a local answer, the breaker closed", i, err, d.Healthy())
		}
	}
	store.calls.Store(0)
	now = now.Add(2 * time.Second) // silent for longer: failures
	for i := range 6 {
		_, err := svc.ShouldRateLimit(context.Background(), req)
		if i < 3 && err != nil {
			t.Fatalf("request %d, breaker closed: %v; want a local answer", i, err)
		}
		if i >= 3 && status.Code(err) != codes.Unavailable {
			t.Fatalf("request %d, breaker open: %v; want UNAVAILABLE (-failure-mode error)", i, err)
		}
	}
	if n := store.calls.Load(); n != 4 {
		t.Errorf("%d store calls; want 4 (then the breaker opened)", n)
	}
}
