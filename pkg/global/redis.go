package global

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/pkg/algorithm"
)

// Scripter is what the Redis store needs of a client. *redis.Client
// (single node, or Sentinel through redis.NewFailoverClient) and
// *redis.ClusterClient satisfy it.
//
// The store calls it from many goroutines at once: an implementation must be
// safe for concurrent use, as go-redis clients are.
type Scripter interface {
	Pipeline() redis.Pipeliner
	ScriptLoad(ctx context.Context, script string) *redis.StringCmd
}

// RedisOptions configure a Redis store.
//
// NewRedis copies them; the Client they name is shared, and must be safe for
// concurrent use (go-redis clients are).
type RedisOptions struct {
	// Client reaches Redis. The store does not close it.
	Client Scripter
	// Cluster says Client is a Redis Cluster, where one request's keys can
	// live in different slots.
	Cluster bool
	// Timeout is how long Redis may leave a reply overdue: when a pipeline
	// has waited longer, and Redis has answered nothing else meanwhile, and
	// this process was keeping time (its watchdog ran on schedule), Redis
	// is taken to have stopped answering and, if no reply lands within one
	// more such span, the calls in flight and queued fail with ErrStalled. Time spent waiting for a writer, or for this
	// process to get to a reply that has arrived, does not count: a
	// saturated process is slow, not a dead store. Where Redis has lately
	// been slower (a saturated machine, where it waits its turn for a
	// core), overdue means slower than it has lately been: twice the
	// slowest round trip of the last second, when that is longer. Default
	// 10ms, under
	// Envoy's default 20ms filter timeout. A pipeline is abandoned on the
	// wire (its connection closed) only after max(1s, 20 × Timeout).
	Timeout time.Duration
	// Writers is the most pipelines of decisions in flight at once, each
	// on its own connection; fewer while the round trips say that the time
	// is spent in Redis's work, not on the wire (pipelinesAllowed). Default
	// 4.
	Writers int
	// MaxBatch bounds the script calls in one pipeline. Default 128.
	MaxBatch int
	// RecordLinger, if positive, sends the calls that only record hits
	// (every item a Force: sidecars' flushes, cached mode's tier) through
	// a writer of their own, which holds the first for up to RecordLinger
	// to take the others that come meanwhile into the same script call:
	// sidecars flush on their own timers, and each flush would otherwise
	// be a Redis round trip of its own. Their answers are on no client's
	// path, and decisions never wait behind them. 0: records go with the
	// decisions. The daemons' default is DefaultRecordLinger.
	RecordLinger time.Duration
	// PackedState stores the algorithms' states packed (a version byte
	// and a little-endian double a field) rather than as text: Redis
	// spends 0.7 µs less a decision formatting them, and less reading
	// them. Every server since it was introduced reads both, and rewrites
	// a state as it is told; a server of an earlier version would misread
	// a packed one, so turn it on once no such server uses the Redis
	// (the daemons' -redis-state-format).
	PackedState bool
	// InjectTime makes the scripts use the `now` given to DecideAt
	// instead of the store's TIME. Tests only: production must use one
	// clock for every server.
	InjectTime bool
	// ScriptsOnly calls the decide script (EVALSHA) and never its
	// function (functions.go): what a Redis without functions gets. Tests
	// hold both to the same answers.
	ScriptsOnly bool
}

// Redis decides on a shared Redis: each request is decided atomically by
// the Lua decide script (per Cluster slot), and concurrent requests are
// coalesced by a small set of writers: a writer takes the first waiting
// call, then every call already queued behind it up to MaxBatch, and sends
// them in one round trip, the requests of one slot as one script call that
// decides them one after the other, each all or nothing, with one TIME and
// one MGET for the lot. On a single node (or Sentinel) that is every
// request of the batch; on a Cluster, where every limit instance has its
// own slot, only requests on the same keys share a call. Under load a round
// trip carries many decisions; with a single caller it carries one, with
// no added wait.
//
// Requests whose limits live in different Cluster slots are decided per
// slot; if one slot's limits reject the request, what the others took is
// refunded by a second script. Between the take and the refund, other
// requests see the taken allowance as used, so they can be rejected a
// little early (never admitted wrongly); a refund lost to a failure leaves
// the allowance used until the window or bucket recovers on its own.
type Redis struct {
	client Scripter
	opts   RedisOptions
	decide *redis.Script
	refund *redis.Script
	// fn is the decide script as a function, called in its place unless
	// off (functions.go).
	fn      *functions
	queue   chan *call
	stop    chan struct{}
	writers sync.WaitGroup
	calls   sync.Pool
	// inflight is each writer's pipeline on the wire, for the watchdog.
	inflight []inflight
	// lastReply is when Redis last answered anything (UnixNano).
	lastReply atomic.Int64
	// rtt is how long pipelines have lately taken, for what counts as
	// overdue.
	rtt rttWindow
	// gate lets the decision writers' pipelines on the wire (gate.go).
	gate *gate
	// records queues the calls that only record hits for their own
	// writer, when they linger (RecordLinger); nil otherwise.
	records chan *call
}

// ErrStalled says Redis stopped answering: a reply overdue past
// RedisOptions.Timeout with nothing else answered meanwhile, or past the
// hard timeout. Its Stalled method says so to callers that do not import
// this package (pkg/limiter's StoreDecider).
var ErrStalled error = stallError{}

type stallError struct{}

func (stallError) Error() string { return "redis store: Redis stopped answering" }
func (stallError) Stalled() bool { return true }

// call is one script call waiting for a writer. A decide call (script
// r.decide) carries one request, packed in blob (appendRequest), and its
// items' holders (appendHolders); the writer fuses the decide calls of a
// batch into one script call per slot.
// Other calls (the refund) carry their arguments in args.
//
// A call is answered once, by its writer or by the watchdog, whichever
// claims it first; state holds its generation (bumped each time the pool
// hands it out) and whether it was answered, so that neither can answer a
// call that has since been reused.
type call struct {
	state     atomic.Uint64 // gen<<1 | answered
	gen       uint64        // the generation it was queued with
	abandoned atomic.Bool   // its requester went away: do not send it
	script    *redis.Script
	keys      []string
	blob      []byte
	holders   []string
	args      []any
	reply     []int64 // its own buffer: answer copies into it
	err       error
	done      chan struct{}
}

// prepare starts a new generation of c, before it is queued.
func (c *call) prepare() {
	c.gen = c.state.Load()>>1 + 1
	c.state.Store(c.gen << 1)
	c.abandoned.Store(false)
	c.reply, c.err = c.reply[:0], nil
}

// expire answers the call of generation gen with errExpired, if nobody
// has: its deadline passed first (run). It marks the call abandoned, so a
// writer that has not sent it skips it.
func (c *call) expire(gen uint64) {
	if c.state.CompareAndSwap(gen<<1, gen<<1|1) {
		c.abandoned.Store(true)
		c.err = errExpired
		c.done <- struct{}{}
	}
}

// answer gives the call of generation gen its reply, if nobody has.
func (c *call) answer(gen uint64, reply []int64, err error) {
	if c.state.CompareAndSwap(gen<<1, gen<<1|1) {
		c.reply, c.err = append(c.reply[:0], reply...), err
		c.done <- struct{}{}
	}
}

// ref is a call as a writer or the watchdog holds it: with its generation
// and, for a decide call, its number of items, read when the writer took it
// (once in flight, the call may be answered by the watchdog and reused).
type ref struct {
	c   *call
	gen uint64
	n   int
}

// inflight is one writer's pipeline on the wire.
type inflight struct {
	mu     sync.Mutex
	sentAt int64 // UnixNano; 0 when none
	calls  []ref
}

// DefaultTimeout is how long Redis may leave a reply overdue, answering
// nothing else, before the store takes it as not answering
// (RedisOptions.Timeout, the daemons' -store-timeout); DefaultWriters the
// pipelines in flight (-redis-pipelines).
const (
	DefaultTimeout = 10 * time.Millisecond
	DefaultWriters = 4
)

// DefaultRecordLinger is the daemons' RecordLinger (-redis-record-linger):
// the sidecars' flushes fall on the same ticks and go to the same server
// (pkg/localtier, cmd/localfilter), so 2 ms puts a fleet's records of a
// tick in one Redis call (three async sidecars at 1.5× a limit: 0.034
// round trips a request on one server and on three, against 0.100). The
// answers come later: a flooded sliding log, the algorithm most sensitive
// to that, admits 1.021-1.026 of an exact limiter, against 1.016-1.019
// with none (BENCHMARKS.md).
const DefaultRecordLinger = 2 * time.Millisecond

// NewRedis returns a store on opts.Client and starts its writers; Close
// stops them.
func NewRedis(opts RedisOptions) (*Redis, error) {
	if opts.Client == nil {
		return nil, errors.New("redis store: no client")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Writers <= 0 {
		opts.Writers = DefaultWriters
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 128
	}
	r := &Redis{
		client:   opts.Client,
		opts:     opts,
		decide:   redis.NewScript(decideSource()),
		refund:   redis.NewScript(refundSource()),
		fn:       newFunctions(),
		queue:    make(chan *call, opts.Writers*opts.MaxBatch),
		stop:     make(chan struct{}),
		inflight: make([]inflight, opts.Writers, opts.Writers+1),
		gate:     newGate(opts.Writers),
	}
	if opts.ScriptsOnly {
		r.fn.off.Store(true)
	}
	if opts.RecordLinger > 0 {
		r.records = make(chan *call, opts.MaxBatch)
		r.inflight = r.inflight[:opts.Writers+1]
	}
	r.calls.New = func() any { return &call{done: make(chan struct{}, 1)} }
	for i := range opts.Writers {
		r.writers.Add(1)
		go r.write(&r.inflight[i], r.queue, 0, r.gate)
	}
	if r.records != nil {
		r.writers.Add(1)
		go r.write(&r.inflight[opts.Writers], r.records, opts.RecordLinger, nil)
	}
	r.writers.Add(1)
	go r.watch()
	return r, nil
}

// hardTimeout bounds a pipeline on the wire: past it, go-redis closes the
// connection.
func (r *Redis) hardTimeout() time.Duration { return max(time.Second, 20*r.opts.Timeout) }

// Close stops the writers after the pipelines in flight; calls still
// queued fail.
func (r *Redis) Close() error {
	close(r.stop)
	r.writers.Wait()
	r.failQueued(errClosed)
	return nil
}

var errClosed = errors.New("redis store: closed")

// failQueued answers every call still waiting for a writer with err.
func (r *Redis) failQueued(err error) {
	for {
		select {
		case c := <-r.queue:
			c.answer(c.gen, nil, err)
		case c := <-r.records: // never ready when nil
			c.answer(c.gen, nil, err)
		default:
			return
		}
	}
}

// Decide decides items at the store's clock.
func (r *Redis) Decide(ctx context.Context, items []Item, out []Result) error {
	return r.DecideAt(ctx, items, out, 0)
}

// DecideAt decides items, all or nothing; now is used only with
// RedisOptions.InjectTime.
func (r *Redis) DecideAt(ctx context.Context, items []Item, out []Result, now int64) error {
	return r.decideBy(ctx, items, out, now, time.Time{})
}

// decideBy is DecideAt, waiting for Redis until deadline unless it is zero.
func (r *Redis) decideBy(ctx context.Context, items []Item, out []Result, now int64, deadline time.Time) error {
	if err := validate(items); err != nil {
		return err
	}
	if len(out) < len(items) {
		return fmt.Errorf("redis store: %d results for %d items", len(out), len(items))
	}
	if len(items) == 0 {
		return nil
	}
	if !r.opts.Cluster || sameSlot(items) {
		_, err := r.decideGroup(ctx, items, out, now, deadline)
		return err
	}
	return r.decideAcrossSlots(ctx, items, out, now, deadline)
}

func sameSlot(items []Item) bool {
	s := slot(items[0].Key)
	for i := 1; i < len(items); i++ {
		if slot(items[i].Key) != s {
			return false
		}
	}
	return true
}

// decideGroup runs the decide script on items, which share a slot, and
// returns the `now` the script decided at.
func (r *Redis) decideGroup(ctx context.Context, items []Item, out []Result, now int64, deadline time.Time) (int64, error) {
	c := r.decideCall(items, now)
	q := r.queue
	if r.records != nil && records(items) {
		q = r.records
	}
	if err := r.run(ctx, c, q, deadline); err != nil {
		return 0, err
	}
	defer r.calls.Put(c)
	if c.err != nil {
		return 0, c.err
	}
	return readDecide(c.reply, items, out)
}

// decideCall is the call that decides items: one request.
func (r *Redis) decideCall(items []Item, now int64) *call {
	c := r.calls.Get().(*call)
	c.prepare()
	c.script = r.decide
	c.keys = c.keys[:0]
	for i := range items {
		c.keys = append(c.keys, items[i].Key)
	}
	if !r.opts.InjectTime {
		now = -1 // the store's clock
	}
	c.blob = appendRequest(c.blob[:0], items, now, r.opts.PackedState)
	c.holders = appendHolders(c.holders[:0], items)
	return c
}

// readDecide reads a decide call's reply into out and returns its now.
func readDecide(reply []int64, items []Item, out []Result) (int64, error) {
	if len(reply) != 1+replyValues*len(items) {
		return 0, fmt.Errorf("redis store: decide replied %d values for %d items", len(reply), len(items))
	}
	if reply[0] < 0 {
		return 0, errors.New("redis store: the decide script failed on this request (see the Redis log)")
	}
	for i := range items {
		v := reply[1+replyValues*i:]
		out[i] = Result{Allowed: v[0] == 1, Remaining: v[1], ResetAfter: v[3], Left: math.Float64frombits(uint64(v[4]))}
		retry := math.Float64frombits(uint64(v[2]))
		if items[i].Mode == algorithm.GiveBack {
			out[i].Given = retry // a refund's retry slot carries it (lua/common.lua)
		} else {
			out[i].RetryAfter = int64(retry)
		}
	}
	return reply[0], nil
}
