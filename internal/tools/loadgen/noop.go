package loadgen

import (
	"context"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice/internal/daemon/serve"
)

// NoopService is the do-nothing RLS handler: every ShouldRateLimit gets
// overall_code OK and one OK status per descriptor, with nothing else (no
// limits, headers or body). Served by [NewGRPCServer] it measures the gRPC
// transport's own ceiling. The zero value is ready and safe for concurrent
// use.
type NoopService struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

// ShouldRateLimit answers OK for every descriptor.
func (NoopService) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	// One backing array for all statuses: the same allocations a real
	// handler building its statuses needs, and no more.
	backing := make([]rlsv3.RateLimitResponse_DescriptorStatus, len(req.GetDescriptors()))
	statuses := make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(backing))
	for i := range backing {
		backing[i].Code = rlsv3.RateLimitResponse_OK
		statuses[i] = &backing[i]
	}
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: statuses}, nil
}

// NewGRPCServer returns a gRPC server with svc registered as the
// RateLimitService, plus gRPC health (reporting SERVING) and reflection, as
// sluice's server exposes them.
//
// It is built by serve.NewGRPC, as sluice's daemons build theirs, so the
// ceiling it measures has their options (codec, keepalive policy, stream
// workers) whatever they become. The process leaves GOGC and GOMAXPROCS to
// the environment, like the real server.
func NewGRPCServer(svc rlsv3.RateLimitServiceServer) *grpc.Server {
	g := serve.NewGRPC(svc)
	g.Health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	g.Health.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	return g.Server
}
