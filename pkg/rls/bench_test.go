package rls

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/pkg/cache"
	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/global"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/topkeys"
)

// BenchmarkShouldRateLimit measures the request path without gRPC: match,
// key building, an in-memory decision, the reply and the metrics, on 10k
// keys all admitted.
func BenchmarkShouldRateLimit(b *testing.B) {
	svc := benchService(b, "{name: per-client, unit: second, requests_per_unit: 1000000000}")
	reqs := make([]*rlsv3.RateLimitRequest, 10_000)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: fmt.Sprint("10.0.", i/256, ".", i%256)}},
		}}}
	}
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := svc.ShouldRateLimit(ctx, reqs[i%len(reqs)]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkShouldRateLimitFlood is a flood on one key the flag cache holds
// as over limit: the 429 reply built without a store call.
func BenchmarkShouldRateLimitFlood(b *testing.B) {
	svc := benchService(b, "{name: per-client, unit: hour, requests_per_unit: 1}")
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}},
	}}}
	ctx := context.Background()
	svc.ShouldRateLimit(ctx, req) // the one admitted
	b.ReportAllocs()
	for b.Loop() {
		resp, err := svc.ShouldRateLimit(ctx, req)
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			b.Fatal(resp, err)
		}
	}
}

// BenchmarkFloodManyKeys is a flood from 1,000 clients, each already
// over limit, from every core at once: the flag cache answers, and each
// refusal is counted in the top keys (as the servers run) or not.
func BenchmarkFloodManyKeys(b *testing.B) {
	for _, top := range []bool{false, true} {
		b.Run(fmt.Sprintf("topkeys=%v", top), func(b *testing.B) {
			var tracker *topkeys.Tracker
			if top {
				tracker = topkeys.New(topkeys.Options{})
			}
			svc := benchService(b, "{name: per-client, unit: hour, requests_per_unit: 1}", tracker)
			reqs := make([]*rlsv3.RateLimitRequest, 1000)
			ctx := context.Background()
			for i := range reqs {
				reqs[i] = &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
					Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: fmt.Sprint("10.0.", i/256, ".", i%256)}},
				}}}
				svc.ShouldRateLimit(ctx, reqs[i]) // the one admitted
			}
			var next atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := int(next.Add(7919))
				for pb.Next() {
					i++
					if resp, err := svc.ShouldRateLimit(ctx, reqs[i%len(reqs)]); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
						b.Fatal(resp, err)
					}
				}
			})
		})
	}
}

// benchService is a service on the in-memory store with one
// remote_address limit in domain edge, counting refusals in top (if set).
func benchService(b testing.TB, limit string, top ...*topkeys.Tracker) *Service {
	b.Helper()
	cfg, err := config.Parse(map[string][]byte{"b.yaml": []byte("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: " + limit + "\n")})
	if err != nil {
		b.Fatal(err)
	}
	m, err := global.NewMemory(global.MemoryOptions{})
	if err != nil {
		b.Fatal(err)
	}
	flags, err := cache.New(100_000)
	if err != nil {
		b.Fatal(err)
	}
	opts := limiter.Options{Config: func() *config.Config { return cfg }, Decider: limiter.Infallible{Store: m}, Cache: flags, Metrics: limiter.NewMetrics(prometheus.NewRegistry())}
	if len(top) > 0 && top[0] != nil {
		opts.TopKeys = top[0]
	}
	core, err := limiter.New(opts)
	svc := NewService(core)
	if err != nil {
		b.Fatal(err)
	}
	return svc
}
