package main

import (
	"context"
	"fmt"
	"io"
	"net"

	"github.com/sluicehq/sluice/internal/flagenv"
	"github.com/sluicehq/sluice/internal/serve"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/rls"
)

// run is the whole server: it returns when ctx is done and shutdown has
// finished, or on a start-up error.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	o, err := parseFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	log, err := serve.NewLogger(o.logLevel, o.logFormat, stderr)
	if err != nil {
		return err
	}
	reg := serve.Registry()
	mode, err := limiter.ParseFailureMode(o.failureMode)
	if err != nil {
		return fmt.Errorf("-failure-mode: %w", err)
	}
	client, cluster, err := newRedisClient(o)
	if err != nil {
		return err
	}
	storeName := "memory"
	sopts := rls.ServerOptions{
		Config: o.configPath, StoreTimeout: o.storeTimeout, RedisPipelines: o.writers, FailureMode: mode,
		LocalShare: o.localShare, MaxWait: o.maxWait, Breaker: o.breaker, MemoryKeys: o.memoryKeys, MemoryBytes: o.memoryBytes,
		CacheSize: serve.CacheSize(o.cacheSize), KeyPrefix: o.keyPrefix, LegacyHeaders: o.legacy, Logger: log, Registerer: reg,
	}
	if client != nil {
		defer client.Close()
		countRoundTrips(client, newRoundTrips(reg))
		sopts.Redis, sopts.Cluster = client, cluster
		storeName = "redis"
		if cluster {
			storeName = "redis-cluster"
		}
	}
	if o.recordClients != "" {
		sopts.RecordAllowed = serve.PeerNamed(flagenv.List(o.recordClients))
	}
	srv, err := rls.NewServer(sopts)
	if err != nil {
		return err
	}
	// Closed after the in-flight requests have finished (serve.Run returns
	// then): the Redis writers last as long as anything may use them.
	defer srv.Close()
	gopts, err := o.tls.ServerOptions()
	if err != nil {
		return err
	}
	admin := srv.Admin(reg, nil)
	if o.pprof {
		serve.Profile(admin)
	}
	err = serve.Run(ctx, serve.Options{
		Log: log, GRPC: serve.NewGRPC(srv.Service, gopts...), Admin: admin, GRPCAddr: o.grpcAddr, HTTPAddr: o.httpAddr, Grace: o.grace,
		Listening: func(g, h net.Addr) {
			log.Info("sluice server listening", "grpc_addr", g.String(), "http_addr", h.String(),
				"store", storeName, "failure_mode", mode.String(), "config", o.configPath, "config_version", srv.Config().Current().Version())
		},
	})
	if err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}
