package global

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Leases are concurrency slots: at most limit of a key held at once, each
// by a lease id until it is released or its TTL passes, so that a holder
// that dies without releasing frees its slot within the TTL (Stripe's
// concurrent-request limiter, Kuadrant's reserve/commit). Acquiring and
// releasing are each one atomic step, on the store's clock. Envoy has no
// call to release with, so these serve sluice's Go middleware
// (pkg/httplimit.Concurrency) and other callers that can release.

// maxLeaseTTL bounds a lease's TTL; maxLeaseLimit the slots of a key.
const (
	maxLeaseTTL   = 24 * time.Hour
	maxLeaseLimit = 10_000
)

func checkLease(key, id string, limit int64, ttl time.Duration) error {
	switch {
	case key == "" || id == "":
		return errors.New("lease: key and id must not be empty")
	case limit < 1 || limit > maxLeaseLimit:
		return fmt.Errorf("lease: limit %d: want 1 to %d", limit, maxLeaseLimit)
	case ttl < time.Millisecond || ttl > maxLeaseTTL:
		return fmt.Errorf("lease: TTL %v: want 1ms to %v", ttl, maxLeaseTTL)
	}
	return nil
}

// acquireLua takes a slot of KEYS[1] for lease ARGV[1] if fewer than
// ARGV[2] are held, for ARGV[3] µs, after dropping the expired leases; it
// returns {got (0/1), held, µs until the first lease expires when full}.
const acquireLua = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local limit, ttl = tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local held = redis.call('ZCARD', KEYS[1])
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return {1, held, 0}
end
if held >= limit then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {0, held, math.max(0, tonumber(first[2]) - now)}
end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('PEXPIRE', KEYS[1], math.ceil(ttl / 1000))
return {1, held + 1, 0}
`

// RedisLeases keeps leases in Redis, a sorted set per key (lease id by
// expiry). It is safe for concurrent use.
type RedisLeases struct {
	c       LeaseClient
	acquire *redis.Script
}

// LeaseClient is what RedisLeases needs of a go-redis client: any kind
// does (each key's slots are in one key, so a Cluster is fine). It is used
// from many goroutines and must be safe for concurrent use, as go-redis
// clients are.
type LeaseClient interface {
	redis.Scripter
	ZRem(ctx context.Context, key string, members ...any) *redis.IntCmd
}

// NewRedisLeases keeps leases on c.
func NewRedisLeases(c LeaseClient) *RedisLeases {
	return &RedisLeases{c: c, acquire: redis.NewScript(acquireLua)}
}

// Acquire takes a slot of key for lease id, if fewer than limit are held:
// it reports whether it did, how many are held, and when full how long
// until the first lease expires.
func (l *RedisLeases) Acquire(ctx context.Context, key, id string, limit int64, ttl time.Duration) (bool, int64, time.Duration, error) {
	if err := checkLease(key, id, limit, ttl); err != nil {
		return false, 0, 0, err
	}
	v, err := l.acquire.Run(ctx, l.c, []string{key}, id, limit, ttl.Microseconds()).Int64Slice()
	if err != nil {
		return false, 0, 0, err
	}
	if len(v) != 3 {
		return false, 0, 0, fmt.Errorf("lease: acquire replied %v", v)
	}
	return v[0] == 1, v[1], time.Duration(v[2]) * time.Microsecond, nil
}

// Release gives lease id's slot of key back (nothing if it expired).
func (l *RedisLeases) Release(ctx context.Context, key, id string) error {
	return l.c.ZRem(ctx, key, id).Err()
}

// MemoryLeases keeps leases in this process, for at most MaxKeys keys at
// once (a key with no lease left takes no room). It is safe for concurrent
// use.
type MemoryLeases struct {
	mu      sync.Mutex
	keys    map[string]map[string]time.Time // key → lease id → expiry
	maxKeys int
	now     func() time.Time
}

// NewMemoryLeases keeps leases for at most maxKeys keys (default 100,000)
// on the clock now (default time.Now).
func NewMemoryLeases(maxKeys int, now func() time.Time) *MemoryLeases {
	if maxKeys <= 0 {
		maxKeys = 100_000
	}
	if now == nil {
		now = time.Now
	}
	return &MemoryLeases{keys: make(map[string]map[string]time.Time), maxKeys: maxKeys, now: now}
}

// Acquire is RedisLeases.Acquire in memory.
func (m *MemoryLeases) Acquire(_ context.Context, key, id string, limit int64, ttl time.Duration) (bool, int64, time.Duration, error) {
	if err := checkLease(key, id, limit, ttl); err != nil {
		return false, 0, 0, err
	}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	leases := m.keys[key]
	first := time.Duration(math.MaxInt64)
	for lid, exp := range leases {
		if !exp.After(now) {
			delete(leases, lid)
			continue
		}
		first = min(first, exp.Sub(now))
	}
	if _, ok := leases[id]; ok {
		return true, int64(len(leases)), 0, nil
	}
	if int64(len(leases)) >= limit {
		return false, int64(len(leases)), first, nil
	}
	if leases == nil {
		if len(m.keys) >= m.maxKeys {
			m.sweep(now)
			if len(m.keys) >= m.maxKeys {
				return false, 0, 0, errors.New("lease: too many keys held")
			}
		}
		leases = make(map[string]time.Time)
		m.keys[key] = leases
	}
	leases[id] = now.Add(ttl)
	return true, int64(len(leases)), 0, nil
}

// sweep drops expired leases and empty keys; m.mu is held.
func (m *MemoryLeases) sweep(now time.Time) {
	for k, leases := range m.keys {
		for lid, exp := range leases {
			if !exp.After(now) {
				delete(leases, lid)
			}
		}
		if len(leases) == 0 {
			delete(m.keys, k)
		}
	}
}

// Release gives lease id's slot of key back.
func (m *MemoryLeases) Release(_ context.Context, key, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if leases := m.keys[key]; leases != nil {
		delete(leases, id)
		if len(leases) == 0 {
			delete(m.keys, key)
		}
	}
	return nil
}
