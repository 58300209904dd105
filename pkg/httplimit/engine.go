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

	"github.com/sluicehq/sluice/pkg/flagcache"
	"github.com/sluicehq/sluice/pkg/global"
	"github.com/sluicehq/sluice/pkg/reload"
	"github.com/sluicehq/sluice/pkg/rls"
	"github.com/sluicehq/sluice/pkg/wire"
)

// EngineOptions configure an Engine.
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
	// rls.FailError, returns an error, which the middleware treats by its
	// FailClosed (by default it serves the request); rls.FailAllow,
	// FailDeny and FailLocal decide as the server's -failure-mode does.
	FailureMode rls.FailureMode
	// Timeout is how long Redis may leave a reply overdue before it is
	// taken as not answering (global.RedisOptions.Timeout). Default 10ms.
	// A request whose context has a deadline waits for Redis until just
	// before it; past it (or max(1s, 5 × Timeout) without a deadline), with
	// Redis not failed, it is decided in this process at half of each limit.
	Timeout time.Duration
	// CacheSize bounds the over-limit flag cache; 0 means flagcache.DefaultSize.
	CacheSize  int
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Engine is the in-process Limiter: sluice's own request path (pkg/rls)
// on the descriptor config. Close releases it.
type Engine struct {
	svc    *rls.Service
	redis  *global.Redis
	cancel context.CancelFunc
	done   <-chan error
}

// NewEngine loads the config, starts watching it, and returns the Engine.
func NewEngine(opts EngineOptions) (_ *Engine, err error) {
	if opts.Config == "" {
		return nil, errors.New("httplimit: EngineOptions.Config is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.CacheSize == 0 {
		opts.CacheSize = flagcache.DefaultSize
	}
	cfg, err := reload.New(reload.Options{Path: opts.Config, Logger: opts.Logger, Registerer: opts.Registerer})
	if err != nil {
		return nil, fmt.Errorf("httplimit: %w", err)
	}
	memory, err := global.NewMemory(global.MemoryOptions{})
	if err != nil {
		return nil, err
	}
	e := &Engine{}
	defer func() {
		if err != nil && e.redis != nil {
			e.redis.Close() // its writers would outlive a failed NewEngine
		}
	}()
	var metrics *rls.Metrics
	if opts.Registerer != nil {
		metrics = rls.NewMetrics(opts.Registerer)
	}
	var decider rls.Decider = rls.Direct{Store: memory}
	if opts.Redis != nil {
		e.redis, err = global.NewRedis(global.RedisOptions{Client: opts.Redis, Cluster: opts.Cluster, Timeout: opts.Timeout})
		if err != nil {
			return nil, err
		}
		var storeMetrics *rls.StoreMetrics
		if metrics != nil {
			storeMetrics = metrics.Store
		}
		decider, err = rls.NewStoreDecider(rls.StoreOptions{
			Store: e.redis, MaxWait: max(time.Second, 5*opts.Timeout), Mode: opts.FailureMode, Fallback: memory, Logger: opts.Logger, Metrics: storeMetrics,
		})
		if err != nil {
			return nil, err
		}
	}
	flags, err := flagcache.New(opts.CacheSize)
	if err != nil {
		return nil, err
	}
	e.svc, err = rls.New(rls.Options{Config: cfg.Current, Decider: decider, Cache: flags, Logger: opts.Logger, Metrics: metrics})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	if e.done, err = cfg.Watch(ctx); err != nil {
		opts.Logger.Warn("config changes will not be watched", "error", err.Error())
	}
	return e, nil
}

// ShouldRateLimit implements Limiter.
func (e *Engine) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return e.svc.ShouldRateLimit(ctx, req)
}

// Close stops watching the config and releases the Redis writers (not the
// Redis client, which is the caller's).
func (e *Engine) Close() error {
	e.cancel()
	if e.done != nil {
		<-e.done
	}
	if e.redis != nil {
		return e.redis.Close()
	}
	return nil
}

// Remote is a Limiter on a sluice server (or any Envoy rate limit service)
// reached over gRPC.
func Remote(client rlsv3.RateLimitServiceClient) Limiter { return remote{client} }

type remote struct{ c rlsv3.RateLimitServiceClient }

func (r remote) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	// Header values go into descriptors as the request carried them, bytes
	// that are not UTF-8 included: wire.Codec sends them as they are.
	return r.c.ShouldRateLimit(ctx, req, grpc.WaitForReady(false), grpc.ForceCodecV2(wire.Codec{}))
}
