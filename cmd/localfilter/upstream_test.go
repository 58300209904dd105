package main

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/pkg/localtier"
)

// counting is a rate limit service that counts its calls.
type counting struct {
	rlsv3.UnimplementedRateLimitServiceServer
	calls atomic.Int64
}

func (c *counting) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	c.calls.Add(1)
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}, nil
}

// TestFlushesGoByTick: a flush's calls go to the server its tick names,
// whatever the round robin would pick; other calls go round robin; a
// flush whose server is not connected goes round robin too.
func TestFlushesGoByTick(t *testing.T) {
	var svcs [2]*counting
	var addrs []string
	var servers []*grpc.Server
	for i := range svcs {
		svcs[i] = &counting{}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		gs := grpc.NewServer()
		rlsv3.RegisterRateLimitServiceServer(gs, svcs[i])
		go gs.Serve(lis)
		t.Cleanup(gs.Stop)
		servers = append(servers, gs)
		addrs = append(addrs, lis.Addr().String())
	}
	dial := func(a string) *grpc.ClientConn {
		c, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	const tick, other = 7 % 2, 1 - 7%2 // the flush's tick 7 names server 1; the round robin here is the other
	u := newFlushUpstream(dial(addrs[other]), []*grpc.ClientConn{dial(addrs[0]), dial(addrs[1])})
	for _, c := range u.each {
		for c.GetState() != connectivity.Ready {
			if !c.WaitForStateChange(context.Background(), c.GetState()) {
				t.Fatal("no connection")
			}
		}
	}
	flush := localtier.WithFlush(context.Background(), 7)
	for range 10 {
		if _, err := u.ShouldRateLimit(flush, &rlsv3.RateLimitRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if got := svcs[tick].calls.Load(); got != 10 {
		t.Fatalf("flushes of tick %d: server %d had %d of 10 calls", tick, tick, got)
	}
	// Not a flush: the round robin's.
	before := svcs[other].calls.Load()
	if _, err := u.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{}); err != nil {
		t.Fatal(err)
	}
	if svcs[other].calls.Load() != before+1 {
		t.Error("a call that is not a flush did not go round robin")
	}
	// The tick's server gone: its flushes go round robin.
	servers[tick].Stop()
	for u.each[tick].GetState() == connectivity.Ready {
		u.each[tick].WaitForStateChange(context.Background(), connectivity.Ready)
	}
	before = svcs[other].calls.Load()
	if _, err := u.ShouldRateLimit(flush, &rlsv3.RateLimitRequest{}); err != nil {
		t.Fatalf("a flush with its tick's server gone: %v; want it sent round robin", err)
	}
	if svcs[other].calls.Load() != before+1 {
		t.Error("a flush with its tick's server gone did not go round robin")
	}
}
