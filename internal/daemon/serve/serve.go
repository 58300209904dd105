// Package serve holds what sluice's two daemons (cmd/server and
// cmd/localfilter) share: their main, the logger and metrics registry
// their flags ask for, TLS for their ports, the gRPC server Envoy talks
// to (RateLimitService, health, reflection), and running it with the
// admin HTTP listener until the context ends, then shutting down in
// order: health to NOT_SERVING, in-flight requests finished (bounded by a
// grace period), the admin listener closed.
package serve

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/sluicehq/sluice/pkg/wire"
)

// ParseLevel parses debug, info, warn or error.
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("-log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// NewLogger returns a JSON or text logger at level to w.
func NewLogger(level, format string, w io.Writer) (*slog.Logger, error) {
	l, err := ParseLevel(level)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("-log-format %q: want json or text", format)
}

// GRPC is a gRPC server with svc as the RateLimitService, plus health and
// reflection.
type GRPC struct {
	Server *grpc.Server
	Health *health.Server
}

// streamWorkers are the goroutines that serve streams, reused from one
// request to the next (grpc.NumStreamWorkers); a request that finds them
// all busy gets a goroutine of its own, as without them. A new goroutine
// starts on a small stack and the decision path grows it several times
// (runtime.newstack and copystack were 13% of the server's CPU on the
// Redis path at 64 callers); a worker keeps the stack it grew.
const streamWorkers = 64

// NewGRPC builds the server. Envoy keeps long-lived HTTP/2 connections and
// may ping them, so pings are permitted every 5 s even without streams.
// Messages are decoded with wire.Codec, so descriptor values holding bytes
// that are not UTF-8, as Envoy forwards them, are decided, not refused.
func NewGRPC(svc rlsv3.RateLimitServiceServer, opts ...grpc.ServerOption) GRPC {
	opts = append([]grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.ForceServerCodecV2(wire.Codec{}),
		grpc.NumStreamWorkers(streamWorkers),
	}, opts...)
	g := GRPC{Server: grpc.NewServer(opts...), Health: health.NewServer()}
	rlsv3.RegisterRateLimitServiceServer(g.Server, svc)
	healthpb.RegisterHealthServer(g.Server, g.Health)
	reflection.Register(g.Server)
	return g
}

// Profile adds Go's profiling endpoints (net/http/pprof) under
// /debug/pprof/ to an admin mux: off unless a daemon's -pprof flag asks,
// since a profile costs CPU and shows internals. /debug/pprof/cmdline is
// left out: it prints the process's arguments, and a -redis-url or
// -redis-password among them carries a password (pprof.Index answers the
// path as an unknown profile).
func Profile(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}

// Options configure Run.
type Options struct {
	Log  *slog.Logger
	GRPC GRPC
	// Admin serves the admin HTTP listener (health, metrics, /json...).
	Admin              http.Handler
	GRPCAddr, HTTPAddr string
	// Grace bounds how long shutdown waits for in-flight requests.
	Grace time.Duration
	// Listening is called with the bound addresses once both listen.
	Listening func(grpcAddr, httpAddr net.Addr)
	// Admin listener limits; zero values take the defaults, which no
	// prober, scraper or operator comes near: AdminReadTimeout (a whole
	// request, headers and body) 10s, AdminWriteTimeout 60s (a CPU profile
	// of up to 50 s fits), AdminIdleTimeout (a kept-alive connection with no
	// request) 30s, AdminMaxConns 256 open connections at once (further ones
	// wait in the kernel's backlog until one closes, so no number of
	// clients can exhaust the process's file descriptors).
	AdminReadTimeout, AdminWriteTimeout, AdminIdleTimeout time.Duration
	AdminMaxConns                                         int
}

// Run serves the gRPC server and the admin listener until ctx is done (or
// a listener fails), then shuts down within Grace.
func Run(ctx context.Context, o Options) error {
	defaults := []struct {
		v *time.Duration
		d time.Duration
	}{{&o.AdminReadTimeout, 10 * time.Second}, {&o.AdminWriteTimeout, 60 * time.Second}, {&o.AdminIdleTimeout, 30 * time.Second}}
	for _, x := range defaults {
		if *x.v <= 0 {
			*x.v = x.d
		}
	}
	if o.AdminMaxConns <= 0 {
		o.AdminMaxConns = 256
	}
	log, g := o.Log, o.GRPC
	glis, err := net.Listen("tcp", o.GRPCAddr)
	if err != nil {
		return fmt.Errorf("-grpc-addr: %w", err)
	}
	hlis, err := net.Listen("tcp", o.HTTPAddr)
	if err != nil {
		glis.Close()
		return fmt.Errorf("-http-addr: %w", err)
	}
	hsrv := &http.Server{
		Handler:           o.Admin,
		ReadHeaderTimeout: min(5*time.Second, o.AdminReadTimeout),
		ReadTimeout:       o.AdminReadTimeout,
		WriteTimeout:      o.AdminWriteTimeout,
		IdleTimeout:       o.AdminIdleTimeout,
		MaxHeaderBytes:    64 << 10,
	}
	errc := make(chan error, 2)
	go func() { errc <- g.Server.Serve(glis) }()
	go func() { errc <- hsrv.Serve(netutil.LimitListener(hlis, o.AdminMaxConns)) }()
	g.Health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	g.Health.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	if o.Listening != nil {
		o.Listening(glis.Addr(), hlis.Addr())
	}

	select {
	case <-ctx.Done():
	case err := <-errc:
		log.Error("listener failed; shutting down", "error", err.Error())
	}
	g.Health.Shutdown()
	log.Info("shutting down", "grace", o.Grace.String())
	stopped := make(chan struct{})
	go func() { g.Server.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(o.Grace):
		g.Server.Stop()
	}
	sctx, cancel := context.WithTimeout(context.Background(), o.Grace)
	defer cancel()
	hsrv.Shutdown(sctx)
	return nil
}
