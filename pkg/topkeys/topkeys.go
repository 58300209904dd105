// Package topkeys finds the keys refused most often, per limit, in fixed
// memory: a space-saving sketch (Metwally, Agrawal and El Abbadi, 2005)
// per limit and per minute, the last few minutes kept. A key's reported
// count is at most its true count plus the sketch's error, which is at
// most the total refusals of the minute over the sketch's size; a key
// refused more often than that is never missed.
package topkeys

import (
	"container/heap"
	"slices"
	"sync"
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
	mu     sync.Mutex
	limits map[string]*ring
}

// ring is one limit's sketches, one per minute.
type ring struct {
	minutes []minute
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
	return &Tracker{opts: o, limits: make(map[string]*ring)}
}

// Refused counts one refusal of key by limit.
func (t *Tracker) Refused(limit, key string) {
	now := t.opts.Now()
	m := now.Unix() / 60
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.limits[limit]
	if r == nil {
		if len(t.limits) >= t.opts.MaxLimits {
			return
		}
		r = &ring{minutes: make([]minute, t.opts.Minutes)}
		t.limits[limit] = r
	}
	slot := &r.minutes[m%int64(len(r.minutes))]
	if slot.at != m || slot.sketch == nil {
		slot.at, slot.sketch = m, newSketch(t.opts.Size)
	}
	slot.sketch.add(key, now)
}

// Key is one key's refusals over the kept minutes.
//
// A plain value, safe to share between goroutines.
type Key struct {
	Key string `json:"key"`
	// Count is at most the true count plus Error.
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
	Keys    []Key `json:"keys"`
}

// Top returns, per limit (by name), its n most refused keys over the kept
// minutes, most first.
func (t *Tracker) Top(n int) []Limit {
	now := t.opts.Now().Unix() / 60
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Limit, 0, len(t.limits))
	for name, r := range t.limits {
		merged := map[string]*Key{}
		var refused int64
		for _, m := range r.minutes {
			if m.sketch == nil || now-m.at >= int64(len(r.minutes)) {
				continue
			}
			refused += m.sketch.total
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
		if refused == 0 {
			continue
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
		out = append(out, Limit{Limit: name, Refused: refused, Keys: keys[:min(n, len(keys))]})
	}
	slices.SortFunc(out, func(a, b Limit) int { return compare(a.Limit, b.Limit) })
	return out
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

func (s *sketch) add(key string, now time.Time) {
	s.total++
	if e := s.index[key]; e != nil {
		e.count++
		e.last = now
		heap.Fix(&s.entries, e.at)
		return
	}
	if len(s.entries) < s.size {
		e := &entry{key: key, count: 1, last: now}
		s.index[key] = e
		heap.Push(&s.entries, e)
		return
	}
	// Full: the least counted key makes room, its count the newcomer's
	// error.
	e := s.entries[0]
	delete(s.index, e.key)
	e.key, e.err, e.last = key, e.count, now
	e.count++
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
