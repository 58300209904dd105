package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluicehq/sluice/internal/flagenv"
	"github.com/sluicehq/sluice/internal/serve"
	"github.com/sluicehq/sluice/pkg/global"
	"github.com/sluicehq/sluice/pkg/reload"
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
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	cfg, err := reload.New(reload.Options{Path: o.configPath, Logger: log, Registerer: reg})
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	metrics := rls.NewMetrics(reg)
	mode, err := rls.ParseFailureMode(o.failureMode)
	if err != nil {
		return fmt.Errorf("-failure-mode: %w", err)
	}

	memory, err := global.NewMemory(global.MemoryOptions{MaxKeys: o.memoryKeys, MaxBytes: o.memoryBytes})
	if err != nil {
		return err
	}
	client, cluster, err := newRedisClient(o)
	if err != nil {
		return err
	}
	var decider rls.Decider
	var ready readiness
	storeName := "memory"
	if client == nil {
		// The embedded store cannot be unavailable: no failure mode.
		decider = rls.Direct{Store: memory}
	} else {
		defer client.Close()
		countRoundTrips(client, newRoundTrips(reg))
		storeName = "redis"
		if cluster {
			storeName = "redis-cluster"
		}
		rs, err := global.NewRedis(global.RedisOptions{Client: client, Cluster: cluster, Timeout: o.storeTimeout, Writers: o.writers})
		if err != nil {
			return err
		}
		defer rs.Close()
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if err := rs.Load(lctx); err != nil {
			log.Warn("could not load scripts into Redis at start; the failure mode applies until it answers", "error", err.Error())
		}
		cancel()
		sd, err := rls.NewStoreDecider(rls.StoreOptions{
			Store: rs, MaxWait: o.maxWait, Mode: mode, Fallback: memory, LocalShare: o.localShare,
			Breaker: o.breaker, Logger: log, Metrics: metrics.Store,
		})
		if err != nil {
			return err
		}
		decider, ready = sd, sd
	}
	flags, err := serve.FlagCache(o.cacheSize, reg)
	if err != nil {
		return err
	}
	var recordAllowed func(context.Context) bool
	if o.recordClients != "" {
		recordAllowed = serve.PeerNamed(flagenv.List(o.recordClients))
	}
	svc, err := rls.New(rls.Options{
		Config: cfg.Current, Decider: decider, Cache: flags, KeyPrefix: o.keyPrefix,
		LegacyHeaders: o.legacy, Logger: log, Metrics: metrics, RecordAllowed: recordAllowed,
	})
	if err != nil {
		return err
	}

	gopts, err := o.tls.ServerOptions()
	if err != nil {
		return err
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watchDone, err := cfg.Watch(watchCtx)
	if err != nil {
		log.Warn("config changes will not be watched", "error", err.Error())
	}
	// On return the deferred Closes run in reverse: the store after the
	// in-flight requests have finished.
	admin := adminMux(svc, cfg, ready, reg)
	if o.pprof {
		serve.Profile(admin)
	}
	err = serve.Run(ctx, serve.Options{
		Log: log, GRPC: serve.NewGRPC(svc, gopts...), Admin: admin, GRPCAddr: o.grpcAddr, HTTPAddr: o.httpAddr, Grace: o.grace,
		Listening: func(g, h net.Addr) {
			log.Info("sluice server listening", "grpc_addr", g.String(), "http_addr", h.String(),
				"store", storeName, "failure_mode", mode.String(), "config", o.configPath, "config_version", cfg.Current().Version())
		},
	})
	if err != nil {
		return err
	}
	stopWatch()
	if watchDone != nil {
		if err := <-watchDone; err != nil {
			log.Warn("config watch ended", "error", err.Error())
		}
	}
	log.Info("stopped")
	return nil
}
