package rls

import (
	"context"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// TestSidecarRecord: hits a sidecar already admitted are recorded in full,
// even past the limit, and the debt holds back later requests.
func TestSidecarRecord(t *testing.T) {
	h := start(t, limiter.Options{})
	ctx := metadata.AppendToOutgoingContext(context.Background(), SidecarKey, SidecarRecord)
	req := &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 5, Descriptors: []*ratelimitv3.RateLimitDescriptor{
		desc("remote_address", "debtor"), desc("nothing", "x"),
	}}
	var md metadata.MD
	resp, err := h.client.ShouldRateLimit(ctx, req, grpc.Header(&md))
	if err != nil {
		t.Fatal(err)
	}
	if codesOf(resp) != "OVER_LIMIT:OVER_LIMIT,OK" {
		t.Fatalf("recording 5 hits on a limit of 3: %s; want OVER_LIMIT (recorded, used up)", codesOf(resp))
	}
	if len(resp.ResponseHeadersToAdd) != 0 || resp.RawBody != nil || resp.Statuses[0].CurrentLimit != nil {
		t.Errorf("recorded hits answered with headers %v, body %q, current limit %v; a sidecar needs codes and times only",
			resp.ResponseHeadersToAdd, resp.RawBody, resp.Statuses[0].CurrentLimit)
	}
	if got := md.Get(RetryAfterKey); len(got) != 1 || got[0] != "45000000,0" {
		t.Fatalf("%s = %q; want per-descriptor retry µs 45000000,0", RetryAfterKey, got)
	}
	// The 5 were all recorded: the window is used up for Envoy's requests.
	plain := h.call(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: req.Descriptors[:1]})
	if codesOf(plain) != "OVER_LIMIT:OVER_LIMIT" {
		t.Fatalf("after the recorded hits: %s; want OVER_LIMIT", codesOf(plain))
	}
	// Envoy's own calls carry no metadata and get none back.
	md = nil
	if _, err := h.client.ShouldRateLimit(context.Background(), req, grpc.Header(&md)); err != nil || len(md.Get(RetryAfterKey)) != 0 {
		t.Fatalf("plain call: %v, metadata %v; want none", err, md)
	}
}
