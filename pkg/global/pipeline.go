package global

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// write is one writer: it sends whatever is queued as one pipeline, and
// shows the watchdog what it has on the wire in fl.
func (r *Redis) write(fl *inflight, queue chan *call, linger time.Duration) {
	defer r.writers.Done()
	batch := make([]ref, 0, r.opts.MaxBatch)
	take := func(c *call) {
		if !c.abandoned.Load() { // its requester gave up: spare Redis the work
			batch = append(batch, ref{c, c.gen, len(c.keys)})
		}
	}
	for {
		batch = batch[:0]
		select {
		case <-r.stop:
			return
		case c := <-queue:
			take(c)
		}
		if linger > 0 && !r.linger(queue, linger, take, &batch) {
			return
		}
		r.gather(len(batch))
	drain:
		for len(batch) < r.opts.MaxBatch {
			select {
			case c := <-queue:
				take(c)
			default:
				break drain
			}
		}
		if len(batch) == 0 {
			continue
		}
		// Fused before the watchdog can see them: from then on a call may
		// be answered, and reused, under the writer.
		groups := r.fuse(batch)
		fl.mu.Lock()
		fl.sentAt, fl.calls = time.Now().UnixNano(), batch
		fl.mu.Unlock()
		r.exec(groups)
		fl.mu.Lock()
		fl.sentAt, fl.calls = 0, nil
		fl.mu.Unlock()
	}
}

// linger takes the calls that come within d, up to a full batch: the
// records writer's wait (RedisOptions.RecordLinger). False when the store
// is closing, the calls held answered with the error.
func (r *Redis) linger(queue chan *call, d time.Duration, take func(*call), batch *[]ref) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for len(*batch) < r.opts.MaxBatch {
		select {
		case c := <-queue:
			take(c)
		case <-timer.C:
			return true
		case <-r.stop:
			for _, c := range *batch {
				c.c.answer(c.gen, nil, errClosed)
			}
			return false
		}
	}
	return true
}

// gather lets the requests that are ready to run queue their calls before
// a writer sends what it holds: it yields the processor while the queue
// keeps growing, a few times at most. When this process has few cores and
// many requests, a writer woken by the first call would otherwise send
// pipelines of one or two; each yield costs a scheduler round, and the
// larger batches save Redis a script call each (measured: 0.55 calls per
// request without, 0.12–0.14 with, at 64 callers on one core).
func (r *Redis) gather(held int) {
	n := len(r.queue)
	for range 8 {
		runtime.Gosched()
		m := len(r.queue)
		if m == n || held+m >= r.opts.MaxBatch {
			return
		}
		n = m
	}
}

// watch is the watchdog: every Timeout/4 it looks for a pipeline overdue
// past Timeout while Redis has answered nothing for as long, and when two
// ticks in a row find one, fails the calls in flight and queued with
// ErrStalled (their requesters decide without Redis; the writers wait on
// the wire up to the hard timeout). A tick that comes late means this
// process, not Redis, was slow (CPU saturation, a pause): it judges nothing
// then, and replies that arrived meanwhile get their turn first.
func (r *Redis) watch() {
	defer r.writers.Done()
	period := max(time.Millisecond, r.opts.Timeout/4)
	tick := time.NewTicker(period)
	defer tick.Stop()
	suspect := false
	for {
		var at time.Time
		select {
		case <-r.stop:
			return
		case at = <-tick.C:
		}
		now := time.Now()
		if now.Sub(at) > period/2 || !r.overdue(now) {
			suspect = false
			continue
		}
		if !suspect {
			suspect = true // judged on the next tick, if it is on time too
			continue
		}
		r.stall()
	}
}

// stall fails the calls of the pipelines still overdue, and those queued,
// with ErrStalled, unless a reply came in since the watchdog judged.
func (r *Redis) stall() {
	after := r.overdueAfter()
	// One more overdue span, a millisecond at a time, for a reply to land:
	// in a process starved of CPU a reply that has arrived waits for the
	// writer reading it to be scheduled, behind every goroutine that can
	// run, while the watchdog's timer comes first; on its second tick it
	// can find a healthy Redis overdue (29 of 800 calls failed so in
	// TestSlowProcessIsNotStalled under the race detector and two busy
	// loops, one run in four). A Redis that stopped answering is failed
	// that much later.
	now := time.Now().UnixNano()
	for deadline := now + after; now-r.lastReply.Load() > after && now <= deadline; now = time.Now().UnixNano() {
		time.Sleep(time.Millisecond)
	}
	if now-r.lastReply.Load() <= after {
		return
	}
	for i := range r.inflight {
		fl := &r.inflight[i]
		fl.mu.Lock()
		if fl.sentAt != 0 && now-fl.sentAt > after {
			for _, c := range fl.calls {
				c.c.answer(c.gen, nil, ErrStalled)
			}
		}
		fl.mu.Unlock()
	}
	r.failQueued(ErrStalled)
}

// overdue reports whether a pipeline has been on the wire longer than
// overdueAfter while Redis answered nothing for as long.
func (r *Redis) overdue(now time.Time) bool {
	timeout := r.overdueAfter()
	if now.UnixNano()-r.lastReply.Load() <= timeout {
		return false
	}
	for i := range r.inflight {
		fl := &r.inflight[i]
		fl.mu.Lock()
		late := fl.sentAt != 0 && now.UnixNano()-fl.sentAt > timeout
		fl.mu.Unlock()
		if late {
			return true
		}
	}
	return false
}

// fused is one script call of a pipeline: the decide calls of a batch
// that share a slot (all of them on a single node, up to maxFusedItems
// items) as one call, or one other call as it is.
type fused struct {
	script  *redis.Script
	decide  bool
	calls   []ref
	keys    []string
	blob    []byte   // a decide call's packed requests
	holders []string // and their holders, in the same order
	args    []any
}

// maxFusedItems bounds the items one fused decide call carries (a
// request's at most maxItems), so that no script call holds Redis for long
// however many requests a batch coalesces: at the Lua decide's 5–10 µs per
// item, a few milliseconds.
const maxFusedItems = 512

// fuse groups batch into script calls: per slot, up to maxFusedItems items
// each.
func (r *Redis) fuse(batch []ref) []*fused {
	var out []*fused
	bySlot := map[uint16]*fused{}
	for _, rc := range batch {
		c := rc.c
		if c.script != r.decide {
			// Copies: the watchdog may answer c, and its requester reuse it,
			// while this pipeline is still on the wire.
			out = append(out, &fused{script: c.script, calls: []ref{rc}, keys: slices.Clone(c.keys), args: slices.Clone(c.args)})
			continue
		}
		var s uint16
		if r.opts.Cluster {
			s = slot(c.keys[0]) // a decide call's keys share one slot
		}
		f := bySlot[s]
		if f == nil || len(f.keys)+len(c.keys) > maxFusedItems {
			f = &fused{script: r.decide, decide: true}
			bySlot[s] = f
			out = append(out, f)
		}
		f.calls = append(f.calls, rc)
		f.keys = append(f.keys, c.keys...)
		f.blob = append(f.blob, c.blob...)
		f.holders = append(f.holders, c.holders...)
	}
	for _, f := range out {
		if f.decide {
			f.args = make([]any, 0, 1+len(f.holders))
			f.args = append(f.args, f.blob)
			for _, h := range f.holders {
				f.args = append(f.args, h)
			}
		}
	}
	return out
}

// exec sends groups (a batch fused, see fuse) as one pipeline of FCALL
// (the decide calls, unless functions are off) and EVALSHA, and those that
// found the function or the script missing again as EVAL, and answers
// every call.
func (r *Redis) exec(groups []*fused) {
	sent := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), r.hardTimeout())
	defer cancel()
	cmds := make([]*redis.Cmd, len(groups))
	pipe := r.client.Pipeline()
	called := !r.fn.off.Load() // the decide calls call the function
	for i, f := range groups {
		if f.decide && called {
			cmds[i] = pipe.FCall(ctx, r.fn.name, f.keys, f.args...)
		} else {
			cmds[i] = f.script.EvalSha(ctx, pipe, f.keys, f.args...)
		}
	}
	_, _ = pipe.Exec(ctx) // errors are read per command below
	var retry []int
	missing := false
	for i, cmd := range cmds {
		r.noteReply(sent, cmd.Err())
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") || groups[i].decide && called && functionMissing(cmd.Err()) {
			missing = missing || !redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT")
			retry = append(retry, i)
			continue
		}
		groups[i].answer(cmd)
	}
	if len(retry) == 0 {
		return
	}
	if missing {
		// For the calls after these, off the writer's path: a library
		// compiles for milliseconds, and these calls are answered by EVAL
		// now.
		go r.fn.load(r.client)
	}
	// A round trip of its own, with its own hard timeout: in a process
	// slow to read the first round's replies, the first's deadline can be
	// all but spent (a first round of 0.2-1.0 s on a fresh Redis, in
	// TestSlowProcessIsNotStalled under load, left the retry to fail as
	// stalled with Redis answering).
	retryCtx, cancelRetry := context.WithTimeout(context.Background(), r.hardTimeout())
	defer cancelRetry()
	sent = time.Now()
	pipe = r.client.Pipeline()
	for _, i := range retry {
		cmds[i] = groups[i].script.Eval(retryCtx, pipe, groups[i].keys, groups[i].args...)
	}
	_, _ = pipe.Exec(retryCtx)
	for _, i := range retry {
		r.noteReply(sent, cmds[i].Err())
		groups[i].answer(cmds[i])
	}
}

// noteReply records that Redis answered a pipeline sent at sent, when err
// (a command's) says it did: no error, or an error of Redis's own.
func (r *Redis) noteReply(sent time.Time, err error) {
	var rerr redis.Error
	if err == nil || errors.As(err, &rerr) {
		now := time.Now()
		r.lastReply.Store(now.UnixNano())
		r.rtt.add(now, now.Sub(sent))
	}
}

// overdueAfter is how long a pipeline may wait for its reply, in ns, before
// it is overdue: Timeout, or twice the slowest round trip of the last
// second when that is longer, within half the hard timeout.
func (r *Redis) overdueAfter() int64 {
	return min(max(r.opts.Timeout, 2*r.rtt.max(time.Now())), r.hardTimeout()/2).Nanoseconds()
}

// rttSlice is how long one slot of rttWindow covers.
const rttSlice = 250 * time.Millisecond

// rttWindow is the slowest round trip Redis took in each of the last four
// slices of time: what "slow" has lately meant for it. Round trips on a
// busy machine are heavy-tailed (Redis waits its turn for a core with the
// rest), so a maximum, not a mean and deviation, tells a Redis that is
// still answering from one that has stopped. It is safe for concurrent
// use.
type rttWindow struct {
	mu    sync.Mutex
	slots [4]struct {
		at   int64 // the slice's number: UnixNano / rttSlice
		slow time.Duration
	}
}

func (w *rttWindow) add(now time.Time, rtt time.Duration) {
	n := now.UnixNano() / int64(rttSlice)
	w.mu.Lock()
	defer w.mu.Unlock()
	s := &w.slots[n%int64(len(w.slots))]
	if s.at != n {
		s.at, s.slow = n, 0
	}
	s.slow = max(s.slow, rtt)
}

// max is the slowest round trip within the last second.
func (w *rttWindow) max(now time.Time) time.Duration {
	n := now.UnixNano() / int64(rttSlice)
	w.mu.Lock()
	defer w.mu.Unlock()
	var slow time.Duration
	for _, s := range w.slots {
		if n-s.at < int64(len(w.slots)) {
			slow = max(slow, s.slow)
		}
	}
	return slow
}

// answer hands each call of f its part of cmd's reply: a decide call's is
// now and replyValues values per item (unpackReply), a refund's nothing.
func (f *fused) answer(cmd *redis.Cmd) {
	err := cmd.Err()
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = ErrStalled // the hard timeout, not a caller's deadline
		} else {
			err = fmt.Errorf("redis store: %w", err)
		}
		for _, c := range f.calls {
			c.c.answer(c.gen, nil, err)
		}
		return
	}
	if !f.decide {
		for _, c := range f.calls {
			c.c.answer(c.gen, nil, nil)
		}
		return
	}
	s, _ := cmd.Val().(string)
	size := 0
	for _, c := range f.calls {
		size += replySize(c.n)
	}
	if size != len(s) {
		err := fmt.Errorf("redis store: decide replied %d bytes for %d requests (%d expected)", len(s), len(f.calls), size)
		for _, c := range f.calls {
			c.c.answer(c.gen, nil, err)
		}
		return
	}
	var vals [1 + replyValues*maxItems]int64
	for _, c := range f.calls {
		v, _ := unpackReply(vals[:0], s, c.n) // the sizes were checked
		c.c.answer(c.gen, v, nil)
		s = s[replySize(c.n):]
	}
}
