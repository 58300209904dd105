package global

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// write is one writer: it sends whatever is queued as one pipeline, and
// shows the watchdog what it has on the wire in fl. A decision writer
// takes its first call only once g lets its pipeline on the wire; the
// records writer has none (nil).
func (r *Redis) write(fl *inflight, queue chan *call, linger time.Duration, g *gate) {
	defer r.writers.Done()
	batch := make([]ref, 0, r.opts.MaxBatch)
	take := func(c *call) {
		if !c.abandoned.Load() { // its requester gave up: spare Redis the work
			batch = append(batch, ref{c, c.gen, len(c.keys)})
		}
	}
	wait := time.NewTimer(time.Hour) // the gate's, for this writer
	wait.Stop()
	for {
		batch = batch[:0]
		if !g.enter(r, wait) {
			return
		}
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
			g.depart(false)
			continue
		}
		g.depart(true)
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
		g.land()
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
