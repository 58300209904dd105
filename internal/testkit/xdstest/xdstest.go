// Package xdstest runs an xDS server for tests, as Envoy Gateway's
// rate-limit runner does: go-control-plane's snapshot cache and server
// over mTLS, serving RateLimitConfig resources.
package xdstest

import (
	"context"
	"crypto/tls"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	xdsserver "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluicehq/sluice/internal/testkit/testpki"
)

// ControlPlane is an xDS server as Envoy Gateway's rate-limit runner is:
// go-control-plane's snapshot cache and server, over mTLS (its clients
// need a certificate of the test CA). It records the NACKs it gets. Stop
// Srv and Listen again to restart it; the snapshots survive.
type ControlPlane struct {
	t     testing.TB
	cache cache.SnapshotCache
	Addr  string
	// NodeID is the node the snapshots are for. Default sluice-test.
	NodeID string
	tls    *tls.Config
	Srv    *grpc.Server
	mu     sync.Mutex
	nacks  []string
}

// Nacks are the NACK messages the server got so far.
func (cp *ControlPlane) Nacks() []string {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return append([]string(nil), cp.nacks...)
}

// Start serves on addr (host:0 for a free port) with a certificate of ca,
// until t ends.
func Start(t testing.TB, ca *testpki.CA, addr string) *ControlPlane {
	t.Helper()
	cert, key := ca.Issue(t, "xds", "xds.envoy-gateway-system")
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	cp := &ControlPlane{t: t, NodeID: "sluice-test", cache: cache.NewSnapshotCache(true, cache.IDHash{}, nil),
		tls: &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: ca.Pool, ClientAuth: tls.RequireAndVerifyClientCert}}
	cp.Listen(addr)
	return cp
}

// Listen serves on addr, again after Srv.Stop (a restart).
func (cp *ControlPlane) Listen(addr string) {
	lis, err := net.Listen("tcp", addr)
	for i := 0; err != nil && i < 50; i++ { // the port of a server just stopped
		time.Sleep(100 * time.Millisecond)
		lis, err = net.Listen("tcp", addr)
	}
	if err != nil {
		cp.t.Fatal(err)
	}
	cp.Addr = lis.Addr().String()
	cb := xdsserver.CallbackFuncs{StreamRequestFunc: func(_ int64, req *discoveryv3.DiscoveryRequest) error {
		if req.GetErrorDetail() != nil {
			cp.mu.Lock()
			cp.nacks = append(cp.nacks, req.GetErrorDetail().GetMessage())
			cp.mu.Unlock()
		}
		return nil
	}}
	cp.Srv = grpc.NewServer(grpc.Creds(credentials.NewTLS(cp.tls)))
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(cp.Srv, xdsserver.NewServer(context.Background(), cp.cache, cb))
	go cp.Srv.Serve(lis)
	cp.t.Cleanup(cp.Srv.Stop)
}

// Push serves configs as version to NodeID.
func (cp *ControlPlane) Push(version string, configs ...*rlsconf.RateLimitConfig) {
	cp.t.Helper()
	res := make([]types.Resource, len(configs))
	for i, c := range configs {
		res[i] = c
	}
	snap, err := cache.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		cp.t.Fatal(err)
	}
	if err := cp.cache.SetSnapshot(context.Background(), cp.NodeID, snap); err != nil {
		cp.t.Fatal(err)
	}
}

// LimitConfig is domain gateway's config named name: key client at
// perMinute a minute.
func LimitConfig(name string, perMinute uint32) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: name, Domain: "gateway", Descriptors: []*rlsconf.RateLimitDescriptor{{
		Key: "client", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: perMinute},
	}}}
}

// DeepConfig is domain gateway's config named name: key client, then
// depth-1 descriptors each nested in the one before (keys level1,
// level2, ...), the deepest with a limit of 1 a minute. A hostile push
// is thousands deep in a few tens of KB.
func DeepConfig(name string, depth int) *rlsconf.RateLimitConfig {
	leaf := &rlsconf.RateLimitDescriptor{Key: "level" + strconv.Itoa(depth-1),
		RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: 1}}
	for i := depth - 2; i >= 0; i-- {
		key := "level" + strconv.Itoa(i)
		if i == 0 {
			key = "client"
		}
		leaf = &rlsconf.RateLimitDescriptor{Key: key, Descriptors: []*rlsconf.RateLimitDescriptor{leaf}}
	}
	return &rlsconf.RateLimitConfig{Name: name, Domain: "gateway", Descriptors: []*rlsconf.RateLimitDescriptor{leaf}}
}
