// Package httplimit is sluice's rate limiting inside Go HTTP services:
// net/http middleware that builds rate-limit descriptors from each request
// (the client address behind trusted proxies, an API key, the authenticated
// user, a tenant, any combination, with a per-route cost), asks a Limiter,
// and answers exactly as the sluice service tells Envoy to: a 429 with
// Retry-After, RateLimit-Policy and RateLimit, X-RateLimit-Reason and the
// RFC 9457 problem body, and the RateLimit headers on admitted responses
// too. With a Queue it delays a request that is over its limit instead of
// refusing it, within a bounded queue and a maximum wait.
//
// The Limiter is either the in-process engine (NewEngine: the descriptor
// config format of the server, counted in memory or in Redis for several
// instances) or a remote sluice server over gRPC (Remote). Both give the
// same answers, since both are pkg/rls.
//
// It depends on pkg/rls, pkg/global, pkg/reload, pkg/retry (its Clock) and
// the Envoy protos.
package httplimit

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// Limiter decides a rate-limit request: an *Engine, or Remote around a
// sluice server's gRPC client.
//
// The middleware calls it from every request's goroutine: an implementation
// must be safe for concurrent use (an *Engine and Remote are).
type Limiter interface {
	ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error)
}

// Options configure a Middleware.
//
// New copies them, but not the Descriptors' backing arrays nor what the
// funcs close over: those are read from every request's goroutine and must
// not change after New.
type Options struct {
	// Limiter decides. Required.
	Limiter Limiter
	// Domain of the requests, as in the descriptor config. Required.
	Domain string
	// Descriptors are sent for every request: each is one descriptor of the
	// rate-limit request, its entries in order. A descriptor with an entry
	// the request has no value for is left out, as Envoy does.
	Descriptors []Descriptor
	// Cost is a request's hits_addend. Default 1 (see RouteCost).
	Cost func(*http.Request) uint64
	// FailClosed answers 503 when the Limiter fails; by default the
	// request is served (fail open) and the failure logged.
	FailClosed bool
	// Queue, if set, delays requests over their limit instead of refusing
	// them, within its bounds.
	Queue *Queue
	// Logger gets Limiter failures. Default: discard.
	Logger *slog.Logger
}

// Descriptor is one descriptor: its entries, in order.
//
// The middleware reads it from every request's goroutine: do not modify a
// Descriptor once passed to New.
type Descriptor []Entry

// Entry is one key and where its value comes from.
//
// Its Value is called from every request's goroutine: it must be safe for
// concurrent use.
type Entry struct {
	Key   string
	Value Source
}

// Middleware rate-limits the handlers it wraps. It is safe for concurrent
// use.
type Middleware struct {
	opts  Options
	queue *queue
}

// New returns a Middleware.
func New(opts Options) (*Middleware, error) {
	if opts.Limiter == nil || opts.Domain == "" {
		return nil, errors.New("httplimit: Limiter and Domain are required")
	}
	for _, d := range opts.Descriptors {
		if len(d) == 0 {
			return nil, errors.New("httplimit: a descriptor without entries")
		}
		for _, e := range d {
			if e.Key == "" || e.Value == nil {
				return nil, errors.New("httplimit: an entry needs a Key and a Value")
			}
		}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	m := &Middleware{opts: opts}
	if opts.Queue != nil {
		q, err := newQueue(*opts.Queue)
		if err != nil {
			return nil, err
		}
		m.queue = q
	}
	return m, nil
}

// Handler wraps next: requests within their limits reach it, with the
// RateLimit headers set; others get the 429 the Limiter describes.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req := m.request(r)
		if len(req.Descriptors) == 0 {
			next.ServeHTTP(w, r)
			return
		}
		resp, err := m.opts.Limiter.ShouldRateLimit(r.Context(), req)
		if err == nil && resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT && m.queue != nil {
			resp, err = m.queue.wait(r.Context(), m.opts.Limiter, req, resp)
		}
		switch {
		case err != nil:
			if r.Context().Err() != nil {
				return // the client went away
			}
			m.opts.Logger.Warn("rate limiter failed", "error", err.Error(), "fail_closed", m.opts.FailClosed)
			if m.opts.FailClosed {
				w.Header().Set(limiter.HeaderRetryAfter, "1")
				http.Error(w, "rate limiter unavailable", http.StatusServiceUnavailable)
				return
			}
			next.ServeHTTP(w, r)
		case resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT:
			reject(w, resp)
		default:
			setHeaders(w, resp)
			next.ServeHTTP(w, r)
		}
	})
}

// request builds the rate-limit request for r.
func (m *Middleware) request(r *http.Request) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: m.opts.Domain}
	if m.opts.Cost != nil {
		req.HitsAddend = uint32(min(m.opts.Cost(r), 1<<32-1))
	}
next:
	for _, d := range m.opts.Descriptors {
		desc := &ratelimitv3.RateLimitDescriptor{Entries: make([]*ratelimitv3.RateLimitDescriptor_Entry, 0, len(d))}
		for _, e := range d {
			v, ok := e.Value(r)
			if !ok {
				continue next
			}
			desc.Entries = append(desc.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: e.Key, Value: v})
		}
		req.Descriptors = append(req.Descriptors, desc)
	}
	return req
}

// reject writes the 429 resp describes: its headers (Retry-After,
// RateLimit-Policy, RateLimit, X-RateLimit-Reason, the content type) and
// its problem-details body, as Envoy would send it.
func reject(w http.ResponseWriter, resp *rlsv3.RateLimitResponse) {
	setHeaders(w, resp)
	body := resp.GetRawBody()
	if len(body) == 0 { // a limiter that sends no body (envoyproxy/ratelimit)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		body = []byte(http.StatusText(http.StatusTooManyRequests) + "\n")
	}
	w.WriteHeader(http.StatusTooManyRequests)
	w.Write(body)
}

// setHeaders sets the headers resp asks for on w.
func setHeaders(w http.ResponseWriter, resp *rlsv3.RateLimitResponse) {
	for _, h := range resp.GetResponseHeadersToAdd() {
		w.Header().Set(h.GetKey(), h.GetValue())
	}
}
