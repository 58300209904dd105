package global

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/pkg/algorithm"
)

// Defaults of MemoryOptions.
const (
	DefaultMemoryKeys   = 1 << 20
	DefaultMemoryBytes  = 256 << 20
	DefaultMemoryShards = 64
)

// MemoryOptions configure a Memory store.
//
// NewMemory copies them, so changing them afterwards changes nothing; the
// Memory store is safe for concurrent use.
type MemoryOptions struct {
	// MaxKeys bounds the keys held; when full, a key whose state has expired,
	// or else one not used since the eviction hand last passed it, is
	// dropped (CLOCK, an approximation of least recently used; a new key
	// starts unused, so a flood of one-off keys evicts its own kind first).
	// Dropping a live key forgets its usage, so size it above the number of
	// keys active within a window. Default DefaultMemoryKeys.
	MaxKeys int
	// MaxBytes bounds the memory the keys' state holds (an estimate that
	// counts each key, its entry, a sliding log's runs and a concurrency
	// limit's slots with their members' names), evicting as MaxKeys does:
	// a sliding log or a concurrency limit of a large limit holds up to
	// 2 × limit runs or slots, so the number of keys alone does not bound
	// memory. Default DefaultMemoryBytes.
	MaxBytes int64
	// Shards is the number of independently locked shards, rounded up to
	// a power of two. Default DefaultMemoryShards.
	Shards int
}

// Memory is the embedded store: precise for one process, nothing to
// install. It is safe for concurrent use. Time comes from a monotonic
// clock anchored at the wall-clock time of New, so windows stay
// epoch-aligned like the Redis store's and a wall-clock step changes
// nothing.
type Memory struct {
	shards   []memShard
	mask     uint64
	seed     maphash.Seed
	perShard int
	// perShardBytes bounds each shard's bytes: MaxBytes spread evenly.
	perShardBytes int64
	base          time.Time
	baseUS        int64
}

type memShard struct {
	mu sync.Mutex
	m  map[string]*memEntry
	// head is the sentinel of the shard's list in the order keys came in
	// (head.next the newest), which the eviction hand walks from the
	// oldest: a key used since it came in or since the hand last passed
	// gets a second chance at the head. A hit only marks its key used:
	// moving it to the head would write its two neighbours, other random
	// cache lines (2.4 % of the in-memory server's CPU a request).
	head  memEntry
	bytes int64    // the size of its entries
	_     [32]byte // keep shards' locks on separate cache lines
}

type memEntry struct {
	key        string
	state      algorithm.State
	expires    int64 // µs; the state equals a fresh key's from then on
	size       int64 // its share of the shard's bytes: entrySize
	used       bool  // used since it came in or the hand last passed it
	prev, next *memEntry
}

// entryOverhead is what a key costs beyond its name, log and slots: the
// entry (about 130 bytes) and its place in the shard's map.
const entryOverhead = 176

// entrySize estimates the memory of a key holding st. A slot's member is
// counted whole: a holder's first unit is named by the request's own
// string, which the slot keeps alive after the request.
func entrySize(key string, st algorithm.State) int64 {
	n := entryOverhead + int64(len(key)) + int64(cap(st.Log))*int64(unsafe.Sizeof(algorithm.Run{})) +
		int64(cap(st.Slots))*int64(unsafe.Sizeof(algorithm.Slot{}))
	for i := range st.Slots {
		n += int64(len(st.Slots[i].Member))
	}
	return n
}

// NewMemory returns an empty in-memory store.
func NewMemory(opts MemoryOptions) (*Memory, error) {
	if opts.MaxKeys == 0 {
		opts.MaxKeys = DefaultMemoryKeys
	}
	if opts.Shards == 0 {
		opts.Shards = DefaultMemoryShards
	}
	if opts.MaxBytes == 0 {
		opts.MaxBytes = DefaultMemoryBytes
	}
	if opts.MaxKeys < 0 || opts.Shards < 0 || opts.MaxBytes < 0 {
		return nil, fmt.Errorf("memory store: MaxKeys %d, MaxBytes %d and Shards %d must not be negative", opts.MaxKeys, opts.MaxBytes, opts.Shards)
	}
	n := 1
	for n < opts.Shards {
		n <<= 1
	}
	now := time.Now()
	m := &Memory{
		shards:        make([]memShard, n),
		mask:          uint64(n - 1),
		seed:          maphash.MakeSeed(),
		perShard:      max(1, opts.MaxKeys/n),
		perShardBytes: max(1, opts.MaxBytes/int64(n)),
		base:          now,
		baseUS:        now.UnixMicro(),
	}
	for i := range m.shards {
		s := &m.shards[i]
		s.m = make(map[string]*memEntry)
		s.head.next, s.head.prev = &s.head, &s.head
	}
	return m, nil
}

// Now is the store's clock in µs since the epoch.
func (m *Memory) Now() int64 { return m.baseUS + time.Since(m.base).Microseconds() }

// Decide decides items at the store's clock; see DecideAt.
func (m *Memory) Decide(_ context.Context, items []Item, out []Result) error {
	return m.DecideAt(items, out, m.Now())
}

// ErrTooManyItems is returned for a request with more limits than a store takes.
var ErrTooManyItems = errors.New("too many limits in one request")

// DecideAt decides items at now (µs since the epoch), all or nothing, and
// writes one result per item to out.
func (m *Memory) DecideAt(items []Item, out []Result, now int64) error {
	if err := validate(items); err != nil {
		return err
	}
	if len(out) < len(items) {
		return fmt.Errorf("memory store: %d results for %d items", len(out), len(items))
	}
	if len(items) == 1 {
		return m.decideOne(&items[0], &out[0], now)
	}
	var shardBuf [maxItems]int
	var stateBuf [maxItems]algorithm.State
	idx := shardBuf[:len(items)]
	for i := range items {
		idx[i] = m.shardOf(items[i].Key)
	}
	var lockBuf [maxItems]int
	locked := append(lockBuf[:0], idx...) // lock in index order: no deadlock
	slices.Sort(locked)
	locked = slices.Compact(locked)
	for _, i := range locked {
		m.shards[i].mu.Lock()
	}
	defer func() {
		for _, i := range locked {
			m.shards[i].mu.Unlock()
		}
	}()
	var entryBuf [maxItems]*memEntry
	states := stateBuf[:len(items)]
	entries := entryBuf[:len(items)]
	for i := range items {
		entries[i] = m.shards[idx[i]].m[items[i].Key]
		states[i] = stateOf(entries[i], now)
	}
	if !algorithm.DecideAll(items, states, now, out) {
		return nil
	}
	for i := range items {
		if algorithm.LastOfKey(items, i) {
			m.store(&m.shards[idx[i]], entries[i], items[i].Key, states[i], algorithm.Keep(items[i].Params, out[i].ResetAfter), now)
		}
	}
	return nil
}

func (m *Memory) decideOne(it *Item, out *Result, now int64) error {
	s := &m.shards[m.shardOf(it.Key)]
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.m[it.Key]
	var st algorithm.State
	if it.Mode == algorithm.Force {
		st, *out = algorithm.Record(stateOf(e, now), it.Params, now, it.Age, it.Cost)
	} else {
		st, *out = algorithm.Decide(stateOf(e, now), it.Params, now, it.Cost, it.Mode)
	}
	if !out.Allowed && !it.Shadow && it.Mode == algorithm.Take {
		return nil // refused: nothing taken, nothing stored (as DecideAll)
	}
	m.store(s, e, it.Key, st, algorithm.Keep(it.Params, out.ResetAfter), now)
	return nil
}

func (m *Memory) shardOf(key string) int {
	return int(maphash.String(m.seed, key) & m.mask)
}

// stateOf is the state an entry (nil for none) holds at now; an entry
// past its expiry is a fresh key.
func stateOf(e *memEntry, now int64) algorithm.State {
	if e == nil || e.expires <= now {
		return algorithm.State{}
	}
	return e.state
}

// store keeps st for key, whose entry (nil for none) was looked up under
// the same lock, for reset µs, or drops the key when st equals a fresh
// key's; then it evicts keys (victim) while the shard holds more than its
// share of MaxBytes. A key new to a full shard takes a victim's entry.
// The caller holds s.mu.
func (m *Memory) store(s *memShard, e *memEntry, key string, st algorithm.State, reset, now int64) {
	if reset <= 0 {
		if e != nil {
			s.drop(e)
		}
		return
	}
	if e == nil {
		if len(s.m) >= m.perShard {
			e = s.victim(now, nil) // reused
			s.drop(e)
		} else {
			e = new(memEntry)
		}
		e.key, e.size, e.used = key, 0, false
		s.m[key] = e
		s.pushHead(e)
	} else {
		e.used = true
	}
	e.state, e.expires = st, now+reset
	size := entrySize(key, st)
	s.bytes += size - e.size
	e.size = size
	for s.bytes > m.perShardBytes {
		v := s.victim(now, e)
		if v == nil {
			break // never the key just stored: alone, it may pass its share
		}
		s.drop(v)
	}
}

// secondChances bounds the used keys the eviction hand moves to the head
// in one eviction: past it, the oldest is dropped however used.
const secondChances = 64

// victim is the key to drop next, at now, never keep: the oldest in the
// list whose state has expired or that was not used since the hand last
// passed it; used keys passed on the way go to the head, unmarked. Nil
// when the shard holds nothing but keep. The caller holds s.mu.
func (s *memShard) victim(now int64, keep *memEntry) *memEntry {
	for chances := 0; ; {
		e := s.head.prev
		switch {
		case e == &s.head:
			return nil
		case e == keep:
			if e.prev == &s.head {
				return nil
			}
		case !e.used || e.expires <= now || chances >= secondChances:
			return e
		default:
			chances++
			e.used = false
		}
		s.unlink(e)
		s.pushHead(e)
	}
}

// pushHead links e in as the newest of the shard's list.
func (s *memShard) pushHead(e *memEntry) {
	e.next, e.prev = s.head.next, &s.head
	s.head.next.prev = e
	s.head.next = e
}

func (s *memShard) unlink(e *memEntry) {
	e.prev.next = e.next
	e.next.prev = e.prev
}

// drop removes e from the shard.
func (s *memShard) drop(e *memEntry) {
	s.unlink(e)
	delete(s.m, e.key)
	s.bytes -= e.size
}

// Len is the number of keys held, expired ones included until reused.
func (m *Memory) Len() int {
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}

// Bytes is the estimated memory of the keys held.
func (m *Memory) Bytes() int64 {
	var n int64
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		n += s.bytes
		s.mu.Unlock()
	}
	return n
}

// Close releases nothing; it makes Memory a drop-in for the Redis store.
func (m *Memory) Close() error { return nil }
