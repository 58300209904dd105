// Package lrumap is a map from string keys to values, bounded in keys and
// in bytes, that drops its least recently used keys first: the shape of
// every per-key table a rate limiter keeps for callers it does not control
// (the share tracker's reports, a sidecar's allowances). Keys are spread
// over independently locked shards by a per-map maphash seed, each shard
// an LRU list under its own mutex, so the order of eviction is per shard:
// with many keys it approximates a global LRU closely.
//
// A value's callback runs under its shard's lock, so a read, a change and
// the new size of a key's value are one step; callbacks must be short and
// must not call back into the map.
//
// The share tracker and a sidecar's allowances use it. The tree's other
// per-key tables are kept apart on purpose: the in-memory store locks
// several shards at once to decide a request's keys atomically
// (pkg/global); the flag cache and the local buckets keep fixed-size
// slots in arrays, walked by their sweeps without chasing pointers (and
// the buckets evict by CLOCK, so a flood of one-off keys evicts its own
// kind); a sidecar's pending hits are drained whole at every flush.
//
// The package depends on nothing but the standard library.
package lrumap

import (
	"errors"
	"hash/maphash"
	"sync"
	"unsafe"
)

// DefaultShards is the number of shards of a map large enough to have
// them all: enough that two cores seldom meet on one lock (a callback
// holds it for a map lookup and a list splice, tens of nanoseconds), few
// enough that a small bound is not split into slivers.
const DefaultShards = 16

// Options bound a Map. A plain value, safe to share between goroutines.
type Options struct {
	// MaxKeys bounds the keys held; 0 means no bound but MaxBytes.
	MaxKeys int
	// MaxBytes bounds the bytes the keys hold (KeyOverhead per key, its
	// name, and what its callback says its value holds). Required.
	MaxBytes int64
	// Shards is the number of shards, rounded down to a power of two and
	// to at most one per MaxKeys key. Default DefaultShards.
	Shards int
}

// Map is a bounded map of string keys to values of type V. It is safe for
// concurrent use; the zero value is not usable: build one with New.
type Map[V any] struct {
	seed      maphash.Seed
	mask      uint64
	shards    []shard[V]
	keyBudget int   // per shard; 0: none
	byteBound int64 // per shard
}

type shard[V any] struct {
	mu    sync.Mutex
	m     map[string]*node[V] // guarded by mu
	head  node[V]             // sentinel of the LRU list: head.next is the newest
	bytes int64
	_     [64]byte // keep shards' locks on separate cache lines
}

type node[V any] struct {
	key        string
	val        V
	size       int64
	prev, next *node[V]
}

// KeyOverhead is what a key costs beyond its name and what its value
// holds: its node (list links, size, the value itself) and its place in
// the shard's map, measured for a small V (see the tests).
func KeyOverhead[V any]() int64 {
	var n node[V]
	return int64(unsafe.Sizeof(n)) + mapEntryOverhead
}

// mapEntryOverhead is a Go map's cost per entry of a string key and a
// pointer value, slack of its groups included.
const mapEntryOverhead = 64

// nameBytes is what a key's name of n bytes takes on the heap: the
// allocator's size classes round small strings up to 16 bytes.
func nameBytes(n int) int64 { return int64(n+15) &^ 15 }

// New returns an empty Map.
func New[V any](o Options) (*Map[V], error) {
	if o.MaxBytes <= 0 || o.MaxKeys < 0 || o.Shards < 0 {
		return nil, errors.New("lrumap: MaxBytes must be positive, MaxKeys and Shards not negative")
	}
	if o.Shards == 0 {
		o.Shards = DefaultShards
	}
	n := 1
	for n*2 <= o.Shards && (o.MaxKeys == 0 || n*2 <= o.MaxKeys) {
		n *= 2
	}
	m := &Map[V]{seed: maphash.MakeSeed(), mask: uint64(n - 1), shards: make([]shard[V], n), byteBound: max(1, o.MaxBytes/int64(n))}
	if o.MaxKeys > 0 {
		m.keyBudget = max(1, o.MaxKeys/n)
	}
	for i := range m.shards {
		s := &m.shards[i]
		s.m = make(map[string]*node[V])
		s.head.next, s.head.prev = &s.head, &s.head
	}
	return m, nil
}

func (m *Map[V]) shard(key string) *shard[V] {
	return &m.shards[maphash.String(m.seed, key)&m.mask]
}

// Update calls f with a pointer to key's value, and whether the key was
// held (a new key's value is V's zero value), under the key's shard lock.
// f returns the bytes the value holds beyond V itself (a slice's array,
// strings), or a negative number to drop the key. A key kept becomes the
// most recently used, and the least recently used keys of its shard are
// dropped while the shard is past its share of the bounds (never key
// itself, so one key larger than a shard's share is held alone).
func (m *Map[V]) Update(key string, f func(v *V, found bool) (size int64)) {
	s := m.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	n, found := s.m[key]
	if !found {
		n = &node[V]{key: key}
	}
	size := f(&n.val, found)
	if size < 0 {
		if found {
			s.drop(n)
		}
		return
	}
	size += KeyOverhead[V]() + nameBytes(len(key))
	if found {
		s.unlink(n)
	} else {
		s.m[key] = n
	}
	s.bytes += size - n.size
	n.size = size
	n.next, n.prev = s.head.next, &s.head
	s.head.next.prev = n
	s.head.next = n
	for (s.bytes > m.byteBound || (m.keyBudget > 0 && len(s.m) > m.keyBudget)) && s.head.prev != n {
		s.drop(s.head.prev)
	}
}

// Delete drops key, if held, and reports whether it was. Unlike Update
// returning a negative size, it allocates nothing for a key not held.
func (m *Map[V]) Delete(key string) bool {
	s := m.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.m[key]
	if ok {
		s.drop(n)
	}
	return ok
}

// Get calls f with key's value under its shard's lock, if the key is held,
// without making it more recently used, and reports whether it was held.
// f must not change the value's size.
func (m *Map[V]) Get(key string, f func(v *V)) bool {
	s := m.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.m[key]
	if ok {
		f(&n.val)
	}
	return ok
}

// Sweep walks each shard from its least recently used key and drops keys
// while stale says so, stopping at the first it keeps: with keys touched in
// time order, the stale ones are all at the end. It returns the keys
// dropped.
func (m *Map[V]) Sweep(stale func(v *V) bool) int {
	dropped := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		for s.head.prev != &s.head && stale(&s.head.prev.val) {
			s.drop(s.head.prev)
			dropped++
		}
		s.mu.Unlock()
	}
	return dropped
}

func (s *shard[V]) unlink(n *node[V]) {
	n.prev.next = n.next
	n.next.prev = n.prev
}

func (s *shard[V]) drop(n *node[V]) {
	s.unlink(n)
	delete(s.m, n.key)
	s.bytes -= n.size
}

// Len is the number of keys held.
func (m *Map[V]) Len() int {
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}

// Bytes is the bytes the keys hold, as their callbacks counted them.
func (m *Map[V]) Bytes() int64 {
	var n int64
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		n += s.bytes
		s.mu.Unlock()
	}
	return n
}
