package localbucket

// Choosing a slot for a new key (shard.slot) uses two hands over the shard's
// slots, both bounded per insertion so a lock is never held for a scan of the
// whole shard:
//
//   - the sweep looks for full buckets. A full bucket is in the state of a key
//     never seen, so reusing its slot changes no answer. The sweep runs on every
//     insertion, also while the shard has room, so idle keys make room for new
//     ones before the shard grows: memory follows the live keys. (Without
//     insertions, Sweep in sweep.go drops them on the owner's timer.)
//   - the clock evicts, when the shard is full and the sweep found nothing, a
//     bucket not used since the clock last passed it: CLOCK (second chance), an
//     approximation of least-recently-used.
//
// Why CLOCK and not an exact LRU list: a hit on an LRU list relinks the bucket
// and its two neighbours and the list head, which are other random cache lines
// when keys are many; a CLOCK hit sets one bit in the bucket the decision is
// writing anyway. And a new key starts with its bit clear, so a flood of
// one-off keys (a scan, random client IDs) evicts its own kind first and does
// not flush the keys in steady use.
//
// Evicting a bucket that is not full forgets spent tokens: its key comes back
// with a full bucket, which can admit what the kept bucket would have
// rejected, never the reverse. Size MaxKeys above the number of keys active
// within one refill time to make that rare.

const (
	// sweepSteps is how many slots the sweep examines per insertion: the
	// lookahead of "full buckets first". The sweep slides on every insertion,
	// so a bucket that is full is found within len/sweepSteps insertions;
	// a larger lookahead costs a random memory read per step on the path a
	// flood of new keys takes.
	sweepSteps = 4
	// clockSteps bounds the clock's scan per eviction. A scan that finds every
	// bucket recently used evicts the first it passed (its bit now cleared),
	// the oldest in clock order.
	clockSteps = 64
)

// slot returns the position for a new key at now: a reclaimed full bucket, or
// len(s.buckets) to grow, or an evicted bucket. Requires s.mu held.
func (s *shard) slot(now int64) int {
	n := len(s.buckets)
	for range min(sweepSteps, n) {
		i := s.sweep
		s.sweep = (i + 1) % n
		if bk := &s.buckets[i]; bk.state.full(bk.lim, now) {
			return i
		}
	}
	if n < s.limit {
		return n
	}
	first := s.clock
	for range min(clockSteps, n) {
		i := s.clock
		s.clock = (i + 1) % n
		bk := &s.buckets[i]
		if !bk.used {
			return i
		}
		bk.used = false
	}
	return first
}
