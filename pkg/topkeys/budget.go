package topkeys

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// MaxKeyBytes is the longest key (and limit name) held as given; a longer
// one is held as "sha256:" and the first 16 hex digits of its SHA-256, so
// distinct long keys stay distinct and none takes more than this.
const MaxKeyBytes = 512

// What each piece costs the budget: bounds, with room to spare, of what
// it takes on the heap (checked by TestCostsBoundHeap).
const (
	// keySlack covers a held key's allocation rounding up to its size
	// class (at most 32 bytes for keys up to MaxKeyBytes).
	keySlack = 32
	// perEntry is an entry (64 bytes), its slot in the index (a map of
	// string to pointer: at most about 60 bytes a key, growth included)
	// and its slot in the heap (8 bytes, twice that after growth).
	perEntry = 64 + 64 + 16
	// sketchBytes is a sketch with no keys: the struct, the index's
	// header and first group, the heap's first slice.
	sketchBytes = 512
	// perRing is a ring with no minutes, its lock, its entry in the map
	// of limits; each minute adds perMinute.
	perRing   = 256
	perMinute = 64
)

// entryBytes is what holding key in a sketch costs.
func entryBytes(key string) int64 { return int64(len(key)) + keySlack + perEntry }

// ringBytes is what tracking the limit named name costs.
func ringBytes(name string, minutes int) int64 {
	return int64(len(name)) + keySlack + perRing + int64(minutes)*perMinute
}

// hold is key as the tracker holds it: itself up to MaxKeyBytes, else by
// digest.
func hold(key string) string {
	if len(key) <= MaxKeyBytes {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:8])
}

// reserve charges n bytes to the budget, if it has room for them. When it
// has none, minutes older than those kept give their bytes back first, at
// most once a minute (in every ring but mine, whose lock the caller
// holds, if any).
func (t *Tracker) reserve(n int64, now time.Time, mine *ring) bool {
	if t.charge(n) {
		return true
	}
	at := now.Unix() / 60
	if last := t.swept.Load(); at <= last || !t.swept.CompareAndSwap(last, at) {
		return false
	}
	t.sweep(now, mine)
	return t.charge(n)
}

func (t *Tracker) charge(n int64) bool {
	for {
		used := t.used.Load()
		if used+n > t.opts.MaxBytes {
			return false
		}
		if t.used.CompareAndSwap(used, used+n) {
			return true
		}
	}
}

func (t *Tracker) release(n int64) { t.used.Add(-n) }

// drop gives back the bytes of m's sketch; the caller holds the lock of
// m's ring.
func (t *Tracker) drop(m *minute) {
	if m.sketch != nil {
		t.release(m.sketch.bytes)
		m.sketch = nil
	}
}

// Sweep gives back the bytes of every minute no longer kept at now, so
// that what a flood took returns once its minutes pass, without waiting
// for the budget to run short. A limit refusing now is not waited for: its
// old minutes go at the next Sweep. The owner calls it on a timer.
func (t *Tracker) Sweep(now time.Time) { t.sweep(now, nil) }

// sweep gives back the bytes of every minute no longer kept, in the rings
// whose lock is free (refusals are never waited for) but mine, whose lock
// the caller holds.
func (t *Tracker) sweep(now time.Time, mine *ring) {
	t.limits.Range(func(_, v any) bool {
		r := v.(*ring)
		if r != mine && !r.mu.TryLock() {
			return true
		}
		for i := range r.minutes {
			if !t.live(r.minutes[i], now) {
				t.drop(&r.minutes[i])
			}
		}
		if r != mine {
			r.mu.Unlock()
		}
		return true
	})
}
