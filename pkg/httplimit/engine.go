package httplimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/pkg/breaker"
	"github.com/sluicehq/sluice/pkg/global"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/server"
	"github.com/sluicehq/sluice/pkg/wire"
)

// EngineOptions configure an Engine.
//
// NewEngine copies them, so changing them afterwards changes nothing;
// what they point to (a Redis client, a registry, a logger) is shared with
// the Engine, which is safe for concurrent use.
type EngineOptions struct {
	// Config is a descriptor config file or directory in the server's
	// format, reloaded when it changes (a bad file is rejected and the last
	// good config kept). Required.
	Config string
	// Redis, if set, counts the limits in Redis, shared by every instance
	// of the service (*redis.Client, *redis.ClusterClient); by default they
	// are counted in this process. Configure it as the server does, with
	// MaxRetries -1 and DialerRetries 1: go-redis's own retries would make
	// a Redis that refuses connections look like one that stopped
	// answering, whose requests are decided in memory rather than by
	// FailureMode until the breaker opens.
	Redis global.Scripter
	// Cluster says Redis is a Redis Cluster.
	Cluster bool
	// FailureMode is what to do while Redis is unavailable: the zero value,
	// limiter.FailError, returns an error, which the middleware treats by
	// its FailClosed (by default it serves the request); limiter.FailAllow,
	// FailDeny and FailLocal decide as the server's -failure-mode does.
	FailureMode limiter.FailureMode
	// Timeout is how long Redis may leave a reply overdue before it is
	// taken as not answering (global.RedisOptions.Timeout). Default 10ms.
	// A request whose context has a deadline waits for Redis until just
	// before it; past it (or max(1s, 5 × Timeout) without a deadline), with
	// Redis not failed, it is decided in this process at LocalShare of each limit.
	Timeout time.Duration
	// Breaker decides when Redis counts as failed, as the server's
	// -breaker-* flags do (see breaker.Options; zero fields take its
	// defaults). LocalShare is the share of each limit FailLocal allows in
	// this process while Redis is away. Default 0.5, as the server's.
	Breaker    breaker.Options
	LocalShare float64
	// CacheSize bounds the over-limit flag cache; 0 means cache.DefaultSize.
	CacheSize  int
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Engine is the in-process Limiter: sluice's own request path (the
// service the server runs, assembled by pkg/server) on the descriptor
// config. Close releases it. It is safe for concurrent use.
type Engine struct {
	srv *server.Server
}

// NewEngine loads the config, starts watching it, and returns the Engine.
func NewEngine(opts EngineOptions) (*Engine, error) {
	if opts.Config == "" {
		return nil, errors.New("httplimit: EngineOptions.Config is required")
	}
	parts, err := server.NewParts(server.Options{
		Config: opts.Config, Redis: opts.Redis, Cluster: opts.Cluster, StoreTimeout: opts.Timeout,
		FailureMode: opts.FailureMode, Breaker: opts.Breaker, LocalShare: opts.LocalShare,
		CacheSize: opts.CacheSize, Logger: opts.Logger, Registerer: opts.Registerer,
	})
	if err != nil {
		return nil, fmt.Errorf("httplimit: %w", err)
	}
	srv, err := server.New(parts, nil)
	if err != nil {
		return nil, fmt.Errorf("httplimit: %w", err)
	}
	return &Engine{srv: srv}, nil
}

// ShouldRateLimit implements Limiter.
func (e *Engine) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return e.srv.Service.ShouldRateLimit(ctx, req)
}

// Close stops watching the config and releases the Redis writers (not the
// Redis client, which is the caller's).
func (e *Engine) Close() error { return e.srv.Close() }

// Remote is a Limiter on a sluice server (or any Envoy rate limit service)
// reached over gRPC.
func Remote(client rlsv3.RateLimitServiceClient) Limiter { return remote{client} }

type remote struct{ c rlsv3.RateLimitServiceClient }

func (r remote) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	// Header values go into descriptors as the request carried them, bytes
	// that are not UTF-8 included: wire.Codec sends them as they are.
	return r.c.ShouldRateLimit(ctx, req, grpc.WaitForReady(false), grpc.ForceCodecV2(wire.Codec{}))
}
