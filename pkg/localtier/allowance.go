package localtier

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// allowanceShards spreads the allowances over independently locked maps.
const allowanceShards = 32

// allowanceLapse is how many of the intervals at which a key is reported
// (a flush interval, or longer for a key asked for seldom) an allowance is
// good for without a new answer, allowanceKept at most; allowanceKept is
// also how long a key's entry outlives its last answer, so that a key that
// went quiet is decided as before again.
const (
	allowanceLapse = 3
	allowanceKept  = time.Second
)

// allowances are the sidecar's allowances on tight keys (pkg/share): per
// key, the units it may still admit until the upstream answers its next
// report. A key with an entry is bound: when the allowance lapses (no
// answer within allowanceLapse of its reporting intervals) it admits nothing more until an
// answer, so a stale allowance never admits; the entry goes when an answer
// says the key is not tight, or allowanceKept after the last answer. They
// hold at most max keys (answers for more are not kept: those keys are
// decided as before).
type allowances struct {
	seed   maphash.Seed
	max    int64
	keys   atomic.Int64
	shards [allowanceShards]allowanceShard
}

type allowanceShard struct {
	mu sync.Mutex
	m  map[string]*allowance // guarded by mu
	_  [128 - 16]byte        // a shard's lock alone on its cache lines
}

type allowance struct {
	left     float64 // units it may still admit
	until    int64   // ns (Tier.base): after it, left counts as 0
	answered int64   // ns: the last answer for the key
	reported int64   // ns: the last report of the key, for its demand rate
}

func newAllowances(max int) *allowances {
	a := &allowances{seed: maphash.MakeSeed(), max: int64(max)}
	for i := range a.shards {
		a.shards[i].m = make(map[string]*allowance)
	}
	return a
}

func (a *allowances) shard(key string) *allowanceShard {
	return &a.shards[maphash.String(a.seed, key)%allowanceShards]
}

// take takes each non-shadow item's cost from its key's allowance, where
// it has one, all or nothing at now (ns): it reports false, taking
// nothing, when an item's allowance is short, and marks in short which.
func (a *allowances) take(b *limiter.Batch, now int64, short *took) bool {
	var done took
	for i, it := range b.Items {
		if it.Shadow || it.Cost <= 0 {
			continue
		}
		s := a.shard(it.Key)
		s.mu.Lock()
		al := s.m[it.Key]
		ok := al == nil
		if al != nil && now < al.until && al.left >= float64(it.Cost) {
			al.left -= float64(it.Cost)
			ok = true
		}
		s.mu.Unlock()
		if !ok {
			*short |= 1 << i
			a.giveBack(b, done)
			return false
		}
		if al != nil {
			done |= 1 << i
		}
	}
	return true
}

// giveBack returns what take took from the items in set.
func (a *allowances) giveBack(b *limiter.Batch, set took) {
	for i, it := range b.Items {
		if set&(1<<i) == 0 {
			continue
		}
		s := a.shard(it.Key)
		s.mu.Lock()
		if al := s.m[it.Key]; al != nil {
			al.left += float64(it.Cost)
		}
		s.mu.Unlock()
	}
}

// set applies the upstream's answer for key at now (ns): units it may
// admit until it reports again (good for lapse ns), or, below zero, none:
// the key is decided as before.
func (a *allowances) set(key string, units float64, now, lapse int64) {
	s := a.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	al := s.m[key]
	if units < 0 {
		if al != nil {
			delete(s.m, key)
			a.keys.Add(-1)
		}
		return
	}
	if al == nil {
		if a.keys.Add(1) > a.max {
			a.keys.Add(-1)
			return
		}
		al = &allowance{}
		s.m[key] = al
	}
	// What the last allowance left unused, up to one unit, is kept: on a
	// key several sidecars share, a share of a small pool is a fraction
	// of a unit, rounded up now and then, and a sidecar asked for the key
	// only now and then would find each unit replaced before its request
	// came, refusing what the limit had room for. A unit a sidecar holds
	// unused is still in the store's pool, so at most one unit a sidecar
	// can be handed twice; a flood spends its allowance and keeps none.
	carry := 0.0
	if now < al.until {
		carry = min(max(al.left, 0), carryUnits)
	}
	al.left, al.until, al.answered = units+carry, now+lapse, now
}

// carryUnits is the most of an unused allowance an answer keeps (set).
const carryUnits = 1

// since returns how long ago (ns) key was last reported, at least
// interval, and marks it reported at now.
func (a *allowances) since(key string, now, interval int64) int64 {
	s := a.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	al := s.m[key]
	if al == nil {
		return interval
	}
	d := now - al.reported
	al.reported = now
	return max(interval, d)
}

// prune drops the entries answered last before now − allowanceKept.
func (a *allowances) prune(now int64) {
	for i := range a.shards {
		s := &a.shards[i]
		s.mu.Lock()
		for k, al := range s.m {
			if now-al.answered > int64(allowanceKept) {
				delete(s.m, k)
				a.keys.Add(-1)
			}
		}
		s.mu.Unlock()
	}
}
