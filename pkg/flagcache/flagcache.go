// Package flagcache owns the "already over limit until T" flag cache: a bounded,
// sharded LRU of key → deadline that lets the global server and the per-proxy
// sidecar reject a flood from one client in memory, with no store round trip,
// until the retry time the store (or the global service) last gave for that key.
//
// The cache only ever repeats an answer it was told, and only until the deadline
// it was told: an entry expires exactly at its deadline and never extends itself,
// so it can never reject a request the store would have admitted after that time.
// Eviction (the cache is bounded) only forgets flags, which costs a store round
// trip and never a wrong rejection.
//
// The package depends on nothing but the standard library and
// hashicorp/golang-lru: no store, no gRPC, no config, no metrics. Callers pass
// the time in, so tests step through injected instants and never sleep.
package flagcache

import (
	"errors"
	"hash/maphash"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// maxShards is the number of shards of a cache large enough to have them all.
//
// Each call holds a shard's lock for a map lookup and a list splice (tens of
// nanoseconds) while the gRPC request around it costs tens of microseconds, so
// two callers colliding on one shard is rare already with a handful of shards;
// 16 keeps that true up to 16 cores at the cost of 16 small maps. A power of two
// lets a mask pick the shard.
const maxShards = 16

// OverLimit is a bounded LRU of key → deadline ("over limit until"). Keys are
// spread over up to 16 shards by a per-cache maphash seed, each shard an LRU
// under its own mutex, so the LRU order — and the victim of an eviction — is
// per shard: with many keys this approximates a global LRU closely.
//
// The zero value is not usable; build one with New. Safe for concurrent use.
type OverLimit struct {
	seed   maphash.Seed
	mask   uint64
	shards []shard
}

// shard is one LRU under its own lock. The lock is ours rather than
// lru.Cache's so that Until can test an entry and drop it if expired in one
// critical section: with lru.Cache's Get-then-Remove a concurrent Add of a
// fresh deadline could be removed in between.
type shard struct {
	mu  sync.Mutex
	lru *simplelru.LRU[string, time.Time] // guarded by mu
	// Pad the 16 bytes above to 128 so that two shards' locks never share a
	// cache line or an adjacent-line prefetch pair.
	_ [128 - 16]byte
}

// DefaultSize is the flag cache size the daemons and the HTTP middleware's
// Engine use unless told otherwise.
const DefaultSize = 100_000

// New returns a cache holding at most size keys in total. size must be
// positive. A cache smaller than 16 keys gets fewer shards (the largest power of
// two not above size), so the total bound is exact.
func New(size int) (*OverLimit, error) {
	if size <= 0 {
		return nil, errors.New("cache: size must be positive")
	}
	n := maxShards
	for n > size {
		n /= 2
	}
	c := &OverLimit{
		seed:   maphash.MakeSeed(),
		mask:   uint64(n - 1),
		shards: make([]shard, n),
	}
	for i := range c.shards {
		capacity := size / n
		if i < size%n {
			capacity++ // the shard capacities sum to size exactly
		}
		l, err := simplelru.NewLRU[string, time.Time](capacity, nil)
		if err != nil {
			return nil, err // unreachable: capacity >= 1
		}
		c.shards[i].lru = l
	}
	return c, nil
}

func (c *OverLimit) shard(key string) *shard {
	return &c.shards[maphash.String(c.seed, key)&c.mask]
}

// Add flags key as over limit until the deadline until, evicting the shard's
// least recently used key if the shard is full.
//
// If key is already flagged, the new deadline replaces the old one even when it
// is earlier: the store's newest answer is the truth. A shorter retry time means
// the store's state changed (a reload raised the limit, the key was reset, a
// sliding window slid); keeping the older, later deadline would reject requests
// the store now admits. An until at or before the caller's next now is stored
// and then simply never matches (it is removed by the next Until), so Add with a
// past deadline clears a flag.
//
// until should carry a monotonic reading (time.Now().Add(retryAfter) does), as
// the now passed to Until should.
func (c *OverLimit) Add(key string, until time.Time) {
	s := c.shard(key)
	s.mu.Lock()
	if !s.lru.Contains(key) {
		// The cache outlives the request: don't pin a caller's larger buffer
		// that key may be a slice of. Only new keys pay the copy.
		key = strings.Clone(key)
	}
	s.lru.Add(key, until)
	s.mu.Unlock()
}

// Until reports whether key is flagged at now, and if so until when: true iff
// an entry exists and now is before its deadline. A flag reached or passed by
// now is removed and reported false. A hit marks the key recently used, so the
// key of an ongoing flood stays cached. It does not allocate.
func (c *OverLimit) Until(key string, now time.Time) (time.Time, bool) {
	s := c.shard(key)
	s.mu.Lock()
	until, ok := s.lru.Get(key)
	if ok && !now.Before(until) {
		s.lru.Remove(key)
		ok = false
	}
	s.mu.Unlock()
	if !ok {
		return time.Time{}, false
	}
	return until, true
}

// Remove drops key's flag, if any: for a caller that learns the key is no
// longer over limit before its deadline.
func (c *OverLimit) Remove(key string) {
	s := c.shard(key)
	s.mu.Lock()
	s.lru.Remove(key)
	s.mu.Unlock()
}

// Purge drops every flag: for a caller whose limits changed, since a flag
// repeats an answer given under the old ones.
func (c *OverLimit) Purge() {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		s.lru.Purge()
		s.mu.Unlock()
	}
}

// Len returns the number of keys held, including expired flags that no Until
// has removed yet. Each shard is counted under its lock but not all at once, so
// under concurrent writes the sum is a moment's approximation.
func (c *OverLimit) Len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += s.lru.Len()
		s.mu.Unlock()
	}
	return n
}
