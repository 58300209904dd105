package localbucket

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"strings"
	"sync"
	"time"
)

// DefaultShards is the number of shards when Options.Shards is 0.
const DefaultShards = 64

// DefaultMaxKeys is the bound on keys when Options.MaxKeys is 0: at most
// 184.5 MB (176 MiB) with the daemons' keys (see KeyOverhead).
const DefaultMaxKeys = 1 << 20

// KeyOverhead bounds the heap a key held costs beyond the key's own bytes:
// its slot (56 bytes: the key's header, the bucket's state and limit, the
// CLOCK bit) and its share of its shard's map (25 bytes a map slot, and the
// map's free slots). A key's own bytes are its length rounded up to a
// multiple of 16 (for keys of 32 to 256 bytes). The daemons key buckets by
// fixed-length store keys, prefix + "{" + 32 hex digits + "}": 41 bytes (48
// on the heap) with the default prefix "sluice:", so DefaultMaxKeys keys
// take at most 2^20 × 176 bytes = 184.5 MB (176 MiB), and 251.7 MB (240
// MiB) with a 64-byte prefix. Measured beyond the keys' bytes: 109 bytes a
// key at DefaultMaxKeys (157 with the key; BenchmarkSweep reports it), 124
// at the costliest size tried, just after the shards' maps grew
// (TestHeapWithinBudget). A budget in bytes divided by KeyOverhead plus the
// key's heap size is a safe MaxKeys.
const KeyOverhead = 128

// Options configures a Buckets.
//
// There is no idle TTL: a bucket idle long enough to refill is full, and
// full buckets are reclaimed first, exactly, on insertion and by Sweep;
// dropping an idle bucket that has not yet refilled would hand its key
// tokens it has not earned. MaxKeys is the only knob memory needs.
//
// New copies it, so changing it afterwards changes nothing; the Buckets
// are safe for concurrent use.
type Options struct {
	// MaxKeys bounds the number of keys held in total; 0 means
	// DefaultMaxKeys. It is split evenly over the shards, so a shard may
	// evict while another has room; with a per-instance hash seed the
	// shards fill evenly. Each key held costs at most KeyOverhead bytes
	// plus its own.
	MaxKeys int
	// Shards is the number of independently locked shards, a power of two;
	// 0 means DefaultShards. More shards mean fewer collisions between
	// parallel callers. If MaxKeys is smaller, the largest power of two not
	// above MaxKeys is used, so that MaxKeys stays an exact bound.
	Shards int
}

// Buckets is a bounded set of token buckets keyed by string. The zero value is
// not usable; build one with New. Safe for concurrent use: each key's decision
// is atomic, taken under the lock of the key's shard.
type Buckets struct {
	base   time.Time // instants are kept as now.Sub(base): monotonic when now has a monotonic reading
	seed   maphash.Seed
	mask   uint64
	shards []shard
	// sweepMu makes one Sweep at a time the owner of the shards' pass.
	sweepMu sync.Mutex
}

// New returns an empty Buckets.
func New(opts Options) (*Buckets, error) {
	if opts.MaxKeys == 0 {
		opts.MaxKeys = DefaultMaxKeys
	}
	if opts.MaxKeys < 0 {
		return nil, fmt.Errorf("localbucket: MaxKeys %d: must not be negative", opts.MaxKeys)
	}
	n := opts.Shards
	if n == 0 {
		n = DefaultShards
	}
	if n < 0 || n&(n-1) != 0 {
		return nil, fmt.Errorf("localbucket: Shards %d: must be a power of two", opts.Shards)
	}
	for n > opts.MaxKeys {
		n /= 2
	}
	if opts.MaxKeys/n >= math.MaxInt32 {
		return nil, errors.New("localbucket: more than 2^31-1 keys per shard; use more shards")
	}
	b := &Buckets{
		base:   time.Now(),
		seed:   maphash.MakeSeed(),
		mask:   uint64(n - 1),
		shards: make([]shard, n),
	}
	for i := range b.shards {
		limit := opts.MaxKeys / n
		if i < opts.MaxKeys%n {
			limit++ // the shard bounds sum to MaxKeys exactly
		}
		b.shards[i].init(limit)
	}
	return b, nil
}

// AllowN takes n tokens from key's bucket at now if they are there; see
// Decision for what it reports. A key not held starts with a full bucket for
// lim. n below 0 or NaN counts as 0, and a request for 0 tokens is always
// allowed: use it to read Remaining without spending.
//
// now should come from time.Now (or a time derived from one), whose monotonic
// reading makes AllowN immune to wall-clock changes; a now that goes backwards
// refills nothing. Tests may step now through any sequence.
//
// On a key already held AllowN does not allocate; a new key costs a copy of
// the key and, until its shard is full, map and slice growth.
func (b *Buckets) AllowN(key string, lim Limit, now time.Time, n float64) Decision {
	t := int64(now.Sub(b.base))
	lim = lim.sanitize()
	s := &b.shards[maphash.String(b.seed, key)&b.mask]
	s.mu.Lock()
	var bk *bucket
	if i, ok := s.index[key]; ok {
		bk = &s.buckets[i]
		bk.used = true
	} else {
		bk = s.insert(key, lim, t)
	}
	var d Decision
	bk.state, d = take(bk.state, lim, t, n)
	bk.lim = lim
	s.mu.Unlock()
	return d
}

// ReturnN gives n tokens back to key's bucket at now, capped at lim.Burst:
// it undoes an AllowN whose request was then not admitted after all (another
// of its limits denied it, or a later tier rejected it), so that tokens are
// only spent on what was admitted. A key not held is left alone: its bucket
// is full. n below 0 or NaN counts as 0. It does not allocate.
func (b *Buckets) ReturnN(key string, lim Limit, now time.Time, n float64) {
	if !(n > 0) {
		return
	}
	t := int64(now.Sub(b.base))
	lim = lim.sanitize()
	s := &b.shards[maphash.String(b.seed, key)&b.mask]
	s.mu.Lock()
	if i, ok := s.index[key]; ok {
		bk := &s.buckets[i]
		bk.state = give(bk.state, lim, t, n)
		bk.lim = lim
	}
	s.mu.Unlock()
}

// Allow is AllowN at time.Now().
func (b *Buckets) Allow(key string, lim Limit, n float64) Decision {
	return b.AllowN(key, lim, time.Now(), n)
}

// Len returns the number of keys held, at most Options.MaxKeys. It counts
// full buckets not yet reclaimed (see Sweep). Each shard is counted under its
// lock but not all at once, so under concurrent use the sum is a moment's
// approximation.
func (b *Buckets) Len() int {
	n := 0
	for i := range b.shards {
		s := &b.shards[i]
		s.mu.Lock()
		n += len(s.buckets)
		s.mu.Unlock()
	}
	return n
}

// bucket is one key's slot in its shard. Slots are reused in place when a key
// is reclaimed or evicted, so steady state allocates nothing.
type bucket struct {
	key   string
	state state
	lim   Limit // the limit last applied, to tell whether the bucket is full
	used  bool  // CLOCK reference bit: touched since the hand last passed
}

// shard holds up to limit buckets under mu. All fields are guarded by mu.
type shard struct {
	mu      sync.Mutex
	index   map[string]int32 // key → position in buckets
	buckets []bucket         // grows to limit, with no gaps (remove)
	limit   int
	clock   int // next slot the eviction hand examines (evict.go)
	sweep   int // next slot the full-bucket sweep examines (evict.go)
	// pass is the number of slots Sweep has yet to examine, from
	// pass-1 down (sweep.go); it belongs to the Sweep holding sweepMu.
	pass int
	// Pad the 72 bytes above to 128 so that two shards' locks never share a
	// cache line or an adjacent-line prefetch pair.
	_ [56]byte
}

func (s *shard) init(limit int) {
	s.limit = limit
	s.index = make(map[string]int32)
}

// insert gives key a slot holding a fresh bucket for lim at now and returns
// it. Requires s.mu held and key not in s.index.
func (s *shard) insert(key string, lim Limit, now int64) *bucket {
	i := s.slot(now)
	if i == len(s.buckets) {
		s.grow()
		s.buckets = s.buckets[:i+1]
	} else {
		delete(s.index, s.buckets[i].key)
	}
	// The bucket outlives the call: copy key rather than pin a larger buffer
	// the caller may have sliced it from.
	key = strings.Clone(key)
	s.buckets[i] = bucket{key: key, state: fresh(lim, now), lim: lim}
	s.index[key] = int32(i)
	return &s.buckets[i]
}

// grow makes room for one more slot if there is none: twice the room, but
// never more than the limit, so a full shard has no spare slots. Requires
// s.mu held.
func (s *shard) grow() {
	if len(s.buckets) < cap(s.buckets) {
		return
	}
	buckets := make([]bucket, len(s.buckets), min(s.limit, max(8, 2*cap(s.buckets))))
	copy(buckets, s.buckets)
	s.buckets = buckets
}
