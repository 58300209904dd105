package httplimit

import (
	"context"
	"errors"
	"sync"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/retry"
	"github.com/sluicehq/sluice/pkg/rls"
)

// Queue makes the middleware delay a request that is over its limit
// instead of refusing it: a leaky bucket in front of the limit. Requests
// over a limit queue per limit and leave at its rate (one every window /
// limit, in the order they came), each decided again when its turn comes.
// A request that finds Size requests already waiting, or whose turn would
// come after MaxWait, is refused at once, as without a queue.
//
// It suits the bucket algorithms, whose allowance returns request by
// request. Under a window algorithm a queued request is refused again until
// the window turns, and waits turn after turn until then, within MaxWait.
//
// A Queue is configuration: New copies it, and the queue it describes is
// safe for concurrent use.
type Queue struct {
	// Size bounds the requests waiting at once. Required.
	Size int
	// MaxWait bounds how long one request waits in all. Required.
	MaxWait time.Duration
}

type queue struct {
	opts    Queue
	clock   retry.Clock   // tests step it
	waiting chan struct{} // one token per waiting request

	mu   sync.Mutex
	next map[string]time.Time // per limit instance: when its next turn is
}

func newQueue(opts Queue) (*queue, error) {
	if opts.Size <= 0 || opts.MaxWait <= 0 {
		return nil, errors.New("httplimit: Queue needs a positive Size and MaxWait")
	}
	return &queue{opts: opts, clock: retry.SystemClock(), waiting: make(chan struct{}, opts.Size), next: map[string]time.Time{}}, nil
}

// wait queues req, refused with resp, for its turns until the limiter
// admits it, MaxWait is reached or ctx ends, and returns the last answer.
func (q *queue) wait(ctx context.Context, l Limiter, req *rlsv3.RateLimitRequest, resp *rlsv3.RateLimitResponse) (*rlsv3.RateLimitResponse, error) {
	select {
	case q.waiting <- struct{}{}:
	default:
		return resp, nil // the queue is full
	}
	defer func() { <-q.waiting }()
	deadline := q.clock.Now().Add(q.opts.MaxWait)
	for resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
		turn, slots, ok := q.reserve(req, resp, deadline)
		if !ok {
			return resp, nil
		}
		if err := q.clock.Sleep(ctx, turn.Sub(q.clock.Now())); err != nil {
			q.release(turn, slots) // the client went away: its turn is free
			return nil, err
		}
		var err error
		if resp, err = l.ShouldRateLimit(ctx, req); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

// slot is one limit instance a queued request waits on, and its rate.
type slot struct {
	key      string
	interval time.Duration
}

// reserve gives req its next turn at every limit that refused it (the
// latest of them), or reports false, reserving nothing, when that turn is
// past deadline or a limit does not say its rate.
func (q *queue) reserve(req *rlsv3.RateLimitRequest, resp *rlsv3.RateLimitResponse, deadline time.Time) (time.Time, []slot, bool) {
	var slots []slot
	for i, st := range resp.GetStatuses() {
		if st.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			continue
		}
		interval, ok := interval(st.GetCurrentLimit())
		if !ok || i >= len(req.GetDescriptors()) {
			return time.Time{}, nil, false
		}
		slots = append(slots, slot{limitKey(req.GetDomain(), st.GetCurrentLimit().GetName(), req.GetDescriptors()[i].GetEntries()), interval})
	}
	if len(slots) == 0 {
		return time.Time{}, nil, false
	}
	now := q.clock.Now()
	q.mu.Lock()
	defer q.mu.Unlock()
	turn := now
	for _, s := range slots {
		t := q.next[s.key]
		if t.Before(now) {
			t = now
		}
		turn = maxTime(turn, t.Add(s.interval))
	}
	if turn.After(deadline) {
		return time.Time{}, nil, false
	}
	if len(q.next) > 2*q.opts.Size {
		// Forget limits whose turns are all past, now and then: the map
		// follows the limits with requests waiting.
		for k, t := range q.next {
			if t.Before(now) {
				delete(q.next, k)
			}
		}
	}
	for _, s := range slots {
		q.next[s.key] = maxTime(q.next[s.key], turn)
	}
	return turn, slots, true
}

// release frees the turn a request reserved and will not take, where no
// later request has queued behind it.
func (q *queue) release(turn time.Time, slots []slot) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, s := range slots {
		if q.next[s.key].Equal(turn) {
			q.next[s.key] = turn.Add(-s.interval)
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// interval is the time between two requests at limit's rate.
func interval(limit *rlsv3.RateLimitResponse_RateLimit) (time.Duration, bool) {
	window, ok := rls.CurrentLimitWindow(limit)
	if !ok || limit.GetRequestsPerUnit() == 0 {
		return 0, false
	}
	return window / time.Duration(limit.GetRequestsPerUnit()), true
}

// limitKey names one limit instance: the limit and the descriptor's
// entries, as the store names them, so that no values can make two
// collide.
func limitKey(domain, limit string, entries []*ratelimitv3.RateLimitDescriptor_Entry) string {
	var buf [256]byte
	name := limiter.NewKeyName(buf[:]).Add(domain).Add(limit)
	for _, e := range entries {
		name = name.Add(e.GetKey()).Add(e.GetValue())
	}
	return string(name.AppendKey(nil, ""))
}
