package global

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice/pkg/algorithm"
)

// decideAcrossSlots decides a request whose keys span Cluster slots: per
// slot, then refunds the slots that took if another slot rejected.
func (r *Redis) decideAcrossSlots(ctx context.Context, items []Item, out []Result, now int64, deadline time.Time) error {
	groups := make(map[uint16][]int)
	var order []uint16
	for i := range items {
		s := slot(items[i].Key)
		if _, ok := groups[s]; !ok {
			order = append(order, s)
		}
		groups[s] = append(groups[s], i)
	}
	type taken struct {
		idx []int
		sub []Item
		res []Result
		now int64
		err error
	}
	parts := make([]taken, len(order))
	var wg sync.WaitGroup
	for g, s := range order {
		p := &parts[g]
		p.idx = groups[s]
		for _, i := range p.idx {
			p.sub = append(p.sub, items[i])
		}
		p.res = make([]Result, len(p.sub))
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.now, p.err = r.decideGroup(ctx, p.sub, p.res, now, deadline)
		}()
	}
	wg.Wait()
	vetoed := false
	var firstErr error
	for g := range parts {
		p := &parts[g]
		if p.err != nil {
			firstErr = p.err
			continue
		}
		for j, i := range p.idx {
			out[i] = p.res[j]
			if !out[i].Allowed && !items[i].Shadow && items[i].Mode == algorithm.Take {
				vetoed = true
			}
		}
	}
	if !vetoed && firstErr == nil {
		return nil
	}
	// Give back what the slots that admitted took.
	for g := range parts {
		p := &parts[g]
		if p.err != nil || groupVetoed(p.sub, p.res) {
			continue
		}
		if err := r.refundGroup(ctx, p.sub, p.res, p.now, deadline); err != nil && firstErr == nil {
			firstErr = err
		}
		for j, i := range p.idx {
			if out[i].Allowed && p.sub[j].Mode == algorithm.Take {
				out[i].Remaining = min(out[i].Remaining+p.sub[j].Cost, max(p.sub[j].Params.Limit, p.sub[j].Params.Burst))
			}
		}
	}
	return firstErr
}

func groupVetoed(items []Item, res []Result) bool {
	for i := range items {
		if !res[i].Allowed && !items[i].Shadow && items[i].Mode == algorithm.Take {
			return true
		}
	}
	return false
}

// refundGroup gives back the cost of the items of one slot that took it:
// the admitted Take items (a denied shadow item took nothing, and Force
// items record hits already served, which stay recorded).
func (r *Redis) refundGroup(ctx context.Context, items []Item, res []Result, now int64, deadline time.Time) error {
	c := r.calls.Get().(*call)
	c.prepare()
	c.script = r.refund
	c.keys = c.keys[:0]
	c.args = append(c.args[:0], now)
	for i, it := range items {
		if !res[i].Allowed || it.Mode != algorithm.Take || it.Cost == 0 {
			continue
		}
		var holder string
		if carriesHolder(&it) {
			holder = it.Params.Holder
		}
		c.keys = append(c.keys, it.Key)
		c.args = append(c.args, int(it.Params.Kind), it.Params.Limit, it.Params.Window, it.Cost, it.Params.Origin, holder)
	}
	if len(c.keys) == 0 {
		r.calls.Put(c)
		return nil
	}
	if err := r.run(ctx, c, r.queue, deadline); err != nil {
		return err
	}
	err := c.err
	r.calls.Put(c)
	return err
}
