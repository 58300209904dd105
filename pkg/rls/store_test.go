package rls

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/pkg/cache"
	"github.com/sluicehq/sluice/pkg/global"
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
		mode  FailureMode
		codes string
		grpc  codes.Code
	}{
		{FailAllow, "OK:OK", codes.OK},
		{FailDeny, "OVER_LIMIT:OVER_LIMIT", codes.OK},
		{FailError, "", codes.Unavailable},
		{FailLocal, "OK:OK", codes.OK},
	} {
		t.Run(tt.mode.String(), func(t *testing.T) {
			store := newClockStore(t)
			store.err = errors.New("connection refused")
			fallback, _ := global.NewMemory(global.MemoryOptions{})
			var logs syncBuffer
			now := time.Unix(1_780_000_000, 0)
			d, err := NewStoreDecider(StoreOptions{
				Store: store, Mode: tt.mode, Fallback: fallback, LocalShare: 0.5,
				Logger: slog.New(slog.NewTextHandler(&logs, nil)), Now: func() time.Time { return now },
			})
			if err != nil {
				t.Fatal(err)
			}
			// With a flag cache: failure-mode answers must not be
			// remembered as the store's (they would hide the outage from
			// the breaker and outlast it).
			flags, _ := cache.New(100)
			h := start(t, Options{Decider: d, Cache: flags})
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
				if tt.mode == FailLocal && i > 0 {
					want = "OVER_LIMIT:OVER_LIMIT"
				}
				if got := codesOf(resp); got != want {
					t.Fatalf("request %d: %s; want %s", i, got, want)
				}
				if tt.mode == FailDeny && headers(resp)["X-RateLimit-Reason"] != "rate limit store unavailable" {
					t.Fatalf("deny: reason %q", headers(resp)["X-RateLimit-Reason"])
				}
			}
			// The breaker opened after 3 failures: the store was not
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
