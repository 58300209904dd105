package topkeys

import (
	"container/heap"
	"strings"
	"time"
)

// sketch is a space-saving sketch of at most size keys: a min-heap by
// count and an index by key. Its bytes (sketchBytes and each key's
// entryBytes) are charged to its Tracker's budget while it is held.
type sketch struct {
	size    int
	bytes   int64 // charged to the budget, its own included
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
	return &sketch{size: size, bytes: sketchBytes, index: map[string]*entry{}}
}

// add counts w refusals of key: one seen, w-1 sampled (see Refused),
// which are added to its error too. It reports false when the budget had
// no room for key: the caller counts the refusals of no key. The caller
// holds the lock of the sketch's ring.
func (s *sketch) add(t *Tracker, key string, w int64, now time.Time) bool {
	key = hold(key)
	if e := s.index[key]; e != nil {
		e.count += w
		e.err += w - 1
		e.last = now
		heap.Fix(&s.entries, e.at)
		return true
	}
	if len(s.entries) < s.size {
		if cost := entryBytes(key); t.reserve(cost, now, nil) {
			s.bytes += cost
			e := &entry{key: strings.Clone(key), count: w, err: w - 1, last: now}
			s.index[e.key] = e
			heap.Push(&s.entries, e)
			return true
		}
		if len(s.entries) == 0 {
			return false
		}
	}
	// Full (or the budget is): the least counted key makes room, its
	// count the newcomer's error. A longer newcomer is charged the
	// difference first.
	e := s.entries[0]
	grow := int64(len(key) - len(e.key))
	if grow > 0 && !t.reserve(grow, now, nil) {
		return false
	}
	if grow < 0 {
		t.release(-grow)
	}
	s.bytes += grow
	delete(s.index, e.key)
	e.key, e.err, e.last = strings.Clone(key), e.count+w-1, now
	e.count += w
	s.index[e.key] = e
	heap.Fix(&s.entries, 0)
	return true
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
