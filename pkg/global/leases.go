package global

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"strings"
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

// maxLeaseTTL bounds a lease's TTL; maxLeaseLimit the slots of a key;
// maxLeaseKeyLen and maxLeaseIDLen a key's and a lease id's bytes, so that
// what a lease holds, in Redis or in memory, is bounded whoever names it
// (pkg/httplimit's keys are 47 bytes, its ids 26).
const (
	maxLeaseTTL    = 24 * time.Hour
	maxLeaseLimit  = 10_000
	maxLeaseKeyLen = 128
	maxLeaseIDLen  = 64
)

func checkLease(key, id string, limit int64, ttl time.Duration) error {
	switch {
	case key == "" || id == "":
		return errors.New("lease: key and id must not be empty")
	case len(key) > maxLeaseKeyLen || len(id) > maxLeaseIDLen:
		return fmt.Errorf("lease: key of %d bytes, id of %d: want at most %d and %d", len(key), len(id), maxLeaseKeyLen, maxLeaseIDLen)
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
// The key expires with its longest lease (the highest score), never
// sooner: a short lease taken after a long one must not take the long one
// with it when its own TTL passes.
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
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', KEYS[1], math.ceil((tonumber(last[2]) - now) / 1000))
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

// DefaultMaxLeases is how many leases a MemoryLeases holds at most unless
// told otherwise. MaxLeaseBytes bounds the memory one lease takes with its
// key, in its costliest shape: on a key of its own, key and id at their
// longest (128 and 64 bytes), the maps grown by churn (measured on Go
// 1.26, amd64: 392 bytes a lease filled once, 480 once the leases have
// been replaced; see TestMemoryLeasesHeapBound). So a MemoryLeases holds
// at most maxLeases × MaxLeaseBytes bytes: 60 MB (57 MiB) at the default;
// with pkg/httplimit's 47-byte keys and 26-byte ids, about 37 MB.
const (
	DefaultMaxLeases = 100_000
	MaxLeaseBytes    = 600
)

// MemoryLeases keeps leases in this process: at most maxLeases of them at
// once over all keys, and so at most as many keys (a key with no lease
// takes no room), in at most maxLeases × MaxLeaseBytes bytes. A full store
// refuses a new lease with an error until one expires or is released.
//
// No acquire or release walks the store: each lease is in two heaps by
// expiry, its key's and the store's, so an acquire drops its own key's
// expired leases and, of other keys, up to two that expired first (each
// lease is dropped once: O(log n) amortized, for n leases held), so that
// what expired leaves as leases are taken; Sweep drops every expired one,
// for an owner's timer, so that it leaves without traffic too.
//
// It is safe for concurrent use.
type MemoryLeases struct {
	mu        sync.Mutex
	keys      map[string]*leaseKey
	ids       map[leaseRef]*lease
	byExpiry  leaseHeap // every lease held, the first to expire first
	maxLeases int
	now       func() time.Time
	epoch     time.Time // expiries are ns after it, on now's clock
}

// leaseRef names a lease: its key (found first, so the key's bytes are
// hashed once) and id.
type leaseRef struct {
	key *leaseKey
	id  string
}

// lease is one slot held, in its key's heap (atKey) and the store's (at).
type lease struct {
	key       *leaseKey
	id        string
	expires   int64 // ns after MemoryLeases.epoch
	at, atKey int
}

// leaseKey is a key's leases, by expiry.
type leaseKey struct {
	name   string
	leases leaseHeap
}

// NewMemoryLeases keeps at most maxLeases leases (default
// DefaultMaxLeases) on the clock now (default time.Now).
func NewMemoryLeases(maxLeases int, now func() time.Time) *MemoryLeases {
	if maxLeases <= 0 {
		maxLeases = DefaultMaxLeases
	}
	if now == nil {
		now = time.Now
	}
	return &MemoryLeases{
		keys:      make(map[string]*leaseKey),
		ids:       make(map[leaseRef]*lease),
		maxLeases: maxLeases,
		now:       now,
		epoch:     now(),
	}
}

var errLeasesFull = errors.New("lease: too many leases held")

// Acquire is RedisLeases.Acquire in memory.
func (m *MemoryLeases) Acquire(_ context.Context, key, id string, limit int64, ttl time.Duration) (bool, int64, time.Duration, error) {
	if err := checkLease(key, id, limit, ttl); err != nil {
		return false, 0, 0, err
	}
	t := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	now := int64(t.Sub(m.epoch))
	k := m.keys[key]
	for k != nil && k.leases.s[0].expires <= now {
		m.drop(k.leases.s[0])
		k = m.keys[key] // gone with its last lease
	}
	var held int64
	if k != nil {
		held = int64(len(k.leases.s))
		if _, ok := m.ids[leaseRef{k, id}]; ok {
			return true, held, 0, nil
		}
		if held >= limit {
			return false, held, time.Duration(k.leases.s[0].expires - now), nil
		}
	}
	// Expired leases of other keys (never k's: its expired ones are gone).
	for range sweptPerAcquire {
		if len(m.byExpiry.s) == 0 || m.byExpiry.s[0].expires > now {
			break
		}
		m.drop(m.byExpiry.s[0])
	}
	if len(m.byExpiry.s) >= m.maxLeases {
		return false, held, 0, errLeasesFull
	}
	if k == nil {
		// Clones: a key or id sliced from a larger buffer must not keep it.
		k = &leaseKey{name: strings.Clone(key), leases: leaseHeap{ofKey: true}}
		m.keys[k.name] = k
	}
	l := &lease{key: k, id: strings.Clone(id), expires: now + int64(ttl)}
	heap.Push(&m.byExpiry, l)
	heap.Push(&k.leases, l)
	m.ids[leaseRef{k, l.id}] = l
	return true, held + 1, 0, nil
}

// sweptPerAcquire is how many expired leases of other keys an acquire
// drops: more than the one it may add, so expired leases never pile up
// while leases are taken.
const sweptPerAcquire = 2

// Sweep drops every lease expired at now and returns how many, in
// O(log n) each.
func (m *MemoryLeases) Sweep(now time.Time) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	at, n := int64(now.Sub(m.epoch)), 0
	for len(m.byExpiry.s) > 0 && m.byExpiry.s[0].expires <= at {
		m.drop(m.byExpiry.s[0])
		n++
	}
	return n
}

// drop removes l from the store, and its key with its last lease; m.mu is
// held.
func (m *MemoryLeases) drop(l *lease) {
	k := l.key
	heap.Remove(&m.byExpiry, l.at)
	heap.Remove(&k.leases, l.atKey)
	delete(m.ids, leaseRef{k, l.id})
	switch n := len(k.leases.s); {
	case n == 0:
		delete(m.keys, k.name)
	case n <= cap(k.leases.s)/4:
		// A key that held many leases and holds few now gives the room
		// back (amortized O(1) a drop), so MaxLeaseBytes holds.
		k.leases.s = append(make([]*lease, 0, 2*n), k.leases.s...)
	}
}

// Release gives lease id's slot of key back.
func (m *MemoryLeases) Release(_ context.Context, key, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if k := m.keys[key]; k != nil {
		if l := m.ids[leaseRef{k, id}]; l != nil {
			m.drop(l)
		}
	}
	return nil
}

// leaseHeap orders leases by expiry (container/heap), keeping each lease's
// index in it up to date: lease.atKey in a key's heap, lease.at in the
// store's.
type leaseHeap struct {
	s     []*lease
	ofKey bool
}

func (h *leaseHeap) Len() int           { return len(h.s) }
func (h *leaseHeap) Less(i, j int) bool { return h.s[i].expires < h.s[j].expires }
func (h *leaseHeap) Swap(i, j int) {
	h.s[i], h.s[j] = h.s[j], h.s[i]
	h.index(i)
	h.index(j)
}
func (h *leaseHeap) Push(x any) {
	h.s = append(h.s, x.(*lease))
	h.index(len(h.s) - 1)
}
func (h *leaseHeap) Pop() any {
	l := h.s[len(h.s)-1]
	h.s[len(h.s)-1] = nil
	h.s = h.s[:len(h.s)-1]
	return l
}

func (h *leaseHeap) index(i int) {
	if h.ofKey {
		h.s[i].atKey = i
	} else {
		h.s[i].at = i
	}
}
