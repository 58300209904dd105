package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/pkg/cache"
	"github.com/sluicehq/sluice/pkg/global"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/reload"
	"github.com/sluicehq/sluice/pkg/rls"
	"github.com/sluicehq/sluice/pkg/share"
)

// Parts are what a service is assembled from: the config being served,
// the flag cache, the metrics, and (unless Sidecar) the store and the
// tracker of sidecars' shares. NewParts builds them; a caller builds what
// decides in front of them (a tier: pkg/localtier) from the parts and
// hands both to New, which owns the parts from then on.
//
// Parts are safe for concurrent use once built.
type Parts struct {
	// Config is the config being served; Cache the flag cache (nil when
	// off); Metrics the service's metrics (nil without a Registerer).
	Config  *reload.Watcher
	Cache   *cache.OverLimit
	Metrics *limiter.Metrics
	// Shares hands async tiers their allowances: sidecars', or in cached
	// mode this server's own. Nil for a sidecar.
	Shares *share.Tracker

	opts  Options
	store limiter.Decider       // nil for a sidecar
	redis *global.Redis         // on Redis
	sd    *limiter.StoreDecider // on Redis
	// storeName is what the admin page calls the store ("redis",
	// "memory"...), "" for a sidecar.
	storeName string
}

// NewParts loads the config and builds the flag cache, the metrics and
// the store.
func NewParts(o Options) (_ *Parts, err error) {
	if (o.Config == "") == (o.ConfigSource == nil) {
		return nil, errors.New("server: give one of Options.Config and ConfigSource")
	}
	if o.Sidecar && o.Cached {
		return nil, errors.New("server: a sidecar has no store to serve in cached mode")
	}
	if o.Cached {
		o.FailureMode = limiter.FailError // see Cached
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.StoreTimeout <= 0 {
		o.StoreTimeout = global.DefaultTimeout
	}
	if o.MaxWait <= 0 {
		o.MaxWait = limiter.DefaultMaxWait(o.StoreTimeout)
	}
	if o.CacheSize == 0 {
		o.CacheSize = cache.DefaultSize
	}
	p := &Parts{opts: o}
	defer func() {
		if err != nil {
			p.Close() // the Redis writers would outlive failed parts
		}
	}()
	if o.ConfigSource != nil {
		p.Config, err = reload.NewEmpty(reload.Options{Path: o.ConfigSourceName, Logger: o.Logger, Registerer: o.Registerer})
	} else {
		p.Config, err = reload.New(reload.Options{Path: o.Config, Sizes: o.ConfigSizes, Logger: o.Logger, Registerer: o.Registerer})
	}
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if o.Registerer != nil {
		p.Metrics = limiter.NewMetrics(o.Registerer)
		if o.ReferenceMetrics {
			p.Metrics.EnableReferenceMetrics(o.Registerer)
		}
	}
	if o.CacheSize > 0 {
		if p.Cache, err = cache.New(o.CacheSize); err != nil {
			return nil, err
		}
		if o.Registerer != nil {
			o.Registerer.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "sluice_flag_cache_keys",
				Help: "Keys in the over-limit flag cache, expired flags not yet removed included.",
			}, func() float64 { return float64(p.Cache.Len()) }))
		}
	}
	if o.Sidecar {
		return p, nil
	}
	so := share.Options{MaxBytes: o.ShareBytes}
	if o.Cached {
		so.Replicas = o.Replicas
	}
	if p.Shares, err = share.New(so); err != nil {
		return nil, err
	}
	return p, p.buildStore()
}

// buildStore builds the store the options ask for: Redis with its failure
// mode, breaker and shedding, or the embedded in-memory store.
func (p *Parts) buildStore() error {
	o := p.opts
	memory, err := global.NewMemory(global.MemoryOptions{MaxKeys: o.MemoryKeys, MaxBytes: o.MemoryBytes})
	if err != nil {
		return err
	}
	p.storeName = "memory"
	if o.Redis == nil {
		// The embedded store cannot be unavailable: no failure mode.
		p.store = limiter.Infallible{Store: memory}
		return nil
	}
	p.storeName = "redis"
	if o.Cluster {
		p.storeName = "redis-cluster"
	}
	if p.redis, err = global.NewRedis(global.RedisOptions{Client: o.Redis, Cluster: o.Cluster, Timeout: o.StoreTimeout, Writers: o.RedisPipelines, RecordLinger: o.RecordLinger, PackedState: o.PackedState}); err != nil {
		return err
	}
	lctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	if err := p.redis.Load(lctx); err != nil {
		o.Logger.Warn("could not load scripts into Redis at start; the failure mode applies until it answers", "error", err.Error())
	}
	cancel()
	var sm *limiter.StoreMetrics
	if p.Metrics != nil {
		sm = p.Metrics.Store
	}
	p.sd, err = limiter.NewStoreDecider(limiter.StoreOptions{
		Store: p.redis, MaxWait: o.MaxWait, Mode: o.FailureMode, Fallback: memory, LocalShare: o.LocalShare,
		Breaker: o.Breaker, Logger: o.Logger, Metrics: sm,
	})
	p.store = p.sd
	return err
}

// StoreName is what the store is: "redis", "redis-cluster", "memory", or
// "" for a sidecar.
func (p *Parts) StoreName() string { return p.storeName }

// StoreService is the store served as a service of its own, for a tier in
// this process to record to (Options.Cached; rls.InProcess is its
// client): no flag cache (the tier's answers fill the front's) and no
// request metrics (the front counts each request once; the store's own
// are kept); the shares it hands the tier are Shares'.
func (p *Parts) StoreService() (*rls.Service, error) {
	if !p.opts.Cached {
		return nil, errors.New("server: StoreService needs Options.Cached")
	}
	core, err := limiter.New(limiter.Options{
		Config: p.Config.Current, Decider: p.store, KeyPrefix: p.opts.KeyPrefix, Logger: p.opts.Logger, Shares: p.Shares,
		Refunds: true, // the tier's refunds (is_negative_hits), as the front takes them
	})
	if err != nil {
		return nil, err
	}
	return rls.NewService(core), nil
}

// Close releases the Redis writers (not the Redis client, which is the
// caller's). It is safe to call more than once.
func (p *Parts) Close() error {
	if p.redis != nil {
		r := p.redis
		p.redis = nil
		return r.Close()
	}
	return nil
}
