// Package topkeys finds the keys refused most often, per limit, in a
// stated number of bytes: a space-saving sketch (Metwally, Agrawal and El
// Abbadi, 2005) per limit and per minute, the last few minutes kept. A
// key's reported count is at most its true count plus the sketch's error,
// which is at most the total refusals of the minute over the sketch's
// size; a key refused more often than that is never missed.
//
// Memory is bounded by a byte budget (Options.MaxBytes, DefaultMaxBytes
// by default), whatever the keys' length and the number of limits: every
// limit, sketch and key is charged to the budget before it is held, at a
// cost that bounds what it takes on the heap, and a key longer than
// MaxKeyBytes is held as a digest of the whole key ("sha256:" and 16 hex
// digits). When the budget has no room, refusals are still counted, in
// their limit's total as Limit.Unattributed (or, for a limit that found
// no room itself, in Untracked), and the sketch guarantee above holds for
// the keys a sketch does hold: its error is then at most the minute's
// refusals over the keys it holds. Minutes older than the kept ones give
// their bytes back at the owner's next Sweep, or when the budget next runs
// short.
//
// Counting stays off the request's critical path: each limit has its own
// lock, and a refusal that finds it held is not waited for. It is added
// to a backlog that the next refusals counted carry as their weight, at
// most 64 each (so that no key the flood sent once jumps to the top): a
// sample of the same stream, so under a flood from many cores the heavy
// hitters keep their share while no core waits. Totals stay exact; the
// sampled weight is added to a key's error and reported per limit.
//
// It depends on the standard library only.
package topkeys

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Options.
const (
	// DefaultMaxBytes is the default byte budget: 32 MiB.
	DefaultMaxBytes = 32 << 20
	DefaultSize     = 64
	DefaultMinutes  = 5
	DefaultLimits   = 1000
)

// Options size a Tracker. Zero values take the defaults given.
//
// A plain value, safe to share between goroutines.
type Options struct {
	// MaxBytes bounds the heap the tracker holds: its limits, sketches
	// and keys. Default DefaultMaxBytes.
	MaxBytes int64
	// Size is the keys each sketch counts. Default DefaultSize.
	Size int
	// Minutes is how many minutes are kept. Default DefaultMinutes.
	Minutes int
	// MaxLimits is how many limits are tracked; refusals of more are
	// counted in Untracked only. Default DefaultLimits.
	MaxLimits int
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Tracker counts refusals per limit and key. It is safe for concurrent
// use; use New to make one.
type Tracker struct {
	opts      Options
	limits    sync.Map     // limit name → *ring
	mu        sync.Mutex   // serialises adding a limit
	n         atomic.Int64 // limits tracked, at most MaxLimits
	used      atomic.Int64 // bytes charged to the budget
	swept     atomic.Int64 // the Unix minute of the last sweep
	untracked atomic.Int64 // refusals of limits that found no room
}

// ring is one limit's minutes, under its own lock.
type ring struct {
	name    string // as held: see hold
	size    int    // each sketch's keys
	mu      sync.Mutex
	minutes []minute
	// backlog is refusals that found mu held, not yet counted.
	backlog atomic.Int64
}

// minute is one minute's refusals of a limit; its sketch is nil when the
// budget had no room for one.
type minute struct {
	at                           int64 // the minute (Unix minutes) it counts
	total, sampled, unattributed int64
	sketch                       *sketch
}

// New returns a Tracker.
func New(o Options) *Tracker {
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.Size <= 0 {
		o.Size = DefaultSize
	}
	if o.Minutes <= 0 {
		o.Minutes = DefaultMinutes
	}
	if o.MaxLimits <= 0 {
		o.MaxLimits = DefaultLimits
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Tracker{opts: o}
}

// ring returns limit's ring, adding it if fewer than MaxLimits are
// tracked and the budget has room; nil otherwise.
func (t *Tracker) ring(limit string, now time.Time) *ring {
	if r, ok := t.limits.Load(limit); ok {
		return r.(*ring)
	}
	// No room, and none to be made this minute: said without the lock,
	// so that a flood on a limit not tracked does not queue on it.
	name := hold(limit)
	cost := ringBytes(name, t.opts.Minutes)
	if t.n.Load() >= int64(t.opts.MaxLimits) || t.used.Load()+cost > t.opts.MaxBytes && t.swept.Load() >= now.Unix()/60 {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if r, ok := t.limits.Load(limit); ok {
		return r.(*ring)
	}
	// A ring's bytes stay charged: limits are tracked for good.
	if t.n.Load() >= int64(t.opts.MaxLimits) || !t.reserve(cost, now, nil) {
		return nil
	}
	r := &ring{name: name, size: t.opts.Size, minutes: make([]minute, t.opts.Minutes)}
	t.limits.Store(limit, r)
	t.n.Add(1)
	return r
}

// maxCarry is the most of the backlog one counted refusal carries.
const maxCarry = 64

// Refused counts one refusal of key by limit. It never waits for another
// refusal being counted: see the package documentation.
func (t *Tracker) Refused(limit, key string) {
	now := t.opts.Now()
	r := t.ring(limit, now)
	if r == nil {
		t.untracked.Add(1)
		return
	}
	if !r.mu.TryLock() {
		r.backlog.Add(1)
		return
	}
	defer r.mu.Unlock()
	// It carries at most maxCarry of the backlog: a refusal that alone
	// carried a long stall's backlog would put a key the flood sent once
	// at the top. The rest waits for the next refusals, or counts in the
	// total, of no key (top).
	c := min(r.backlog.Load(), maxCarry)
	r.backlog.Add(-c)
	w := 1 + c
	m := t.minute(r, now)
	m.total += w
	m.sampled += w - 1
	if m.sketch == nil && t.reserve(sketchBytes, now, r) {
		m.sketch = newSketch(r.size)
	}
	if m.sketch == nil || !m.sketch.add(t, key, w, now) {
		m.unattributed += w
	}
}

// Untracked is the refusals, since the Tracker was made, of limits it had
// no room for (past MaxLimits, or with its budget used up).
func (t *Tracker) Untracked() int64 { return t.untracked.Load() }

// minute is r's minute of now, emptied first if its slot held an older
// minute's; the caller holds r.mu.
func (t *Tracker) minute(r *ring, now time.Time) *minute {
	at := now.Unix() / 60
	m := &r.minutes[at%int64(len(r.minutes))]
	if m.at != at {
		t.drop(m)
		*m = minute{at: at}
	}
	return m
}

// Key is one key's refusals over the kept minutes.
//
// A plain value, safe to share between goroutines.
type Key struct {
	// Key is as Refused was given it, or its digest when longer than
	// MaxKeyBytes.
	Key string `json:"key"`
	// Count − Error ≤ the true count ≤ Count, Error being at most the
	// refusals of each minute over the keys its sketch held; plus, when
	// refusals were sampled (Limit.Sampled), the sampled weight this key
	// took, by which its count is an estimate.
	Count int64     `json:"count"`
	Error int64     `json:"error"`
	Last  time.Time `json:"last"`
}

// Limit is one limit's top keys.
//
// A plain value, safe to share between goroutines.
type Limit struct {
	Limit string `json:"limit"`
	// Refused is the refusals counted over the kept minutes.
	Refused int64 `json:"refused"`
	// Sampled is how many of them found the sketch busy and were counted
	// as the weight of a later refusal (see the package documentation):
	// 0 unless refusals came faster than one core counts them.
	Sampled int64 `json:"sampled"`
	// Unattributed is how many of them were counted of no key, the
	// budget having no room for their key.
	Unattributed int64 `json:"unattributed"`
	Keys         []Key `json:"keys"`
}

// Top returns, per limit (by name), its n most refused keys over the kept
// minutes, most first.
func (t *Tracker) Top(n int) []Limit {
	now := t.opts.Now()
	var out []Limit
	t.limits.Range(func(_, r any) bool {
		if l, ok := t.top(r.(*ring), n, now); ok {
			out = append(out, l)
		}
		return true
	})
	slices.SortFunc(out, func(a, b Limit) int { return cmp.Compare(a.Limit, b.Limit) })
	return out
}

// Busiest returns the limits most refused over the kept minutes, at most
// limits of them, most first, each with its n most refused keys; and how
// many more limits refused. Its cost grows with the limits tracked and
// with the keys of the limits it returns, not with the keys of the others.
func (t *Tracker) Busiest(limits, n int) (top []Limit, more int) {
	now := t.opts.Now()
	type busy struct {
		r       *ring
		refused int64
	}
	var all []busy
	t.limits.Range(func(_, v any) bool {
		r := v.(*ring)
		r.mu.Lock()
		var refused int64
		for _, m := range r.minutes {
			if t.live(m, now) {
				refused += m.total
			}
		}
		r.mu.Unlock()
		if refused += r.backlog.Load(); refused > 0 {
			all = append(all, busy{r, refused})
		}
		return true
	})
	slices.SortFunc(all, func(a, b busy) int {
		if a.refused != b.refused {
			return cmp.Compare(b.refused, a.refused)
		}
		return cmp.Compare(a.r.name, b.r.name)
	})
	if len(all) > limits {
		all, more = all[:max(limits, 0)], len(all)-max(limits, 0)
	}
	for _, b := range all {
		if l, ok := t.top(b.r, n, now); ok {
			top = append(top, l)
		}
	}
	return top, more
}

// live says whether m counts a minute of those kept at now.
func (t *Tracker) live(m minute, now time.Time) bool {
	return m.at != 0 && now.Unix()/60-m.at < int64(t.opts.Minutes)
}

// top is r's n most refused keys; false if none was refused in the kept
// minutes.
func (t *Tracker) top(r *ring, n int, now time.Time) (Limit, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Refusals left in the backlog count in the total, of no key.
	if b := r.backlog.Swap(0); b > 0 {
		m := t.minute(r, now)
		m.total += b
		m.sampled += b
	}
	merged := map[string]*Key{}
	l := Limit{Limit: r.name}
	for _, m := range r.minutes {
		if !t.live(m, now) {
			continue
		}
		l.Refused += m.total
		l.Sampled += m.sampled
		l.Unattributed += m.unattributed
		if m.sketch == nil {
			continue
		}
		for _, e := range m.sketch.entries {
			k := merged[e.key]
			if k == nil {
				k = &Key{Key: e.key}
				merged[e.key] = k
			}
			k.Count += e.count
			k.Error += e.err
			if e.last.After(k.Last) {
				k.Last = e.last
			}
		}
	}
	if l.Refused == 0 {
		return l, false
	}
	keys := make([]Key, 0, len(merged))
	for _, k := range merged {
		keys = append(keys, *k)
	}
	slices.SortFunc(keys, func(a, b Key) int {
		if a.Count != b.Count {
			return cmp.Compare(b.Count, a.Count)
		}
		return cmp.Compare(a.Key, b.Key)
	})
	l.Keys = keys[:min(max(n, 0), len(keys))]
	return l, true
}
