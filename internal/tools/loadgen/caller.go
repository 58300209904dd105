package loadgen

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// caller sends one request at a time and records into its own stats, so no
// lock or shared counter is touched per request.
//
// Each caller has its own base context under the run's: the contexts gRPC
// derives per call register with it, so callers do not contend on the run
// context's lock.
type caller struct {
	conn     *grpc.ClientConn
	keys     *KeyChooser
	reqs     *requestSet
	timeout  time.Duration
	parent   context.Context // the run's
	base     context.Context // the caller's, cancelled by cancel or the watchdog
	cancel   context.CancelFunc
	rctx     requestContext
	watchdog *time.Timer // with a timeout: cancels base when a request overruns
	timer    *time.Timer // open loop: waits for the next scheduled send
	resp     rlsv3.RateLimitResponse
	stats    callerStats
}

func isDone(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

func (c *caller) closedLoop(p *phase) {
	for {
		if p.limit > 0 && p.next.Add(1) > p.limit {
			return
		}
		if isDone(p.done) {
			return
		}
		req := c.reqs.get(c.keys.Next())
		start := time.Now()
		if !start.Before(p.deadline) {
			return
		}
		timedOut, err := c.call(req)
		c.stats.record(time.Since(start), c.resp.GetOverallCode(), err, timedOut)
	}
}

// openLoop takes the next slot i of the shared schedule (sent at
// start + i·interval), waits for it, sends, and records latency from the
// slot's intended time: when the server stalls, the slots that fall due
// meanwhile are sent late, and their wait counts as latency, as it would for
// clients arriving at that rate (coordinated omission corrected). It also
// records the service time from the actual send. Slots still unsent at the
// deadline are dropped (counted as Result.Unsent).
func (c *caller) openLoop(p *phase) {
	for {
		i := p.next.Add(1) - 1
		if p.limit > 0 && i >= p.limit {
			return
		}
		intended := p.start.Add(time.Duration(float64(i) * p.interval))
		if !intended.Before(p.deadline) {
			return
		}
		if wait := time.Until(intended); wait > 0 {
			c.timer.Reset(wait)
			select {
			case <-c.timer.C:
			case <-p.done:
				c.timer.Stop()
				return
			}
		}
		req := c.reqs.get(c.keys.Next())
		sent := time.Now()
		if !sent.Before(p.deadline) || isDone(p.done) {
			return
		}
		timedOut, err := c.call(req)
		end := time.Now()
		c.stats.record(end.Sub(intended), c.resp.GetOverallCode(), err, timedOut)
		c.stats.service.Record(end.Sub(sent))
	}
}

// call sends req and waits for the answer. Without a timeout it runs under
// the caller's base context. With one, the request context carries the
// deadline (so gRPC sends grpc-timeout, as Envoy does) and the caller's
// watchdog enforces it by cancelling the base context: the hot path then
// costs a timer reset and stop, not a context and a timer per request. A
// watchdog that fired has cancelled its base, so both are replaced (the only
// allocations, and only on a timeout).
func (c *caller) call(req *rlsv3.RateLimitRequest) (timedOut bool, err error) {
	if c.timeout <= 0 {
		return false, c.conn.Invoke(c.base, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, req, &c.resp)
	}
	c.rctx.deadline.Store(time.Now().Add(c.timeout).UnixNano())
	c.watchdog.Reset(c.timeout)
	// Invoke into the caller's own response (rather than the generated
	// client, which allocates one per call); proto unmarshal resets it.
	err = c.conn.Invoke(&c.rctx, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, req, &c.resp)
	if !c.watchdog.Stop() {
		c.renew()
		return err != nil, err
	}
	return false, err
}

// renew gives the caller a fresh base context under the run's, with its own
// watchdog. The old watchdog's function only ever cancels the old base, so a
// late firing cannot touch the new one.
func (c *caller) renew() {
	if c.cancel != nil {
		c.cancel()
	}
	base, cancel := context.WithCancel(c.parent)
	c.base, c.cancel = base, cancel
	c.rctx.Context = base
	if c.timeout > 0 {
		c.watchdog = time.AfterFunc(time.Hour, cancel)
		c.watchdog.Stop()
	}
}

// requestContext is a caller's reusable per-request context: its base's
// Done, Err and Value, with the request's deadline. Because Value finds the
// base's cancelCtx, the context gRPC derives per call registers with the
// base (one per caller) and starts no goroutine. The deadline is atomic
// because gRPC may still read an old call's context while the next request
// sets it.
type requestContext struct {
	context.Context
	deadline atomic.Int64 // UnixNano
}

func (r *requestContext) Deadline() (time.Time, bool) {
	return time.Unix(0, r.deadline.Load()), true
}

// callerStats are one caller's counts and histograms.
type callerStats struct {
	ok, over, unknown uint64 // unknown: overall_code UNKNOWN (Envoy asserts on it)
	errs              [numCodes]uint64
	latency           Histogram
	service           *Histogram // open loop only
}

func (s *callerStats) record(d time.Duration, code rlsv3.RateLimitResponse_Code, err error, timedOut bool) {
	s.latency.Record(d)
	if timedOut {
		s.errs[codes.DeadlineExceeded]++
		return
	}
	if err != nil {
		s.errs[codeIndex(err)]++
		return
	}
	switch code {
	case rlsv3.RateLimitResponse_OK:
		s.ok++
	case rlsv3.RateLimitResponse_OVER_LIMIT:
		s.over++
	default:
		s.unknown++
	}
}

func codeIndex(err error) int {
	if errors.Is(err, context.DeadlineExceeded) {
		return int(codes.DeadlineExceeded)
	}
	c := int(status.Code(err))
	if c <= 0 || c >= numCodes {
		return int(codes.Unknown)
	}
	return c
}

func (s *callerStats) reset() {
	svc := s.service
	*s = callerStats{service: svc}
	if svc != nil {
		svc.Reset()
	}
}
