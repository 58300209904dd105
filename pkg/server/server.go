// Package server assembles a whole rate limit service from its parts: the
// config being served and watched, the flag cache, the store (Redis with
// its failure mode, or the embedded in-memory store), the decision core
// (pkg/limiter), Envoy's wire (pkg/rls), the sidecar trust (pkg/peerauth)
// and the admin routes (pkg/console). The daemons and pkg/httplimit's
// Engine are built with it; a tier that decides in front of the store
// (pkg/localtier: the sidecar, cached mode) is built by the caller from
// the Parts and handed to New.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/pkg/breaker"
	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/console"
	"github.com/sluicehq/sluice/pkg/global"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/peerauth"
	"github.com/sluicehq/sluice/pkg/reload"
	"github.com/sluicehq/sluice/pkg/rlqs"
	"github.com/sluicehq/sluice/pkg/rls"
	"github.com/sluicehq/sluice/pkg/topkeys"
)

// Options say how a whole rate limit service is built: the server's, the
// sidecar's and pkg/httplimit's Engine alike. Zero values take the
// defaults given.
//
// NewParts copies them; what they point to (clients, metrics registries,
// loggers) is shared with the Parts and the Server and used from many
// goroutines.
type Options struct {
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

	// Sidecar builds no store: the service decides on a tier in front of
	// the servers (pkg/localtier), given to New.
	Sidecar bool
	// Cached serves the store to a tier in this process (StoreService:
	// the server's cached Redis mode) and has it answer with its failure
	// mode error, so that the tier knows what it did not record.
	Cached bool
	// Redis, if set, counts limits in Redis (*redis.Client, Sentinel's
	// failover client, or with Cluster a *redis.ClusterClient), through a
	// StoreDecider with the failure mode, breaker and shedding below. The
	// service does not close the client.
	Redis   global.Scripter
	Cluster bool
	// StoreTimeout is how long Redis may leave a reply overdue
	// (global.RedisOptions.Timeout). Default global.DefaultTimeout.
	StoreTimeout time.Duration
	// RedisPipelines are the most pipelines in flight at once
	// (global.RedisOptions.Writers). Default
	// global.DefaultWriters.
	RedisPipelines int
	// RecordLinger and PackedState: see global.RedisOptions.
	RecordLinger time.Duration
	PackedState  bool
	// FailureMode, LocalShare, MaxWait and Breaker: see
	// limiter.StoreOptions. MaxWait defaults to
	// limiter.DefaultMaxWait(StoreTimeout).
	FailureMode limiter.FailureMode
	LocalShare  float64
	MaxWait     time.Duration
	Breaker     breaker.Options
	// MemoryKeys and MemoryBytes bound the in-memory store (the embedded
	// store, and the fallback Redis's requests are shed to): see
	// global.MemoryOptions.
	MemoryKeys  int
	MemoryBytes int64

	// CacheSize is the flag cache's keys: 0 means cache.DefaultSize,
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
	// Replicas, in cached mode, is how many servers share the
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
	Service *rls.Service
	// Quota is Envoy's rate limit quota service (RLQS) on the same
	// limits and counters, for Envoys running the
	// envoy.filters.http.rate_limit_quota filter.
	Quota *rlqs.Service
	parts *Parts
	top   *topkeys.Tracker // the keys refused most, per limit
	// When the server started, and its requests per second by result,
	// for the admin page.
	started time.Time
	history *console.History
	cancel  context.CancelFunc
	done    <-chan error
	log     *slog.Logger
}

// New assembles a service on p, decided by front (a tier in front of the
// servers or of p's store; nil: p's store), and starts watching the
// config. The Server owns p from then on, and closes it.
func New(p *Parts, front limiter.Decider) (_ *Server, err error) {
	o := p.opts
	s := &Server{parts: p, log: o.Logger, started: time.Now()}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	decider, shares := front, p.Shares
	switch {
	case front == nil && p.store == nil:
		return nil, errors.New("server: a sidecar's parts need a decider in front")
	case front == nil:
		decider = p.store
	case o.Cached:
		shares = nil // the tier is allotted by the store it records to
	}
	o.Proxies.Logger = o.Logger
	proxies, err := peerauth.New(o.Proxies)
	if err != nil {
		return nil, fmt.Errorf("sidecars: %w", err)
	}
	s.top = topkeys.New(topkeys.Options{MaxBytes: o.TopKeysBytes})
	core, err := limiter.New(limiter.Options{
		Config: p.Config.Current, Decider: decider, Cache: p.Cache, KeyPrefix: o.KeyPrefix,
		LegacyHeaders: o.LegacyHeaders, Logger: o.Logger, Metrics: p.Metrics, Shares: shares,
		ShadowAll: o.ShadowAll, QuotaAll: o.QuotaAll, ReferenceCounting: o.ReferenceCounting, TopKeys: s.top,
		Refunds: true, // the stores apply them; a tier in front passes them on (pkg/localtier)
	})
	if err != nil {
		return nil, err
	}
	sopts := []rls.ServiceOption{rls.WithProxies(proxies, o.Logger, o.Registerer)}
	if o.DynamicMetadata {
		sopts = append(sopts, rls.WithDynamicMetadata())
	}
	s.Service = rls.NewService(core, sopts...)
	qo := rlqs.Options{Config: p.Config.Current, Decider: core, Auth: proxies, Logger: o.Logger, Registerer: o.Registerer}
	if sc, ok := o.Redis.(global.FleetClient); ok {
		// The replicas on one Redis split each limit by their Envoys' demand.
		qo.Peers = fleetPeers{global.NewFleetDemand(sc, o.KeyPrefix+"rlqs:")}
	}
	if s.Quota, err = rlqs.New(qo); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.history = console.NewHistory(limiter.RequestCodes(), historySeconds)
	go s.sample(ctx)
	go s.sweep(ctx)
	go s.Quota.Run(ctx)
	if err := proxies.Watch(ctx); err != nil {
		o.Logger.Warn("sidecar token file changes will not be seen until a restart", "error", err.Error())
	}
	if o.ConfigSource != nil {
		done := make(chan error, 1)
		go func() { done <- o.ConfigSource.Run(ctx, p.Config); close(done) }()
		s.done = done
		return s, nil
	}
	if s.done, err = p.Config.Watch(ctx); err != nil {
		o.Logger.Warn("config changes will not be watched", "error", err.Error())
		err = nil
	}
	return s, nil
}

// sweep drops, once a second until ctx is done, what no request needs
// any more: the flags past their deadline, the demand reports (shares,
// if not nil) of sidecars gone quiet and the top keys of minutes no longer
// shown, so that memory a flood took comes back without traffic.
func (s *Server) sweep(ctx context.Context) {
	shares, flags := s.parts.Shares, s.parts.Cache
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
			if flags != nil {
				flags.Sweep(now)
			}
			s.top.Sweep(now)
		}
	}
}

// Config is the config being served.
func (s *Server) Config() *reload.Watcher { return s.parts.Config }

// Close stops watching the config and releases the parts. It is safe to
// call more than once.
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
	return s.parts.Close()
}

// fleetPeers are the replicas' words on one Redis, as pkg/rlqs asks them.
type fleetPeers struct{ f *global.FleetDemand }

func (p fleetPeers) Demand(ctx context.Context, ttl time.Duration, words []rlqs.PeerWord) error {
	fw := make([]global.FleetWord, len(words))
	for i, w := range words {
		fw[i] = global.FleetWord(w)
	}
	err := p.f.Demand(ctx, ttl, fw)
	for i, w := range fw {
		words[i] = rlqs.PeerWord(w)
	}
	return err
}
