package simulate

import (
	"container/heap"
	"strconv"

	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/config"
)

// Refunds in a replay, as Envoy sends them when a stream ends
// (is_negative_hits): a request's Refund, and every unit a request holds
// of a concurrency limit, go back to its key when it ends (Time +
// Duration), before the requests that arrive at that time or later are
// decided.

// refund is one stream-end refund due at `at`.
type refund struct {
	at, seq int64 // seq: the trace order, so equal times keep it
	key     *keyState
	params  algorithm.Params
	cost    int64
}

// refunds are the refunds due, the earliest first.
type refunds []refund

func (q refunds) Len() int { return len(q) }
func (q refunds) Less(i, j int) bool {
	return q[i].at < q[j].at || q[i].at == q[j].at && q[i].seq < q[j].seq
}
func (q refunds) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *refunds) Push(x any)   { *q = append(*q, x.(refund)) }
func (q *refunds) Pop() any {
	old := *q
	r := old[len(old)-1]
	*q = old[:len(old)-1]
	return r
}

// settle gives back every refund due by now, counting the units in the
// limits' reports.
func (q *refunds) settle(now int64, res *Result) {
	for q.Len() > 0 && (*q)[0].at <= now {
		r := heap.Pop(q).(refund)
		r.key.state, _ = algorithm.Decide(r.key.state, r.params, r.at, r.cost, algorithm.GiveBack)
		res.Limits[r.key.limit].Refunded += r.cost
	}
}

// schedule adds what admitted request req (number seq of the trace, on key
// k, decided with p under rl) gives back when it ends: its units of a
// concurrency limit, else its Refund, at most its cost.
func (q *refunds) schedule(req Request, seq int64, k *keyState, p algorithm.Params, rl config.RateLimit) {
	cost := min(req.Refund, req.cost())
	if rl.Algorithm == algorithm.Concurrency {
		cost = req.cost()
	}
	if cost > 0 {
		heap.Push(q, refund{at: req.Time + req.Duration, seq: seq, key: k, params: p, cost: cost})
	}
}

// holderOf is the holder request seq of a trace takes units of a
// concurrency limit as: itself, as Envoy names a request by its id.
func holderOf(seq int) string { return "r" + strconv.Itoa(seq) }

// holderEntries is entries as a concurrency limit counts them: the
// holder's value (the last entry's) is the request's name, not the
// counter's (config.RateLimit.Holder), so every request counts on one.
func holderEntries(entries []config.Entry) []config.Entry {
	out := append([]config.Entry(nil), entries...)
	out[len(out)-1].Value = ""
	return out
}
