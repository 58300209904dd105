package global

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// write is one writer: it sends whatever is queued as one pipeline.
func (r *Redis) write() {
	defer r.writers.Done()
	batch := make([]*call, 0, r.opts.MaxBatch)
	for {
		select {
		case <-r.stop:
			return
		case c := <-r.queue:
			batch = append(batch[:0], c)
		}
	drain:
		for len(batch) < r.opts.MaxBatch {
			select {
			case c := <-r.queue:
				batch = append(batch, c)
			default:
				break drain
			}
		}
		r.exec(batch)
		for _, c := range batch {
			c.done <- struct{}{}
		}
	}
}

// fused is one script call of a pipeline: the decide calls of a batch
// that share a slot (all of them on a single node) as one call, or one
// other call as it is.
type fused struct {
	script *redis.Script
	decide bool
	calls  []*call
	keys   []string
	args   []any
}

// maxFusedItems bounds the items one fused decide call carries (a
// request's at most maxItems), so that no script call holds Redis for long
// however many requests a batch coalesces: at the Lua decide's 5–10 µs per
// item, a few milliseconds.
const maxFusedItems = 512

// fuse groups batch into script calls: per slot, up to maxFusedItems items
// each.
func (r *Redis) fuse(batch []*call) []*fused {
	var out []*fused
	bySlot := map[uint16]*fused{}
	for _, c := range batch {
		if c.script != r.decide {
			out = append(out, &fused{script: c.script, calls: []*call{c}, keys: c.keys, args: c.args})
			continue
		}
		var s uint16
		if r.opts.Cluster {
			s = slot(c.keys[0]) // a decide call's keys share one slot
		}
		f := bySlot[s]
		if f == nil || len(f.keys)+len(c.keys) > maxFusedItems {
			f = &fused{script: r.decide, decide: true, args: []any{0}}
			bySlot[s] = f
			out = append(out, f)
		}
		f.calls = append(f.calls, c)
		f.keys = append(f.keys, c.keys...)
		f.args = append(f.args, c.args...)
	}
	for _, f := range out {
		if f.decide {
			f.args[0] = len(f.calls)
		}
	}
	return out
}

// exec sends batch as one pipeline of EVALSHA (decide calls fused, see
// fuse), and those that found the script cache empty (NOSCRIPT) again as
// EVAL.
func (r *Redis) exec(batch []*call) {
	ctx, cancel := context.WithTimeout(context.Background(), r.opts.Timeout)
	defer cancel()
	groups := r.fuse(batch)
	cmds := make([]*redis.Cmd, len(groups))
	pipe := r.client.Pipeline()
	for i, f := range groups {
		cmds[i] = f.script.EvalSha(ctx, pipe, f.keys, f.args...)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command below
	var retry []int
	for i, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			retry = append(retry, i)
			continue
		}
		groups[i].answer(decodeInts(cmd))
	}
	if len(retry) == 0 {
		return
	}
	pipe = r.client.Pipeline()
	for _, i := range retry {
		cmds[i] = groups[i].script.Eval(ctx, pipe, groups[i].keys, groups[i].args...)
	}
	_, _ = pipe.Exec(ctx)
	for _, i := range retry {
		groups[i].answer(decodeInts(cmds[i]))
	}
}

// answer hands each call of f its part of the reply: a decide call's is
// now and four values per item.
func (f *fused) answer(reply []int64, err error) {
	if err == nil && f.decide {
		pos := 0
		for _, c := range f.calls {
			n := 1 + 4*len(c.keys)
			if pos+n > len(reply) {
				break
			}
			c.reply = reply[pos : pos+n : pos+n]
			pos += n
		}
		if pos == len(reply) {
			return
		}
		err = fmt.Errorf("redis store: decide replied %d values for %d requests", len(reply), len(f.calls))
		reply = nil
	}
	for _, c := range f.calls {
		c.reply, c.err = reply, err
	}
}

// decodeInts checks that a script replied with an array of integers.
func decodeInts(cmd *redis.Cmd) ([]int64, error) {
	if err := cmd.Err(); err != nil {
		return nil, fmt.Errorf("redis store: %w", err)
	}
	vals, ok := cmd.Val().([]any)
	if !ok {
		return nil, fmt.Errorf("redis store: script replied %T, want an array", cmd.Val())
	}
	out := make([]int64, len(vals))
	for i, v := range vals {
		n, ok := v.(int64)
		if !ok {
			return nil, fmt.Errorf("redis store: script reply %d is %T, want an integer", i, v)
		}
		out[i] = n
	}
	return out, nil
}
