package cache

import (
	"sync"
	"time"
)

// shard is one LRU under its own lock: the flags in a slice of slots, linked
// by index into a list from the most to the least recently used, and a map
// from key to slot.
//
// The list is ours rather than hashicorp/golang-lru's simplelru, whose
// entries are allocated one by one and linked by pointers. Sweep examines
// every flag, once a second: walking simplelru's list is a cache miss per
// flag (about 100 ns each, 10 ms a call at DefaultSize), where a scan of
// one slice reads memory in order, and it would have to copy the whole
// shard's keys (Keys) to resume after letting go of the lock. A slot is also
// smaller: 48 bytes in one array against simplelru's 96-byte entry, which
// carries an expiry time and a list pointer a flag never uses. The lock is
// ours too, as it was over simplelru, so that Until tests a flag and drops
// it if expired in one critical section.
type shard struct {
	mu sync.Mutex
	// All fields below are guarded by mu.
	index map[string]int32 // key → position in slots
	// slots[0] is the list's sentinel, never in index: slots[0].next is the
	// newest flag, slots[0].prev the oldest. The flags are slots[1:], with
	// no gaps: a slot removed takes the last one's place (remove).
	slots    []slot
	capacity int // most flags held
	// Pad the 48 bytes above to 128 so that two shards' locks never share a
	// cache line or an adjacent-line prefetch pair.
	_ [80]byte
}

// slot is one flag: 48 bytes.
type slot struct {
	key        string
	until      time.Time
	next, prev int32 // positions of the next older and the next newer flag
}

func (s *shard) init(capacity int) {
	s.capacity = capacity
	s.index = make(map[string]int32)
	s.slots = make([]slot, 1) // the sentinel, linked to itself
}

// insert adds a flag for key, not held, as the newest, taking the oldest
// flag's slot if the shard is full. Requires s.mu held.
func (s *shard) insert(key string, until time.Time) {
	var i int32
	if len(s.index) >= s.capacity {
		i = s.slots[0].prev
		s.unlink(i)
		delete(s.index, s.slots[i].key)
	} else {
		i = int32(len(s.slots))
		s.grow()
		s.slots = s.slots[:i+1]
	}
	s.slots[i].key, s.slots[i].until = key, until
	s.index[key] = i
	s.link(i)
}

// grow makes room for one more slot if there is none: twice the room, but
// never more than the capacity, so a full shard has no spare slots. Requires
// s.mu held.
func (s *shard) grow() {
	if len(s.slots) < cap(s.slots) {
		return
	}
	slots := make([]slot, len(s.slots), min(s.capacity+1, max(8, 2*cap(s.slots))))
	copy(slots, s.slots)
	s.slots = slots
}

// link makes slot i, not on the list, the newest. Requires s.mu held.
func (s *shard) link(i int32) {
	first := s.slots[0].next
	s.slots[i].prev, s.slots[i].next = 0, first
	s.slots[first].prev = i
	s.slots[0].next = i
}

// unlink takes slot i off the list. Requires s.mu held.
func (s *shard) unlink(i int32) {
	prev, next := s.slots[i].prev, s.slots[i].next
	s.slots[prev].next = next
	s.slots[next].prev = prev
}

// toFront makes slot i the newest. Requires s.mu held.
func (s *shard) toFront(i int32) {
	if s.slots[0].next != i {
		s.unlink(i)
		s.link(i)
	}
}

// remove drops the flag in slot i; the last slot takes its place. Requires
// s.mu held.
func (s *shard) remove(i int32) {
	s.unlink(i)
	delete(s.index, s.slots[i].key)
	last := int32(len(s.slots) - 1)
	if i != last {
		moved := s.slots[last]
		s.slots[i] = moved
		s.slots[moved.prev].next = i
		s.slots[moved.next].prev = i
		s.index[moved.key] = i
	}
	s.slots[last] = slot{} // let the key go
	s.slots = s.slots[:last]
}

// purge drops every flag, and the map and slots with them. Requires s.mu
// held.
func (s *shard) purge() {
	s.init(s.capacity)
}
