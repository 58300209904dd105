// Package cache owns the "already over limit until T" flag cache: a bounded,
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
// Memory is bounded by the number of keys, each costing at most KeyOverhead
// (128) bytes plus its own length rounded up to a multiple of 16 (for keys
// of 32 to 256 bytes, in caches of a few thousand keys or more). The
// daemons' keys are fixed-length store keys, prefix + "{" + 32 hex digits +
// "}": 41 bytes (48 on the heap) with the default prefix "sluice:", so a
// cache of DefaultSize keys holds at most 100,000 × 176 bytes = 17.6 MB
// (16.8 MiB), and 24 MB (22.9 MiB) with a 64-byte prefix. Measured at
// DefaultSize: 132 bytes a key with the default prefix, 196 with a 64-byte
// one (TestHeapWithinBudget). Flags past their deadline leave when a caller
// asks for them (Until) or when the owner's timer calls Sweep, which also
// gives a shard's map back once few flags are left in it.
//
// The package depends on nothing but the standard library: no store, no
// gRPC, no config, no metrics. Callers pass the time in, so tests step
// through injected instants and never sleep.
package cache

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"strings"
	"time"
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

// DefaultSize is the flag cache size the daemons and the HTTP middleware's
// Engine use unless told otherwise: at most 17.6 MB with the default key
// prefix (see the package comment).
const DefaultSize = 100_000

// KeyOverhead bounds the heap a flag costs beyond its key's own bytes: its
// slot (48 bytes: the key's header, the deadline and two links) and its
// share of its shard's map (25 bytes a map slot, and the map's free slots).
// Measured beyond the keys' bytes: 84 bytes a flag at DefaultSize, 113 at
// the costliest size tried, just after the maps grew (caches of 2,000 to
// 200,000 keys; TestHeapWithinBudget checks both). A budget in bytes
// divided by KeyOverhead plus the key's heap size is a safe size.
const KeyOverhead = 128

// New returns a cache holding at most size keys in total. size must be
// positive, and below 2^31 × 16 (slots are numbered in 32 bits per shard). A
// cache smaller than 16 keys gets fewer shards (the largest power of two not
// above size), so the total bound is exact.
func New(size int) (*OverLimit, error) {
	if size <= 0 {
		return nil, errors.New("cache: size must be positive")
	}
	n := maxShards
	for n > size {
		n /= 2
	}
	if size/n >= math.MaxInt32-1 {
		return nil, fmt.Errorf("cache: size %d: more than 2^31-2 keys per shard", size)
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
		c.shards[i].init(capacity)
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
// and then simply never matches (it is removed by the next Until or Sweep), so
// Add with a past deadline clears a flag.
//
// until should carry a monotonic reading (time.Now().Add(retryAfter) does), as
// the now passed to Until should.
func (c *OverLimit) Add(key string, until time.Time) {
	s := c.shard(key)
	s.mu.Lock()
	if i, ok := s.index[key]; ok {
		s.slots[i].until = until
		s.toFront(i)
	} else {
		// The cache outlives the request: don't pin a caller's larger buffer
		// that key may be a slice of. Only new keys pay the copy.
		s.insert(strings.Clone(key), until)
	}
	s.mu.Unlock()
}

// Until reports whether key is flagged at now, and if so until when: true iff
// an entry exists and now is before its deadline. A flag reached or passed by
// now is removed and reported false. A hit marks the key recently used, so the
// key of an ongoing flood stays cached. It does not allocate.
func (c *OverLimit) Until(key string, now time.Time) (time.Time, bool) {
	s := c.shard(key)
	s.mu.Lock()
	i, ok := s.index[key]
	if !ok {
		s.mu.Unlock()
		return time.Time{}, false
	}
	until := s.slots[i].until
	if !now.Before(until) {
		s.remove(i)
		s.mu.Unlock()
		return time.Time{}, false
	}
	s.toFront(i)
	s.mu.Unlock()
	return until, true
}

// Remove drops key's flag, if any: for a caller that learns the key is no
// longer over limit before its deadline.
func (c *OverLimit) Remove(key string) {
	s := c.shard(key)
	s.mu.Lock()
	if i, ok := s.index[key]; ok {
		s.remove(i)
	}
	s.mu.Unlock()
}

// Purge drops every flag: for a caller whose limits changed, since a flag
// repeats an answer given under the old ones.
func (c *OverLimit) Purge() {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		s.purge()
		s.mu.Unlock()
	}
}

// Len returns the number of keys held, including expired flags that neither
// Until nor Sweep has removed yet. Each shard is counted under its lock but
// not all at once, so under concurrent writes the sum is a moment's
// approximation.
func (c *OverLimit) Len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += len(s.index)
		s.mu.Unlock()
	}
	return n
}
