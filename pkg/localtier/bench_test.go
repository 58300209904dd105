package localtier

import (
	"context"
	"fmt"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/pkg/cache"
	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/rls"
)

// answering is an upstream that admits every record without a network or
// a store: the benchmark measures the sidecar's own work.
type answering struct{}

func (answering) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest, _ ...grpc.CallOption) (*rlsv3.RateLimitResponse, error) {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.Descriptors))}
	for i := range resp.Statuses {
		resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	}
	return resp, nil
}

// BenchmarkAsyncShouldRateLimit is the sidecar's request path in async mode
// without gRPC: the flag cache, the local bucket, recording the hit, the
// reply; 10k keys, all admitted, the flusher running every 10ms.
func BenchmarkAsyncShouldRateLimit(b *testing.B) {
	svc, reqs := asyncSidecar(b, "requests_per_unit: 1000000000, unit: second", 10_000)
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := svc.ShouldRateLimit(ctx, reqs[i%len(reqs)]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAsyncFlood is the sidecar's request path in async mode on keys
// over their limits: after each key's first request, answered from the
// flag cache, whose refusals are counted as the keys' demand (Asked); 1k
// keys, the flusher running every 10ms.
func BenchmarkAsyncFlood(b *testing.B) {
	svc, reqs := asyncSidecar(b, "requests_per_unit: 1, unit: hour", 1_000)
	ctx := context.Background()
	for _, r := range reqs { // each key's one admission, then flagged
		svc.ShouldRateLimit(ctx, r)
		svc.ShouldRateLimit(ctx, r)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		resp, err := svc.ShouldRateLimit(ctx, reqs[i%len(reqs)])
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			b.Fatalf("%v, %v; want OVER_LIMIT", resp, err)
		}
	}
}

// asyncSidecar is an async sidecar's service on answering, with a flag
// cache, flushing every 10ms, whose one limit on remote_address is limit
// (the YAML inside rate_limit's braces), and a request for each of keys
// addresses.
func asyncSidecar(b *testing.B, limit string, keys int) (*rls.Service, []*rlsv3.RateLimitRequest) {
	cfg, err := config.Parse(map[string][]byte{"b.yaml": []byte("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {name: per-client, " + limit + "}\n")})
	if err != nil {
		b.Fatal(err)
	}
	flags, _ := cache.New(100_000)
	tier, err := New(Options{Upstream: answering{}, Mode: Async, Cache: flags, FlushInterval: 10 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tier.Close() })
	svc, _ := newService(limiter.Options{Config: func() *config.Config { return cfg }, Decider: tier, Cache: flags, Metrics: limiter.NewMetrics(prometheus.NewRegistry())})
	reqs := make([]*rlsv3.RateLimitRequest, keys)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: fmt.Sprint("10.0.", i/256, ".", i%256)}},
		}}}
	}
	return svc, reqs
}
