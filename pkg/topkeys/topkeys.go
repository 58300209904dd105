// Package topkeys finds the keys refused most often, per limit, in fixed
// memory: a space-saving sketch (Metwally, Agrawal and El Abbadi, 2005)
// per limit and per minute, the last few minutes kept. A key's reported
// count is at most its true count plus the sketch's error, which is at
// most the total refusals of the minute over the sketch's size; a key
// refused more often than that is never missed.
//
// Counting stays off the request's critical path: each limit has its own
// lock, and a refusal that finds it held is not waited for. It is added
// to a backlog that the next refusal counted carries as its weight: a
// sample of the same stream, so under a flood from many cores the heavy
// hitters keep their share while no core waits. Totals stay exact; the
// sampled weight is added to a key's error and reported per limit.
package topkeys

import (
	"container/heap"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Options size a Tracker. Zero values take the defaults given.
//
// A plain value, safe to share between goroutines.
type Options struct {
	// Size is the keys each sketch counts. Default 64.
	Size int
	// Minutes is how many minutes are kept. Default 5.
	Minutes int
	// MaxLimits is how many limits are tracked; refusals of more are not
	// counted. Default 1,000.
	MaxLimits int
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Tracker counts refusals per limit and key. It is safe for concurrent
// use.
type Tracker struct {
	opts   Options
	limits sync.Map     // limit name → *ring
	mu     sync.Mutex   // serialises adding a limit
	n      atomic.Int64 // limits tracked, at most MaxLimits
}

// ring is one limit's sketches, one per minute, under its own lock.
type ring struct {
	size    int // each sketch's keys
	mu      sync.Mutex
	minutes []minute
	// backlog is refusals that found mu held, not yet counted.
	backlog atomic.Int64
}

type minute struct {
	at     int64 // the minute (Unix minutes) it counts
	sketch *sketch
}

// New returns a Tracker.
func New(o Options) *Tracker {
	if o.Size <= 0 {
		o.Size = 64
	}
	if o.Minutes <= 0 {
		o.Minutes = 5
	}
	if o.MaxLimits <= 0 {
		o.MaxLimits = 1000
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Tracker{opts: o}
}

// ring returns limit's ring, adding it if fewer than MaxLimits are
// tracked; nil otherwise.
func (t *Tracker) ring(limit string) *ring {
	if r, ok := t.limits.Load(limit); ok {
		return r.(*ring)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if r, ok := t.limits.Load(limit); ok {
		return r.(*ring)
	}
	if t.n.Load() >= int64(t.opts.MaxLimits) {
		return nil
	}
	r := &ring{size: t.opts.Size, minutes: make([]minute, t.opts.Minutes)}
	t.limits.Store(limit, r)
	t.n.Add(1)
	return r
}

// Refused counts one refusal of key by limit. It never waits for another
// refusal being counted: see the package documentation.
func (t *Tracker) Refused(limit, key string) {
	r := t.ring(limit)
	if r == nil {
		return
	}
	if !r.mu.TryLock() {
		r.backlog.Add(1)
		return
	}
	defer r.mu.Unlock()
	now := t.opts.Now()
	r.sketch(now).add(key, 1+r.backlog.Swap(0), now)
}

// sketch is the sketch of now's minute, fresh if its slot held an older
// minute's; the caller holds r.mu.
func (r *ring) sketch(now time.Time) *sketch {
	m := now.Unix() / 60
	slot := &r.minutes[m%int64(len(r.minutes))]
	if slot.at != m || slot.sketch == nil {
		slot.at, slot.sketch = m, newSketch(r.size)
	}
	return slot.sketch
}

// Key is one key's refusals over the kept minutes.
//
// A plain value, safe to share between goroutines.
type Key struct {
	Key string `json:"key"`
	// Count − Error ≤ the true count ≤ Count, Error being at most the
	// refusals of each minute over the sketch's size; plus, when refusals
	// were sampled (Limit.Sampled), the sampled weight this key took, by
	// which its count is an estimate.
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
	Keys    []Key `json:"keys"`
}

// Top returns, per limit (by name), its n most refused keys over the kept
// minutes, most first.
func (t *Tracker) Top(n int) []Limit {
	now := t.opts.Now()
	var out []Limit
	t.limits.Range(func(name, r any) bool {
		if l, ok := r.(*ring).top(name.(string), n, now); ok {
			out = append(out, l)
		}
		return true
	})
	slices.SortFunc(out, func(a, b Limit) int { return compare(a.Limit, b.Limit) })
	return out
}

// top is one limit's n most refused keys; false if none was refused in
// the kept minutes.
func (r *ring) top(name string, n int, now time.Time) (Limit, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Refusals left in the backlog count in the total, of no key.
	if b := r.backlog.Swap(0); b > 0 {
		s := r.sketch(now)
		s.total += b
		s.sampled += b
	}
	current := now.Unix() / 60
	merged := map[string]*Key{}
	l := Limit{Limit: name}
	for _, m := range r.minutes {
		if m.sketch == nil || current-m.at >= int64(len(r.minutes)) {
			continue
		}
		l.Refused += m.sketch.total
		l.Sampled += m.sketch.sampled
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
			return int(b.Count - a.Count)
		}
		return compare(a.Key, b.Key)
	})
	l.Keys = keys[:min(n, len(keys))]
	return l, true
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// sketch is a space-saving sketch of size keys: a min-heap by count and an
// index by key.
type sketch struct {
	size    int
	total   int64
	sampled int64 // of total, counted as another refusal's weight
	entries entryHeap
	index   map[string]*entry
}

type entry struct {
	key        string
	count, err int64
	last       time.Time
	at         int // its place in the heap
}

func newSketch(size int) *sketch {
	return &sketch{size: size, index: make(map[string]*entry, size)}
}

// add counts w refusals of key: one seen, w-1 sampled (see Refused),
// which are added to its error too.
func (s *sketch) add(key string, w int64, now time.Time) {
	s.total += w
	s.sampled += w - 1
	if e := s.index[key]; e != nil {
		e.count += w
		e.err += w - 1
		e.last = now
		heap.Fix(&s.entries, e.at)
		return
	}
	if len(s.entries) < s.size {
		e := &entry{key: key, count: w, err: w - 1, last: now}
		s.index[key] = e
		heap.Push(&s.entries, e)
		return
	}
	// Full: the least counted key makes room, its count the newcomer's
	// error.
	e := s.entries[0]
	delete(s.index, e.key)
	e.key, e.err, e.last = key, e.count+w-1, now
	e.count += w
	s.index[key] = e
	heap.Fix(&s.entries, 0)
}

type entryHeap []*entry

func (h entryHeap) Len() int           { return len(h) }
func (h entryHeap) Less(i, j int) bool { return h[i].count < h[j].count }
func (h entryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].at, h[j].at = i, j
}
func (h *entryHeap) Push(x any) {
	e := x.(*entry)
	e.at = len(*h)
	*h = append(*h, e)
}
func (h *entryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
