package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/daemon/flagenv"
	"github.com/sluicehq/sluice/pkg/global"
)

// redisClient is a go-redis client and what the store needs to know of it.
type redisClient interface {
	global.Scripter
	AddHook(redis.Hook)
	Close() error
}

// roundTrips counts the client's top-level calls to Redis as a go-redis
// hook: one round trip per pipeline or single command, however many script
// calls a pipeline carries. (Redis's INFO commandstats also counts every
// call a script makes, so it overstates round trips.)
type roundTrips struct{ trips, commands prometheus.Counter }

// countRoundTrips attaches h where it sees what goes on the wire. A
// ClusterClient splits one pipeline into one per node, so its own hook
// would count one trip where there are several: on a Cluster h goes on
// every node's client instead (nodes are created lazily, so this must run
// before the first command).
func countRoundTrips(c redisClient, h *roundTrips) {
	if cc, ok := c.(*redis.ClusterClient); ok {
		cc.OnNewNode(func(node *redis.Client) { node.AddHook(h) })
		return
	}
	c.AddHook(h)
}

func newRoundTrips(reg prometheus.Registerer) *roundTrips {
	h := &roundTrips{
		trips: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_redis_round_trips_total",
			Help: "Round trips to Redis: pipelines and single commands sent by the client.",
		}),
		commands: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_redis_commands_total",
			Help: "Commands sent to Redis (one per script call; not the calls a script makes).",
		}),
	}
	reg.MustRegister(h.trips, h.commands)
	return h
}

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.trips.Inc()
		h.commands.Inc()
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.trips.Inc()
		h.commands.Add(float64(len(cmds)))
		return next(ctx, cmds)
	}
}

// redisAuth are the server's Redis flags beyond the address and its
// credentials: the certificate the server presents to Redis (the
// reference's REDIS_TLS_CLIENT_CERT and _KEY), and the sentinels' own
// credentials (its REDIS_SENTINEL_AUTH). options embeds it, and
// parseFlags registers it.
type redisAuth struct {
	tlsCert, tlsKey                    string
	sentinelUsername, sentinelPassword string
}

func (r *redisAuth) register(fs *flag.FlagSet) {
	fs.StringVar(&r.tlsCert, "redis-tls-cert", "", "PEM client certificate presented to Redis over TLS (with -redis-tls-key; rediss://, -redis-tls)")
	fs.StringVar(&r.tlsKey, "redis-tls-key", "", "PEM private key of -redis-tls-cert")
	fs.StringVar(&r.sentinelUsername, "redis-sentinel-username", "", "ACL user for the Sentinel processes themselves (default: none)")
	fs.StringVar(&r.sentinelPassword, "redis-sentinel-password", "", "password of the Sentinel processes themselves (requirepass in sentinel.conf; -redis-password is the master's)")
}

// redisTLS is the TLS to Redis the flags ask for: nil for none.
func redisTLS(o *options, auth redisAuth) (*tls.Config, error) {
	if (auth.tlsCert == "") != (auth.tlsKey == "") {
		return nil, errors.New("-redis-tls-cert and -redis-tls-key go together")
	}
	if !o.redisTLS && o.redisCA == "" && auth.tlsCert == "" {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.redisCA != "" {
		pem, err := os.ReadFile(o.redisCA)
		if err != nil {
			return nil, fmt.Errorf("-redis-tls-ca: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-redis-tls-ca %s: no PEM certificates", o.redisCA)
		}
	}
	if auth.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(auth.tlsCert, auth.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("-redis-tls-cert, -redis-tls-key: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// parseRedisURL is redis.ParseURL with errors that show the URL redacted
// (flagenv.Redacted). url.Parse's errors quote the whole URL, and their
// reason, like go-redis's, can hold part of a password (one with an
// unescaped "/" ends the host early), so a reason is shown only for a URL
// with no credentials in it.
func parseRedisURL(raw string) (*redis.Options, error) {
	opts, err := redis.ParseURL(raw)
	if err == nil {
		return opts, nil
	}
	shown := flagenv.Redacted(raw)
	if shown != raw {
		return nil, fmt.Errorf("-redis-url %s: not a Redis URL: want redis://[user:password@]host:port[/db], rediss:// for TLS or unix://[user:password@]/path, with reserved characters in the user and password percent-encoded", shown)
	}
	return nil, fmt.Errorf("-redis-url: %w", err)
}

// newRedisClient builds the client the flags ask for, or nil for none.
// Timeouts come from the store's context (ContextTimeoutEnabled), so one
// bound covers dialing, writing and reading, and go-redis retries neither
// commands nor dials (its default, five dials 100 ms apart, makes a Redis
// that refuses connections look like one that stopped answering): the
// breaker and the failure mode handle a dead Redis. No error it returns
// shows a password.
func newRedisClient(o *options) (c redisClient, cluster bool, err error) {
	auth := o.redisAuth
	tlsConf, err := redisTLS(o, auth)
	if err != nil {
		return nil, false, err
	}
	// What every client shares, whichever kind the flags ask for.
	common := redis.UniversalOptions{
		Username:              o.redisUser,
		Password:              o.redisPassword,
		SentinelUsername:      auth.sentinelUsername,
		SentinelPassword:      auth.sentinelPassword,
		TLSConfig:             tlsConf,
		PoolSize:              o.redisPool,
		MinIdleConns:          min(o.redisPool, o.writers),
		MaxRetries:            -1,
		DialerRetries:         1,
		DialTimeout:           max(250*time.Millisecond, 10*o.storeTimeout),
		ContextTimeoutEnabled: true,
	}
	switch {
	case o.redisURL != "":
		// The URL names the server, the database and the credentials;
		// the rest is common's.
		opts, err := parseRedisURL(o.redisURL)
		if err != nil {
			return nil, false, err
		}
		if tlsConf != nil {
			if opts.TLSConfig == nil {
				return nil, false, errors.New("-redis-tls, -redis-tls-ca and -redis-tls-cert need a rediss:// -redis-url")
			}
			opts.TLSConfig.RootCAs, opts.TLSConfig.Certificates = tlsConf.RootCAs, tlsConf.Certificates
		}
		opts.PoolSize, opts.MinIdleConns = common.PoolSize, common.MinIdleConns
		opts.MaxRetries, opts.DialerRetries = common.MaxRetries, common.DialerRetries
		opts.DialTimeout, opts.ContextTimeoutEnabled = common.DialTimeout, common.ContextTimeoutEnabled
		return redis.NewClient(opts), false, nil
	case o.redisCluster != "":
		common.Addrs = flagenv.List(o.redisCluster)
		return redis.NewClusterClient(common.Cluster()), true, nil
	case o.sentinelAddrs != "":
		common.MasterName = o.sentinelName
		common.Addrs = flagenv.List(o.sentinelAddrs)
		return redis.NewFailoverClient(common.Failover()), false, nil
	}
	return nil, false, nil
}
