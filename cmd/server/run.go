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
	log, err := o.Logger(stderr)
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
		Config: o.Config, StoreTimeout: o.storeTimeout, RedisPipelines: o.writers, FailureMode: mode,
		LocalShare: o.localShare, MaxWait: o.maxWait, Breaker: o.breaker, MemoryKeys: o.memoryKeys, MemoryBytes: o.memoryBytes,
		CacheSize: o.ServiceCacheSize(), KeyPrefix: o.KeyPrefix, LegacyHeaders: o.LegacyHeaders, Logger: log, Registerer: reg,
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
	err = o.Serve(ctx, log, srv.Service, srv.Admin(reg, nil), func(g, h net.Addr) {
		log.Info("sluice server listening", "grpc_addr", g.String(), "http_addr", h.String(),
			"store", storeName, "failure_mode", mode.String(), "config", o.Config, "config_version", srv.Config().Current().Version())
	})
	if err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}
