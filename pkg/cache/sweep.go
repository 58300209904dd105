package cache

import "time"

const (
	// sweepChunk bounds the slots Sweep examines in one hold of a shard's
	// lock: each is a comparison and at most a removal (two map writes), so
	// a caller waiting for the lock waits a few microseconds at worst,
	// however large the shard.
	sweepChunk = 64
	// A shard's slots and map are remade at their size after a sweep when
	// the flags left are at most a quarter of the slots' room and at most
	// rebuildMax: a Go map keeps its tables when keys leave, so without it
	// a flood's memory would stay. Remaking costs one map insertion per
	// flag left, under the lock, which rebuildMax bounds (a few
	// microseconds); shrinkMin keeps a small shard from being remade on
	// every sweep.
	rebuildMax = 256
	shrinkMin  = 64
)

// Sweep drops the flags whose deadline is at or before now, as Until would
// drop each when asked for it, and returns how many it dropped: an owner
// calls it on a timer (once a second), so flags nobody asks for again leave
// without new traffic. A shard left with few flags gets a map and slots of
// their size. Sweep never drops a flag before its deadline, so it changes no
// answer.
//
// It examines every flag held when it starts once (a flag added during the
// call may be left for the next), in order of the slots rather than of
// use, at most sweepChunk per hold of a shard's lock, taking the shards in
// turn, so a caller of Add or Until waits for at most one short step. The
// work is linear in the flags held, a read of every slot: about 3 ns a
// flag, 0.3 ms a call at DefaultSize (BenchmarkSweep, on a 2-core
// machine); with nothing to drop it does not allocate.
//
// Safe for concurrent use with every other method, and with itself.
func (c *OverLimit) Sweep(now time.Time) int {
	var next [maxShards]int // each shard's next slot to examine; 0: done
	for i := range c.shards {
		next[i] = -1 // not started
	}
	dropped := 0
	for active := true; active; {
		active = false
		for i := range c.shards {
			if next[i] == 0 {
				continue
			}
			s := &c.shards[i]
			s.mu.Lock()
			n, from := s.sweepSome(now, next[i])
			s.mu.Unlock()
			dropped += n
			next[i] = from
			active = active || from != 0
		}
	}
	return dropped
}

// sweepSome examines up to sweepChunk slots from slot from down (from the
// last slot if from < 0), drops the flags expired at now, and returns how
// many it dropped and the slot to go on from, 0 when the walk is over.
//
// Walking down is what makes the walk safe across lock holds: a removal
// moves the last slot into the hole, so a flag not yet examined (at or
// below from) either stays where it is or moves lower, never above from.
// Requires s.mu held.
func (s *shard) sweepSome(now time.Time, from int) (dropped, next int) {
	i := len(s.slots) - 1
	if from >= 0 {
		i = min(from, i) // sweeps running at once may have removed slots
	}
	for stop := max(i-sweepChunk, 0); i > stop; i-- {
		if !now.Before(s.slots[i].until) {
			s.remove(int32(i))
			dropped++
		}
	}
	if i == 0 {
		s.shrink()
	}
	return dropped, i
}

// shrink remakes the slots and the map at their size when few of the flags
// they were sized for are left. Requires s.mu held.
func (s *shard) shrink() {
	n := len(s.index)
	if cap(s.slots) < shrinkMin || n > (cap(s.slots)-1)/4 || n > rebuildMax {
		return
	}
	// The flags are slots[1:n+1] (no gaps), so a copy keeps every link.
	s.slots = append(make([]slot, 0, n+1), s.slots...)
	index := make(map[string]int32, n)
	for i := 1; i < len(s.slots); i++ {
		index[s.slots[i].key] = int32(i)
	}
	s.index = index
}
