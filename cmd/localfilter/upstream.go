package main

import (
	"context"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	"github.com/sluicehq/sluice/pkg/localtier"
)

// flushUpstream sends each flush's records to the server its tick names:
// the sidecars' flushes fall on the wall clock's multiples of the flush
// interval (pkg/localtier), so the records of a fleet's flushes of one
// tick reach one server together, where a record linger
// (-redis-record-linger) puts them in one Redis call; round robin sent
// each sidecar's to a server of its own. Other calls, and records whose
// server is not connected, go round robin, which also fails over.
type flushUpstream struct {
	rr      rlsv3.RateLimitServiceClient
	each    []*grpc.ClientConn // one per -upstream address, in the given order
	clients []rlsv3.RateLimitServiceClient
}

func newFlushUpstream(rr *grpc.ClientConn, each []*grpc.ClientConn) *flushUpstream {
	u := &flushUpstream{rr: rlsv3.NewRateLimitServiceClient(rr), each: each}
	for _, c := range each {
		c.Connect()
		u.clients = append(u.clients, rlsv3.NewRateLimitServiceClient(c))
	}
	return u
}

func (u *flushUpstream) ShouldRateLimit(ctx context.Context, in *rlsv3.RateLimitRequest, opts ...grpc.CallOption) (*rlsv3.RateLimitResponse, error) {
	if len(u.each) > 1 {
		if tick, ok := localtier.FlushTick(ctx); ok {
			i := int(uint64(tick) % uint64(len(u.each)))
			switch u.each[i].GetState() {
			case connectivity.Ready:
				return u.clients[i].ShouldRateLimit(ctx, in, opts...)
			case connectivity.Idle:
				u.each[i].Connect()
			}
		}
	}
	return u.rr.ShouldRateLimit(ctx, in, opts...)
}
