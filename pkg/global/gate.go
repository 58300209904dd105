package global

import (
	"sync"
	"time"
)

// gate lets the decision writers' pipelines onto the wire, as many at once
// as are worth having (pipelinesAllowed). One writer at a time waits for
// calls (it entered); once it has taken its batch it departs, and the next
// may enter when the pipelines in flight leave room. A writer kept waiting
// lets calls gather in the queue, so that the next pipeline carries more
// of them: every pipeline costs this process its write, its read and their
// wake-ups, and Redis a script call before the first item. It is safe for
// concurrent use.
type gate struct {
	mu        sync.Mutex
	listening bool // a writer has entered and waits for calls
	flying    int  // pipelines departed and not yet answered
	// wakeup wakes a waiting writer: a writer departed or a pipeline
	// landed, or the queue filled a batch. A wake-up finding no room is
	// harmless (enter looks again).
	wakeup chan struct{}
}

func newGate(writers int) *gate {
	return &gate{wakeup: make(chan struct{}, writers)}
}

// enter waits until no writer waits for calls and fewer than allowed
// pipelines are in flight, not counting those out for longer than late
// (one slow connection, say a lost segment waiting for its retransmission,
// must not hold the rest), or a whole batch is queued (waiting would
// gather no more). wait is the caller's own stopped timer. False when stop
// closes first. A nil gate lets every writer through, as do its depart and
// land.
func (g *gate) enter(r *Redis, wait *time.Timer) bool {
	for g != nil {
		now := time.Now()
		allowed, late := r.pipelinesAllowed(now)
		g.mu.Lock()
		ok := !g.listening && (g.flying < allowed || r.batchQueued() ||
			g.flying-outLongerThan(r.inflight[:r.opts.Writers], now.UnixNano(), late.Nanoseconds()) < allowed)
		if ok {
			g.listening = true
		}
		flying := g.flying
		g.mu.Unlock()
		if ok {
			return true
		}
		var timeout <-chan time.Time
		if flying > 0 { // to see one grow late; an idle store wakes nobody
			wait.Reset(late)
			timeout = wait.C
		}
		select {
		case <-g.wakeup:
		case <-timeout:
		case <-r.stop:
			wait.Stop()
			return false
		}
		wait.Stop()
	}
	return true
}

// depart says the writer that entered has taken its calls: its pipeline
// is in flight (unless sent is false: it took none) and the next writer
// may enter.
func (g *gate) depart(sent bool) {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.listening = false
	if sent {
		g.flying++
	}
	g.mu.Unlock()
	g.wake()
}

// land says a pipeline's replies are read.
func (g *gate) land() {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.flying--
	g.mu.Unlock()
	g.wake()
}

// wake wakes a writer that waits, if any.
func (g *gate) wake() {
	select {
	case g.wakeup <- struct{}{}:
	default: // the buffer holds a wake-up already
	}
}

// pipelinesAllowed is how many decision pipelines may be in flight at now,
// and after how long one in flight no longer counts. Writers while the
// wire's own delay is most of a round trip (a Redis across a network,
// where more pipelines on the wire shorten each call's wait to be sent),
// down to one as the round trip grows past it, spent on Redis's work, in
// its queue or on this process's cores, which more pipelines would only add
// to (each costs a script call before its items, and this process a write,
// a read and their wake-ups). The round trips of the last second tell the
// two apart: the least of them is about the wire's delay, their mean the
// whole. So ceil(Writers × least / mean), at least one; Writers with no
// round trip measured. A pipeline out for twice the mean (at least
// lateFloor) no longer counts.
//
// Measured on a core shared by Redis and the server, 64 callers (see
// BENCHMARKS.md, "Pipelines in flight as the round trips say").
func (r *Redis) pipelinesAllowed(now time.Time) (allowed int, late time.Duration) {
	least, mean := r.rtt.spread(now)
	return pipelinesFor(r.opts.Writers, least, mean)
}

// pipelinesFor is pipelinesAllowed for writers, given the least and the
// mean round trip (0: none measured).
func pipelinesFor(writers int, least, mean time.Duration) (allowed int, late time.Duration) {
	if mean <= 0 {
		return writers, lateFloor
	}
	n := int((int64(writers)*int64(least) + int64(mean) - 1) / int64(mean))
	return min(max(n, 1), writers), max(2*mean, lateFloor)
}

// lateFloor is the least time after which a pipeline in flight no longer
// holds others back.
const lateFloor = 500 * time.Microsecond

// batchQueued reports whether a whole batch waits for a writer.
func (r *Redis) batchQueued() bool { return len(r.queue) >= r.opts.MaxBatch }
