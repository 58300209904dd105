package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/daemon/flagenv"
	"github.com/sluicehq/sluice/internal/daemon/serve"
	"github.com/sluicehq/sluice/pkg/console"
	"github.com/sluicehq/sluice/pkg/global"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/localtier"
	"github.com/sluicehq/sluice/pkg/peerauth"
	"github.com/sluicehq/sluice/pkg/rls"
	"github.com/sluicehq/sluice/pkg/server"
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
	sopts, err := o.ServerOptions(log, reg)
	if err != nil {
		return err
	}
	client, cluster, err := newRedisClient(o)
	if err != nil {
		return err
	}
	sopts.StoreTimeout, sopts.RedisPipelines, sopts.RecordLinger, sopts.FailureMode = o.storeTimeout, o.writers, o.recordLinger, mode
	sopts.PackedState = o.stateFormat == "packed"
	sopts.LocalShare, sopts.MaxWait, sopts.Breaker, sopts.MemoryKeys, sopts.MemoryBytes = o.localShare, o.maxWait, o.breaker, o.memoryKeys, o.memoryBytes
	if client != nil {
		defer client.Close()
		countRoundTrips(client, newRoundTrips(reg))
		sopts.Redis, sopts.Cluster = client, cluster
	}
	sopts.Cached = o.redisMode == "cached"
	if sc, ok := client.(redis.Scripter); ok && sopts.Cached {
		// The replicas in cached mode divide each tight limit's pool among
		// their tiers.
		replicas := global.NewReplicas(sc, o.KeyPrefix+"cached-replicas")
		rctx, stop := context.WithCancel(ctx)
		defer stop()
		go replicas.Run(rctx)
		sopts.Replicas = replicas.Count
	}
	sopts.ShareBytes = o.shareBytes
	sopts.Proxies = peerauth.Options{
		Names: flagenv.List(o.recordClients), TokenFile: o.sidecarTokens,
		PlaintextTokens: o.tokensPlaintext, TrustAnyCaller: o.trustAny,
	}
	switch {
	case o.trustAny:
		log.Warn("-trust-any-sidecar: every caller of the gRPC port may record hits and report demand as a sidecar; keep the port reachable by your own sidecars only")
	case o.recordClients == "" && o.sidecarTokens == "" && !sopts.Cached:
		log.Info("no sidecar is known (-record-clients, -sidecar-tokens): a sidecar's recorded hits are decided as ordinary requests; sync sidecars and Envoy are served as usual")
	}
	parts, err := server.NewParts(sopts)
	if err != nil {
		return err
	}
	var tier *localtier.Tier
	var readiness server.Readiness
	if sopts.Cached {
		if tier, err = cachedTier(o, parts, log, reg); err != nil {
			parts.Close()
			return err
		}
		readiness = func() (string, bool) {
			if !tier.Healthy() { // ready: it decides locally meanwhile
				return "redis unavailable (deciding locally at -local-share)", true
			}
			return "", true
		}
	}
	var front limiter.Decider
	if tier != nil {
		front = tier
	}
	srv, err := server.New(parts, front)
	if err != nil {
		if tier != nil {
			tier.Close()
		}
		return err
	}
	// Closed after the in-flight requests have finished (serve.Run returns
	// then): the Redis writers last as long as anything may use them, the
	// tier's last flush included.
	defer srv.Close()
	if tier != nil {
		defer tier.Close()
	}
	failure := mode.String()
	if tier != nil {
		failure = "local (cached)"
	}
	admin := server.AdminOptions{Daemon: "sluice server", Readiness: readiness}
	if tier != nil {
		admin.Sections = func() []console.Section {
			st := tier.Status()
			st.Title = "Cached mode: decided in process, recorded to Redis in batches"
			return []console.Section{st}
		}
	}
	err = o.Serve(ctx, log, srv.Service, srv.Admin(reg, admin), func(g, h net.Addr) {
		log.Info("sluice server listening", "grpc_addr", g.String(), "http_addr", h.String(),
			"store", parts.StoreName(), "redis_mode", o.redisMode, "failure_mode", failure, "config", srv.Config().Source(), "config_version", srv.Config().Current().Version())
	}, func(g *grpc.Server) { rlqsv3.RegisterRateLimitQuotaServiceServer(g, srv.Quota) })
	if tier != nil {
		tier.Close() // record the hits admitted so far
	}
	if err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}

// cachedTier is the server's cached Redis mode: the sidecar's async tier
// in process, recording to this server's own store (parts.StoreService).
func cachedTier(o *options, parts *server.Parts, log *slog.Logger, reg prometheus.Registerer) (*localtier.Tier, error) {
	store, err := parts.StoreService()
	if err != nil {
		return nil, err
	}
	to := o.tier.Options()
	to.Upstream, to.Mode, to.FallbackShare, to.Cache = rls.InProcess(store), localtier.Async, o.localShare, parts.Cache
	// The store answers within -store-max-wait (its failure mode error
	// then); after a failure Redis is probed as the breaker would.
	to.Timeout, to.RetryInterval, to.Logger, to.Registerer = o.maxWait, o.breaker.Cooldown, log, reg
	return localtier.New(to)
}
