package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/pkg/global"
)

// redisClient is a go-redis client and what the store needs to know of it.
type redisClient interface {
	global.Scripter
	Close() error
}

// newRedisClient builds the client the flags ask for, or nil for none.
// Timeouts come from the store's context (ContextTimeoutEnabled), so one
// bound covers dialing, writing and reading, and go-redis does not retry
// on its own: the breaker and the failure mode handle a dead Redis.
func newRedisClient(o *options) (c redisClient, cluster bool, err error) {
	var tlsConf *tls.Config
	if o.redisTLS || o.redisCA != "" {
		tlsConf = &tls.Config{MinVersion: tls.VersionTLS12}
		if o.redisCA != "" {
			pem, err := os.ReadFile(o.redisCA)
			if err != nil {
				return nil, false, fmt.Errorf("-redis-tls-ca: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, false, fmt.Errorf("-redis-tls-ca %s: no PEM certificates", o.redisCA)
			}
			tlsConf.RootCAs = pool
		}
	}
	dial := max(250*time.Millisecond, 10*o.storeTimeout)
	switch {
	case o.redisURL != "":
		opts, err := redis.ParseURL(o.redisURL)
		if err != nil {
			return nil, false, fmt.Errorf("-redis-url: %w", err)
		}
		if tlsConf != nil {
			if opts.TLSConfig == nil {
				return nil, false, fmt.Errorf("-redis-tls-ca needs a rediss:// URL")
			}
			opts.TLSConfig.RootCAs = tlsConf.RootCAs
		}
		opts.PoolSize = o.redisPool
		opts.MinIdleConns = min(o.redisPool, o.writers)
		opts.MaxRetries = -1
		opts.DialTimeout = dial
		opts.ContextTimeoutEnabled = true
		return redis.NewClient(opts), false, nil
	case o.redisCluster != "":
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:                 splitAddrs(o.redisCluster),
			Username:              o.redisUser,
			Password:              o.redisPassword,
			TLSConfig:             tlsConf,
			PoolSize:              o.redisPool,
			MinIdleConns:          min(o.redisPool, o.writers),
			MaxRetries:            -1,
			DialTimeout:           dial,
			ContextTimeoutEnabled: true,
		}), true, nil
	case o.sentinelAddrs != "":
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName:            o.sentinelName,
			SentinelAddrs:         splitAddrs(o.sentinelAddrs),
			Username:              o.redisUser,
			Password:              o.redisPassword,
			TLSConfig:             tlsConf,
			PoolSize:              o.redisPool,
			MinIdleConns:          min(o.redisPool, o.writers),
			MaxRetries:            -1,
			DialTimeout:           dial,
			ContextTimeoutEnabled: true,
		}), false, nil
	}
	return nil, false, nil
}

func splitAddrs(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}
