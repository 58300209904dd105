package e2e

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// load is a bounded closed-loop load: callers goroutines, caller i on
// targets[i % len(targets)], each sending its next request when the last
// returns, until duration has passed or total requests were sent (0: no
// count bound), on keys chosen uniformly from 0..keys-1. Every request sent
// is counted with its answer: the end stops new requests only.
type load struct {
	targets  []rlsv3.RateLimitServiceClient
	callers  int
	duration time.Duration
	total    int
	keys     int
	request  func(key int) *rlsv3.RateLimitRequest
	// timeout bounds each call, as Envoy's filter timeout does. Default
	// 10s: long enough that a call failing it is stuck, not slowed by a
	// loaded machine (with 1 s, calls set up while four processes shared
	// two busy cores failed it); a test about latency sets its own.
	timeout time.Duration
	// trace keeps every answer in loadResult.events.
	trace bool
	// base is the time the events' at counts from; zero: when the run
	// starts. A test that times an outage against the events sets it to
	// its own start, so that the two clocks are one (the run's goroutine
	// starts a moment after the test's clock, and an answer that came just
	// after a restart read as during the outage).
	base time.Time
	// rate, if set, paces the callers to this many requests a second in
	// all (each sends on its own schedule, or as soon as its last answer
	// came if that is later): an offered load rather than a closed loop.
	rate float64
}

// event is one answer of a traced load.
type event struct {
	at, latency time.Duration // sent at, from the start of the load
	key         int
	resp        *rlsv3.RateLimitResponse
	err         error
}

// loadResult counts what a load got back.
type loadResult struct {
	sent, ok, over, errs int
	firstErr             error
	okByKey              []int // admitted, per key
	// sentAt holds, per target and key, when each request was sent, as
	// offsets from the start of the load, in order.
	sentAt    [][][]time.Duration
	latencies []time.Duration
	start     time.Time // sentAt's zero
	elapsed   time.Duration
	events    []event // with trace, in the order sent
}

func (l load) run(ctx context.Context) loadResult {
	if l.timeout == 0 {
		l.timeout = 10 * time.Second
	}
	if l.keys == 0 {
		l.keys = 1
	}
	end := time.Now().Add(l.duration)
	var sent atomic.Int64
	results := make([]loadResult, l.callers)
	start := l.base
	if start.IsZero() {
		start = time.Now()
	}
	var wg sync.WaitGroup
	for c := range l.callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &results[c]
			r.okByKey = make([]int, l.keys)
			target := c % len(l.targets)
			r.sentAt = make([][][]time.Duration, len(l.targets))
			r.sentAt[target] = make([][]time.Duration, l.keys)
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			// The end stops new requests; those in flight run to their
			// answer, which the server may already have counted.
			for k := 0; ctx.Err() == nil && time.Now().Before(end); k++ {
				if l.total > 0 && sent.Add(1) > int64(l.total) {
					return
				}
				if l.rate > 0 {
					at := start.Add(time.Duration(float64(c+k*l.callers) / l.rate * float64(time.Second)))
					time.Sleep(time.Until(at))
				}
				key := rng.IntN(l.keys)
				// Not ctx's child: ending the load stops new requests, not
				// the ones in flight.
				cctx, ccancel := context.WithTimeout(context.Background(), l.timeout)
				t0 := time.Now()
				resp, err := l.targets[target].ShouldRateLimit(cctx, l.request(key))
				lat := time.Since(t0)
				ccancel()
				r.sent++
				r.sentAt[target][key] = append(r.sentAt[target][key], t0.Sub(start))
				r.latencies = append(r.latencies, lat)
				if l.trace {
					r.events = append(r.events, event{at: t0.Sub(start), latency: lat, key: key, resp: resp, err: err})
				}
				switch {
				case err != nil:
					r.errs++
					if r.firstErr == nil {
						r.firstErr = err
					}
				case resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT:
					r.over++
				default:
					r.ok++
					r.okByKey[key]++
				}
			}
		}()
	}
	wg.Wait()
	out := loadResult{start: start, elapsed: time.Since(start), okByKey: make([]int, l.keys), sentAt: make([][][]time.Duration, len(l.targets))}
	for i := range out.sentAt {
		out.sentAt[i] = make([][]time.Duration, l.keys)
	}
	for _, r := range results {
		out.sent += r.sent
		out.ok += r.ok
		out.over += r.over
		out.errs += r.errs
		if out.firstErr == nil {
			out.firstErr = r.firstErr
		}
		out.latencies = append(out.latencies, r.latencies...)
		out.events = append(out.events, r.events...)
		for k, n := range r.okByKey {
			out.okByKey[k] += n
		}
		for i, byKey := range r.sentAt {
			for k, at := range byKey {
				out.sentAt[i][k] = append(out.sentAt[i][k], at...)
			}
		}
	}
	slices.Sort(out.latencies)
	slices.SortFunc(out.events, func(a, b event) int { return int(a.at - b.at) })
	for _, byKey := range out.sentAt {
		for _, at := range byKey {
			slices.Sort(at)
		}
	}
	return out
}

// mostWithin returns the most requests sent to target for key within any
// span of length d.
func (r loadResult) mostWithin(target, key int, d time.Duration) int {
	at := r.sentAt[target][key]
	most, first := 0, 0
	for last := range at {
		for at[last]-at[first] > d {
			first++
		}
		most = max(most, last-first+1)
	}
	return most
}

// quantile returns the q-quantile of the load's latencies.
func (r loadResult) quantile(q float64) time.Duration { return quantile(r.latencies, q) }

// quantile returns the q-quantile of sorted.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// descriptors builds a request for domain with one descriptor per
// key=value pair, as Envoy's rate-limit actions produce them.
func descriptors(domain string, kv ...string) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: domain}
	for i := 0; i+1 < len(kv); i += 2 {
		req.Descriptors = append(req.Descriptors, &ratelimitv3.RateLimitDescriptor{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: kv[i], Value: kv[i+1]}},
		})
	}
	return req
}

// start runs l in the background until the returned stop is called, and
// stop returns what it got.
func (l load) start() (stop func() loadResult) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan loadResult, 1)
	go func() { done <- l.run(ctx) }()
	return func() loadResult {
		cancel()
		return <-done
	}
}
