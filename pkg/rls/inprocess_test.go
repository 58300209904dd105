package rls

import (
	"context"
	"slices"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// TestInProcessIsTheGRPCCall: a call through InProcess reaches the service
// as the same call over gRPC does: the caller's metadata (a sidecar's
// record marker) is read, the headers the service sets come back, and
// errors carry the same codes.
func TestInProcessIsTheGRPCCall(t *testing.T) {
	type outcome struct {
		resp   *rlsv3.RateLimitResponse
		header []string
		code   codes.Code
	}
	run := func(client func(h *harness) rlsv3.RateLimitServiceClient) []outcome {
		h := start(t, limiter.Options{}, trustAny(t))
		c := client(h)
		record := metadata.AppendToOutgoingContext(context.Background(), SidecarKey, SidecarRecord)
		req := &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 5, Descriptors: []*ratelimitv3.RateLimitDescriptor{
			desc("remote_address", "debtor"), desc("nothing", "x"),
		}}
		var out []outcome
		for _, call := range []struct {
			ctx context.Context
			req *rlsv3.RateLimitRequest
		}{
			{record, req},
			{context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: req.Descriptors[:1]}},
			{context.Background(), &rlsv3.RateLimitRequest{Domain: ""}},
		} {
			var md metadata.MD
			resp, err := c.ShouldRateLimit(call.ctx, call.req, grpc.Header(&md))
			out = append(out, outcome{resp, md.Get(RetryAfterKey), status.Code(err)})
		}
		return out
	}
	over := run(func(h *harness) rlsv3.RateLimitServiceClient { return h.client })
	in := run(func(h *harness) rlsv3.RateLimitServiceClient { return InProcess(h.svc) })
	if len(over[0].header) != 1 || over[0].header[0] != "45000000,0" || over[2].code != codes.InvalidArgument {
		t.Fatalf("over gRPC: record header %q, bad request %v; the test's premise fails", over[0].header, over[2].code)
	}
	for i := range over {
		if !proto.Equal(in[i].resp, over[i].resp) || !slices.Equal(in[i].header, over[i].header) || in[i].code != over[i].code {
			t.Errorf("call %d in process: %v, header %q, code %v; over gRPC: %v, header %q, code %v",
				i, in[i].resp, in[i].header, in[i].code, over[i].resp, over[i].header, over[i].code)
		}
	}
}
