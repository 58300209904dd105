package rls

import (
	"context"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/pkg/peerauth"
)

// inProcessPeer names the in-process caller to the service.
const inProcessPeer = "in-process"

// shouldRateLimitMethod is the full gRPC method an in-process call names.
const shouldRateLimitMethod = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// InProcess is a client of s that calls it in this process, as a gRPC call
// would reach it: the caller's outgoing metadata is the service's incoming
// metadata, and the headers and trailers it sets reach the grpc.Header and
// grpc.Trailer call options (other options are ignored). Nothing is
// serialized: the service reads the caller's request, which must not
// change until the call returns. It is what the server's local tier calls
// its own store through (server.Parts.StoreService, cached mode): a caller in this process,
// and so a sidecar the service trusts (peerauth.InProcess).
func InProcess(s rlsv3.RateLimitServiceServer) rlsv3.RateLimitServiceClient { return inProcess{s} }

type inProcess struct{ s rlsv3.RateLimitServiceServer }

func (p inProcess) ShouldRateLimit(ctx context.Context, in *rlsv3.RateLimitRequest, opts ...grpc.CallOption) (*rlsv3.RateLimitResponse, error) {
	md, _ := metadata.FromOutgoingContext(ctx)
	st := &serverStream{}
	ctx = grpc.NewContextWithServerTransportStream(metadata.NewIncomingContext(ctx, md), st)
	ctx = peerauth.InProcess(ctx, inProcessPeer)
	resp, err := p.s.ShouldRateLimit(ctx, in)
	for _, o := range opts {
		switch o := o.(type) {
		case grpc.HeaderCallOption:
			*o.HeaderAddr = st.header
		case grpc.TrailerCallOption:
			*o.TrailerAddr = st.trailer
		}
	}
	return resp, err
}

// serverStream collects what a handler sets on its call. A unary handler
// runs on one goroutine, so it needs no lock.
type serverStream struct{ header, trailer metadata.MD }

func (*serverStream) Method() string { return shouldRateLimitMethod }

func (s *serverStream) SetHeader(md metadata.MD) error {
	s.header = metadata.Join(s.header, md)
	return nil
}

func (s *serverStream) SendHeader(md metadata.MD) error { return s.SetHeader(md) }

func (s *serverStream) SetTrailer(md metadata.MD) error {
	s.trailer = metadata.Join(s.trailer, md)
	return nil
}
