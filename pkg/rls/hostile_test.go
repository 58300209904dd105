package rls

import (
	"context"
	"math"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// TestHostileShapesOverTheWire: requests the codec's own decoder takes
// (wire.Codec) but no limit allows, sent as a hostile client would, are
// answered InvalidArgument before the store is asked: thousands of
// descriptors, thousands of entries, a descriptor's hits_addend of 2^64-1
// (and a refund of it); a value of a megabyte of bytes that are not UTF-8
// is decided, not refused.
func TestHostileShapesOverTheWire(t *testing.T) {
	h := start(t, limiter.Options{Refunds: true})
	many := &rlsv3.RateLimitRequest{Domain: "edge"}
	for range 10_000 {
		many.Descriptors = append(many.Descriptors, desc("api_key", "x"))
	}
	wide := desc()
	for range 10_000 {
		wide.Entries = append(wide.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: "k", Value: "v"})
	}
	huge := desc("api_key", "x")
	huge.HitsAddend = wrapperspb.UInt64(math.MaxUint64)
	hugeRefund := desc("api_key", "x")
	hugeRefund.HitsAddend, hugeRefund.IsNegativeHits = wrapperspb.UInt64(math.MaxUint64), true
	for _, tt := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
	}{
		{"10,000 descriptors", many},
		{"10,000 entries", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{wide}}},
		{"hits_addend 2^64-1", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{huge}}},
		{"a refund of 2^64-1", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{hugeRefund}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := h.store.calls.Load()
			_, err := h.client.ShouldRateLimit(context.Background(), tt.req)
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("ShouldRateLimit = %v; want InvalidArgument", err)
			}
			if h.store.calls.Load() != before {
				t.Error("a bad request reached the store")
			}
		})
	}
	big := strings.Repeat("\xff", 1<<20)
	if _, err := h.client.ShouldRateLimit(context.Background(), agent(big)); err != nil {
		t.Fatalf("a value of 1 MiB not UTF-8: %v; want it decided", err)
	}
}
