package localtier

import (
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// pendingShards spreads the pending hits over independently locked maps,
// so that parallel requests rarely wait on one another or on a flush.
const pendingShards = 64

// pending aggregates the hits admitted in async mode per key until a flush
// sends them. It holds at most max keys and maxBytes bytes (as estimated by
// pendingSize); the hits of a key that finds no room are dropped and
// counted.
type pending struct {
	seed          maphash.Seed
	max, maxBytes int64
	keys, bytes   atomic.Int64 // held, across shards
	// holdOf is the units of a loose key its hits may be kept for, 0 for
	// none (Tier.holdOf), and holdFor how long (ns) at most: see drain.
	holdOf  func(key string) float64
	holdFor int64
	// kept is the keys the last drain kept pending under their holds.
	kept   atomic.Int64
	shards [pendingShards]pendingShard
}

type pendingShard struct {
	mu   sync.Mutex
	hits map[string]hits // guarded by mu; emptied, not replaced, by drain
	// Guarded by mu, so that a drain visits the keys it may send and no
	// others (scanning every held key at every 10 ms flush took 12 % of a
	// sidecar's CPU with 10,000 loose keys): due, the keys that hold
	// nothing (hits.holds); ends, the others by the end of their holds
	// (hits.holdUntil, multiples of holdTick), the earliest next. A key
	// stops holding at most once and never starts again, and its hold's
	// end is set when its entry is made; a key listed where it is not any
	// more (sent, then made anew) is told apart by its entry.
	due  []string
	ends map[int64][]string
	next int64
	// Pad the 64 bytes above to 128 so that two shards' locks never share a
	// cache line or an adjacent-line prefetch pair.
	_ [128 - 64]byte
}

// hits are one key's admitted, unsent hits, with what the upstream needs to
// record them on the key's limit: the domain, the configured limit's path
// (rls.LimitPathKey), the descriptor's entries with their values as they
// are counted (limiter.EntryValue: a long value by its digest, so a pending key
// holds a few hundred bytes whatever the request carried) and any limit
// override.
type hits struct {
	domain, path string
	entries      []config.Entry
	override     limiter.Override
	overridden   bool
	n            uint64
	// asked is the units requests asked for, admitted or not: the demand
	// reported with the hits (pkg/share).
	asked uint64
	// refund is the units Envoy gave back (is_negative_hits), sent with
	// the hits as a descriptor of their own that refunds them.
	refund uint64
	// first and last are when the first and the last of the n were
	// admitted, and memory how long the key's limit remembers a hit (ns;
	// see memory): what stale hits are worth when they are sent late.
	first, last, memory int64
	size                int64 // pendingSize, counted in pending.bytes
	// hold is the units of a loose key the hits may be kept unsent for,
	// until holdUntil (ns; see drain): the key's hold (pkg/share) when its
	// entry was made.
	hold      float64
	holdUntil int64
}

// pendingOverhead estimates a pending key's memory beyond its strings: its
// map entry, the hits and the entries' headers.
const pendingOverhead = 256

func pendingSize(key string, h *hits) int64 {
	n := int64(pendingOverhead + len(key) + len(h.domain) + len(h.path))
	for _, e := range h.entries {
		n += int64(len(e.Key) + len(e.Value) + 32)
	}
	if h.overridden {
		n += 16
	}
	return n
}

// holdTick is the grain of the holds' ends (ns): the held keys that run
// out go together in one flush call every holdTick rather than a few in
// every flush. With 10,000 zipf keys that halved the servers' and
// Redis's CPU per request (3.0 µs to 1.75), the calls' own cost being
// most of it.
const holdTick = int64(100 * time.Millisecond)

func newPending(max int, maxBytes int64, holdOf func(string) float64, holdFor time.Duration) *pending {
	p := &pending{seed: maphash.MakeSeed(), max: int64(max), maxBytes: maxBytes, holdOf: holdOf, holdFor: holdFor.Nanoseconds()}
	for i := range p.shards {
		p.shards[i].hits = make(map[string]hits)
		p.shards[i].ends = make(map[int64][]string)
		p.shards[i].next = math.MaxInt64
	}
	return p
}

// add adds n hits admitted between first and last, of asked units asked
// for, and refund units given back, to key's pending hits and returns the
// keys now pending, or reports false if the key was new and found no room.
// A new key's hits are built by describe, only then.
func (p *pending) add(key string, n, asked, refund uint64, first, last int64, describe func() hits) (int64, bool) {
	s := &p.shards[maphash.String(p.seed, key)%pendingShards]
	s.mu.Lock()
	cur, ok := s.hits[key]
	held := ok && cur.holds()
	if !ok {
		cur = describe()
		cur.n, cur.asked, cur.refund, cur.first, cur.last = 0, 0, 0, first, last
		cur.size = pendingSize(key, &cur)
		cur.hold, cur.holdUntil = 0, 0
		if p.holdFor > 0 {
			if cur.hold = p.holdOf(key); cur.hold > 0 {
				// Never near what the limit remembers, so that every
				// hit is still worth sending when it goes (Tier.worth):
				// half of it, the flush that sends them comes later.
				// Rounded down to a holdTick, so that the holds that
				// run out go together in one flush, not one a flush.
				cur.holdUntil = (first + min(p.holdFor, cur.memory/2)) / holdTick * holdTick
			}
		}
		// Room in the totals, taken or given back.
		if p.keys.Add(1) > p.max || p.bytes.Add(cur.size) > p.maxBytes {
			p.keys.Add(-1)
			p.bytes.Add(-cur.size)
			s.mu.Unlock()
			return 0, false
		}
	}
	cur.n += n
	cur.asked += asked
	cur.refund = min(cur.refund+refund, limiter.MaxCost) // what one descriptor may carry
	if n > 0 {
		cur.first, cur.last = min(cur.first, first), max(cur.last, last)
	}
	s.hits[key] = cur
	switch {
	case !ok && cur.holds():
		s.ends[cur.holdUntil] = append(s.ends[cur.holdUntil], key)
		s.next = min(s.next, cur.holdUntil)
	case !ok || held && !cur.holds():
		s.due = append(s.due, key)
	}
	s.mu.Unlock()
	return p.keys.Load(), true
}

// holds reports whether h may stay pending until h.holdUntil: a loose
// key's hits (hits.hold), no more units than the hold, nothing refunded or
// refused (see drain).
func (h *hits) holds() bool {
	return h.hold > 0 && h.refund == 0 && h.asked == h.n && float64(h.n) <= h.hold
}

// entry is one key's hits taken out for a flush, with what the key's
// allowances had admitted and what was left of them when they were
// (allowances.spentOf).
type entry struct {
	key         string
	spent, held float64
	hits
}

// drain moves the pending keys' hits to dst and returns it. Unless all,
// it keeps those of a key under a hold (hits.hold) while they are within
// it at now (ns): no more units than the hold, nothing refunded or
// refused (a key that refuses is not loose any more: held, a key that
// turned tight went unreported while its allowance lapsed, and three
// sidecars at 1.5× a limit admitted 1 % less), before holdUntil, and the
// buffer less than half full, so that holds never crowd out new keys.
func (p *pending) drain(dst []entry, now int64, all bool) []entry {
	all = all || p.keys.Load() > p.max/2 || p.bytes.Load() > p.maxBytes/2
	kept := int64(0)
	for i := range p.shards {
		s := &p.shards[i]
		s.mu.Lock()
		var size, moved int64
		send := func(k string, h hits) {
			dst = append(dst, entry{key: k, hits: h})
			size += h.size
			moved++
			delete(s.hits, k)
		}
		if all {
			for k, h := range s.hits {
				send(k, h)
			}
			clear(s.ends)
			s.due, s.next = s.due[:0], math.MaxInt64
		} else {
			for _, k := range s.due {
				if h, ok := s.hits[k]; ok && !(h.holds() && now < h.holdUntil) {
					send(k, h)
				}
			}
			s.due = s.due[:0]
			if s.next <= now {
				s.next = math.MaxInt64
				for end, keys := range s.ends {
					if end > now {
						s.next = min(s.next, end)
						continue
					}
					for _, k := range keys {
						if h, ok := s.hits[k]; ok && h.holdUntil == end {
							send(k, h)
						}
					}
					delete(s.ends, end)
				}
			}
		}
		kept += int64(len(s.hits))
		p.keys.Add(-moved)
		p.bytes.Add(-size)
		s.mu.Unlock()
	}
	p.kept.Store(kept)
	return dst
}

// worth is how many of h's hits are still worth recording at now. Sent
// late (held through an upstream outage), hits the limit would have
// forgotten by now would only put the key into a debt its client never
// ran up: a token bucket charged ten minutes of hits at once stays shut
// for minutes after the outage. So hits older than both the limit's memory
// and one retry interval are left out, taking the n as spread evenly over
// [first, last]. Hits sent on time are always worth all of them.
func (t *Tier) worth(h hits, now time.Time) uint64 {
	cutoff := now.Sub(t.base).Nanoseconds() - max(h.memory, t.opts.RetryInterval.Nanoseconds())
	switch {
	case h.first >= cutoff:
		return h.n
	case h.last < cutoff:
		return 0
	}
	kept := float64(h.last-cutoff) / float64(h.last-h.first)
	return uint64(math.Ceil(float64(h.n) * kept))
}
