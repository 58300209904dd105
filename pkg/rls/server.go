package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/pkg/breaker"
	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/console"
	"github.com/sluicehq/sluice/pkg/flagcache"
	"github.com/sluicehq/sluice/pkg/global"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/peerauth"
	"github.com/sluicehq/sluice/pkg/reload"
	"github.com/sluicehq/sluice/pkg/share"
	"github.com/sluicehq/sluice/pkg/topkeys"
)

// ServerOptions assemble a whole rate limit service: the server's, the
// sidecar's and pkg/httplimit's Engine alike. Zero values take the defaults
// given.
//
// NewServer copies them; what they point to (clients, metrics registries,
// loggers) is shared with the Server and used from many goroutines.
type ServerOptions struct {
	// Config is a descriptor config file or directory, reloaded when it
	// changes (a bad file is rejected and the last good config kept).
	Config string
	// ConfigSource, in place of Config, feeds the configs from elsewhere
	// (an xDS stream), named ConfigSourceName; the service has no config,
	// and answers UNAVAILABLE, until its first.
	ConfigSource     reload.Source
	ConfigSourceName string
	// ConfigSizes bound what each load of Config reads (a source bounds
	// its own). Zero values take config's defaults.
	ConfigSizes config.SizeBounds

	// Decider, if set, builds the decider from the flag cache the service
	// uses (nil when the cache is off): the sidecar's local tier. Otherwise
	// a store decides: Redis when set, else the in-memory store.
	Decider func(cache *flagcache.OverLimit) (limiter.Decider, error)
	// Tier, if set, builds a decider in front of the store (Redis or the
	// in-memory store, as below) from the flag cache and the store served
	// in process (InProcess): the server's cached Redis mode, where the
	// sidecar's local tier answers and records to the store in batches. The
	// store then answers with its failure mode error, so that the tier
	// knows what it did not record. Not with Decider.
	Tier func(cache *flagcache.OverLimit, store rlsv3.RateLimitServiceClient) (limiter.Decider, error)
	// Redis, if set, counts limits in Redis (*redis.Client, Sentinel's
	// failover client, or with Cluster a *redis.ClusterClient), through a
	// StoreDecider with the failure mode, breaker and shedding below. The
	// service does not close the client.
	Redis   global.Scripter
	Cluster bool
	// StoreTimeout is how long Redis may leave a reply overdue
	// (global.RedisOptions.Timeout). Default 10ms.
	StoreTimeout time.Duration
	// RedisPipelines are the pipelines in flight at once. Default 4.
	RedisPipelines int
	// FailureMode, LocalShare, MaxWait and Breaker: see
	// limiter.StoreOptions. MaxWait defaults to max(1s, 5 × StoreTimeout).
	FailureMode limiter.FailureMode
	LocalShare  float64
	MaxWait     time.Duration
	Breaker     breaker.Options
	// MemoryKeys and MemoryBytes bound the in-memory store (the embedded
	// store, and the fallback Redis's requests are shed to): see
	// global.MemoryOptions.
	MemoryKeys  int
	MemoryBytes int64

	// CacheSize is the flag cache's keys: 0 means flagcache.DefaultSize,
	// a negative value turns it off.
	CacheSize int
	// DynamicMetadata: see WithDynamicMetadata.
	DynamicMetadata bool
	// ShadowAll, QuotaAll and ReferenceCounting: see limiter.Options.
	ShadowAll, QuotaAll, ReferenceCounting bool
	// ReferenceMetrics adds envoyproxy/ratelimit's metrics on Registerer
	// (limiter.Metrics.EnableReferenceMetrics).
	ReferenceMetrics bool
	// KeyPrefix, LegacyHeaders: see limiter.Options.
	KeyPrefix     string
	LegacyHeaders bool
	// Proxies say which callers are sluice's sidecars (pkg/peerauth):
	// only their recorded hits and demand reports are honoured. The zero
	// value trusts none: every record marker is answered as an ordinary
	// request (WithProxies). The token file is watched while the server
	// runs.
	Proxies peerauth.Options
	// ShareBytes bounds the memory of the sidecars' demand reports
	// (share.Options.MaxBytes). Default share.DefaultMaxBytes.
	ShareBytes int64
	// Replicas, in cached mode (Tier), is how many servers share the
	// Redis in that mode (global.Replicas): each hands its own tier that
	// share of what a tight limit has left. Unset: one.
	Replicas func() int
	// TopKeysBytes bounds the memory of the keys refused most
	// (topkeys.Options.MaxBytes). Default topkeys.DefaultMaxBytes.
	TopKeysBytes int64

	Logger *slog.Logger
	// Registerer, if set, gets the service's metrics.
	Registerer prometheus.Registerer
}

// Server is an assembled rate limit service: the decision core on its
// decider and the config being watched, served over gRPC (Service) and
// /json, with the admin routes both daemons offer (Admin). Close releases
// it. It is safe for concurrent use.
type Server struct {
	Service *Service
	config  *reload.Watcher
	flags   *flagcache.OverLimit
	store   *limiter.StoreDecider // on Redis; nil otherwise
	top     *topkeys.Tracker      // the keys refused most, per limit
	redis   *global.Redis
	// What the admin page shows: the store's name ("redis", "memory"...),
	// when the server started, and its requests per second by result.
	storeName string
	started   time.Time
	metrics   *limiter.Metrics
	history   *console.History
	cancel    context.CancelFunc
	done      <-chan error
	log       *slog.Logger
}

// NewServer loads the config, builds the stores and the decider, and
// starts watching the config for changes.
func NewServer(o ServerOptions) (_ *Server, err error) {
	if (o.Config == "") == (o.ConfigSource == nil) {
		return nil, errors.New("rls: give one of ServerOptions.Config and ConfigSource")
	}
	if o.Decider != nil && o.Tier != nil {
		return nil, errors.New("rls: ServerOptions.Decider and Tier are exclusive")
	}
	if o.Tier != nil {
		o.FailureMode = limiter.FailError // see Tier
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.StoreTimeout <= 0 {
		o.StoreTimeout = 10 * time.Millisecond
	}
	if o.MaxWait <= 0 {
		o.MaxWait = max(time.Second, 5*o.StoreTimeout)
	}
	if o.CacheSize == 0 {
		o.CacheSize = flagcache.DefaultSize
	}
	s := &Server{log: o.Logger, started: time.Now(), storeName: "memory"}
	defer func() {
		if err != nil {
			s.Close() // the Redis writers would outlive a failed NewServer
		}
	}()
	if o.ConfigSource != nil {
		s.config, err = reload.NewEmpty(reload.Options{Path: o.ConfigSourceName, Logger: o.Logger, Registerer: o.Registerer})
	} else {
		s.config, err = reload.New(reload.Options{Path: o.Config, Sizes: o.ConfigSizes, Logger: o.Logger, Registerer: o.Registerer})
	}
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var metrics *limiter.Metrics
	if o.Registerer != nil {
		metrics = limiter.NewMetrics(o.Registerer)
		if o.ReferenceMetrics {
			metrics.EnableReferenceMetrics(o.Registerer)
		}
	}
	if o.CacheSize > 0 {
		if s.flags, err = flagcache.New(o.CacheSize); err != nil {
			return nil, err
		}
		if o.Registerer != nil {
			o.Registerer.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "sluice_flag_cache_keys",
				Help: "Keys in the over-limit flag cache, expired flags not yet removed included.",
			}, func() float64 { return float64(s.flags.Len()) }))
		}
	}
	decider, err := s.decider(o, metrics)
	if err != nil {
		return nil, err
	}
	// A store's server hands the async tiers that record to it their
	// allowances: sidecars', or in cached mode its own tier's.
	var shares *share.Tracker
	if o.Decider == nil {
		so := share.Options{MaxBytes: o.ShareBytes}
		if o.Tier != nil {
			so.Replicas = o.Replicas
		}
		if shares, err = share.New(so); err != nil {
			return nil, err
		}
	}
	if o.Tier != nil {
		// The store as a service of its own: no flag cache (the tier's
		// answers fill the front's) and no request metrics (the front
		// counts each request once; the store's own metrics are kept).
		store, err := limiter.New(limiter.Options{
			Config: s.config.Current, Decider: decider, KeyPrefix: o.KeyPrefix, Logger: o.Logger, Shares: shares,
		})
		if err != nil {
			return nil, err
		}
		if decider, err = o.Tier(s.flags, InProcess(NewService(store))); err != nil {
			return nil, err
		}
	}
	o.Proxies.Logger = o.Logger
	proxies, err := peerauth.New(o.Proxies)
	if err != nil {
		return nil, fmt.Errorf("sidecars: %w", err)
	}
	s.top = topkeys.New(topkeys.Options{MaxBytes: o.TopKeysBytes})
	core, err := limiter.New(limiter.Options{
		Config: s.config.Current, Decider: decider, Cache: s.flags, KeyPrefix: o.KeyPrefix,
		LegacyHeaders: o.LegacyHeaders, Logger: o.Logger, Metrics: metrics, Shares: frontShares(o, shares),
		ShadowAll: o.ShadowAll, QuotaAll: o.QuotaAll, ReferenceCounting: o.ReferenceCounting, TopKeys: s.top,
	})
	if err != nil {
		return nil, err
	}
	sopts := []ServiceOption{WithProxies(proxies, o.Logger, o.Registerer)}
	if o.DynamicMetadata {
		sopts = append(sopts, WithDynamicMetadata())
	}
	s.Service = NewService(core, sopts...)
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.metrics = metrics
	s.history = console.NewHistory(limiter.RequestCodes(), historySeconds)
	go s.sample(ctx)
	go s.sweep(ctx, shares)
	if err := proxies.Watch(ctx); err != nil {
		o.Logger.Warn("sidecar token file changes will not be seen until a restart", "error", err.Error())
	}
	if o.ConfigSource != nil {
		done := make(chan error, 1)
		go func() { done <- o.ConfigSource.Run(ctx, s.config); close(done) }()
		s.done = done
		return s, nil
	}
	if s.done, err = s.config.Watch(ctx); err != nil {
		o.Logger.Warn("config changes will not be watched", "error", err.Error())
		err = nil
	}
	return s, nil
}

// decider is o's decider: its own, or a store's.
func (s *Server) decider(o ServerOptions, metrics *limiter.Metrics) (limiter.Decider, error) {
	if o.Decider != nil {
		s.storeName = "" // no store of its own: the caller's page sections say what decides
		return o.Decider(s.flags)
	}
	memory, err := global.NewMemory(global.MemoryOptions{MaxKeys: o.MemoryKeys, MaxBytes: o.MemoryBytes})
	if err != nil {
		return nil, err
	}
	if o.Redis == nil {
		// The embedded store cannot be unavailable: no failure mode.
		return limiter.Direct{Store: memory}, nil
	}
	s.storeName = "redis"
	if o.Cluster {
		s.storeName = "redis-cluster"
	}
	if s.redis, err = global.NewRedis(global.RedisOptions{Client: o.Redis, Cluster: o.Cluster, Timeout: o.StoreTimeout, Writers: o.RedisPipelines}); err != nil {
		return nil, err
	}
	lctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	if err := s.redis.Load(lctx); err != nil {
		o.Logger.Warn("could not load scripts into Redis at start; the failure mode applies until it answers", "error", err.Error())
	}
	cancel()
	var sm *limiter.StoreMetrics
	if metrics != nil {
		sm = metrics.Store
	}
	s.store, err = limiter.NewStoreDecider(limiter.StoreOptions{
		Store: s.redis, MaxWait: o.MaxWait, Mode: o.FailureMode, Fallback: memory, LocalShare: o.LocalShare,
		Breaker: o.Breaker, Logger: o.Logger, Metrics: sm,
	})
	return s.store, err
}

// frontShares is the tracker the front service allots from: none in
// cached mode, whose tier records to the store in process (and is allotted
// there).
func frontShares(o ServerOptions, shares *share.Tracker) *share.Tracker {
	if o.Tier != nil {
		return nil
	}
	return shares
}

// sweep drops, once a second until ctx is done, what no request needs
// any more: the flags past their deadline and the demand reports (shares,
// if not nil) of sidecars gone quiet, so that memory a flood took comes
// back without traffic.
func (s *Server) sweep(ctx context.Context, shares *share.Tracker) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			if shares != nil {
				shares.Sweep(now)
			}
			if s.flags != nil {
				s.flags.Sweep(now)
			}
		}
	}
}

// Config is the config being served.
func (s *Server) Config() *reload.Watcher { return s.config }

// Close stops watching the config and releases the Redis writers (not the
// Redis client, which is the caller's). It is safe to call more than once.
func (s *Server) Close() error {
	if s.cancel != nil {
		s.cancel()
		s.cancel = nil
		if s.done != nil {
			if err := <-s.done; err != nil {
				s.log.Warn("config watch ended", "error", err.Error())
			}
		}
	}
	if s.redis != nil {
		r := s.redis
		s.redis = nil
		return r.Close()
	}
	return nil
}
