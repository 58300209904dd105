package localbucket

import "time"

const (
	// sweepChunk bounds the slots Sweep examines in one hold of a shard's
	// lock: each is a refill computed and at most a removal (two map
	// writes), so a caller waiting for the lock waits a few microseconds at
	// worst, however large the shard.
	sweepChunk = 64
	// A shard's slots and map are remade at their size after a sweep when
	// the keys left are at most a quarter of the slots' room and at most
	// rebuildMax: a Go map keeps its tables when keys leave, so without it
	// a flood's memory would stay. Remaking costs one map insertion per key
	// left, under the lock, which rebuildMax bounds (a few microseconds);
	// shrinkMin keeps a small shard from being remade on every sweep.
	rebuildMax = 256
	shrinkMin  = 64
)

// Sweep drops the buckets that are full at now, and returns how many it
// dropped: an owner calls it on a timer (once a second), so keys gone idle
// leave without new traffic, where insertions alone would only reuse their
// slots. A full bucket is in the state of a key never seen, so dropping it
// changes no answer (as long as the clock moves forward and the key keeps
// its limit); a bucket that never refills (Rate 0) is never full again and
// leaves only by eviction. A shard left with few keys gets slots and a map
// of their size, so the memory of a flood of keys comes back.
//
// It examines every bucket held when it starts once (a key added during
// the call may be left for the next), at most sweepChunk per hold of a
// shard's lock, taking the shards in turn, so a caller of AllowN waits for
// at most one short step. The work is linear in the keys held, a read of
// every slot: about 8 ns a key, 8.4 ms a call at DefaultMaxKeys
// (BenchmarkSweep, on a 2-core machine); with nothing to drop it does not
// allocate.
//
// Safe for concurrent use with every other method; concurrent Sweeps take
// turns.
func (b *Buckets) Sweep(now time.Time) int {
	t := int64(now.Sub(b.base))
	b.sweepMu.Lock()
	defer b.sweepMu.Unlock()
	dropped := 0
	for start, active := true, true; active; start = false {
		active = false
		for i := range b.shards {
			s := &b.shards[i]
			s.mu.Lock()
			n, more := s.sweepSome(t, start)
			s.mu.Unlock()
			dropped += n
			active = active || more
		}
	}
	return dropped
}

// sweepSome examines up to sweepChunk slots, from the last if start and
// from slot s.pass-1 down otherwise, drops the buckets full at now, and
// reports how many it dropped and whether the walk goes on.
//
// Walking down is what makes the walk safe across lock holds: a removal
// moves the last slot into the hole, and insertions append or reuse a
// slot in place, so a bucket not yet examined (below s.pass) stays where
// it is or moves lower, never to s.pass or above. Requires s.mu held.
func (s *shard) sweepSome(now int64, start bool) (dropped int, more bool) {
	if start {
		s.pass = len(s.buckets)
	}
	i := min(s.pass, len(s.buckets))
	if i == 0 {
		return 0, false // done already, or empty
	}
	for stop := max(i-sweepChunk, 0); i > stop; {
		i--
		if bk := &s.buckets[i]; bk.state.full(bk.lim, now) {
			s.remove(i)
			dropped++
		}
	}
	s.pass = i
	if i > 0 {
		return dropped, true
	}
	s.shrink()
	return dropped, false
}

// remove drops the bucket in slot i; the last slot takes its place.
// Requires s.mu held.
func (s *shard) remove(i int) {
	delete(s.index, s.buckets[i].key)
	last := len(s.buckets) - 1
	if i != last {
		s.buckets[i] = s.buckets[last]
		s.index[s.buckets[i].key] = int32(i)
	}
	s.buckets[last] = bucket{} // let the key go
	s.buckets = s.buckets[:last]
	if s.clock >= last {
		s.clock = 0
	}
	if s.sweep >= last {
		s.sweep = 0
	}
}

// shrink remakes the slots and the map at their size when few of the keys
// they were sized for are left. Requires s.mu held.
func (s *shard) shrink() {
	n := len(s.buckets)
	if cap(s.buckets) < shrinkMin || n > cap(s.buckets)/4 || n > rebuildMax {
		return
	}
	s.buckets = append(make([]bucket, 0, n), s.buckets...)
	s.index = make(map[string]int32, n)
	for i := range s.buckets {
		s.index[s.buckets[i].key] = int32(i)
	}
	s.clock, s.sweep = 0, 0
}
