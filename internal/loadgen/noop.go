package loadgen

import (
	"context"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
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
// Its ServerOptions are those of cmd/server (plaintext): grpc-go's defaults
// plus the keepalive enforcement policy the server sets for Envoy's pings
// (MinTime 5 s, PermitWithoutStream). The defaults in force (grpc-go
// v1.85): server keepalive pings after 2 h idle with a 20 s timeout, no
// connection age or idle limits, MaxConcurrentStreams unlimited
// (math.MaxUint32), 4 MiB max received message, 32 KiB read and write
// buffers, the default proto codec, one goroutine per stream (no worker
// pool). The process leaves GOGC and GOMAXPROCS to the environment, like the
// real server, so both run under the same garbage collector settings. When
// cmd/server changes its options this function must follow, or the ceiling
// it measures stops being comparable.
func NewGRPCServer(svc rlsv3.RateLimitServiceServer) *grpc.Server {
	s := grpc.NewServer(
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	)
	rlsv3.RegisterRateLimitServiceServer(s, svc)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(s, hs)
	reflection.Register(s)
	return s
}
