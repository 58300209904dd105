package retry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"time"

	"golang.org/x/time/rate"
)

// Defaults used for the zero fields of Options.
const (
	DefaultBase        = 500 * time.Millisecond
	DefaultCap         = 30 * time.Second
	DefaultMaxAttempts = 5
	DefaultMaxElapsed  = time.Minute
)

// drainLimit bounds how much of a discarded response body is read so that
// its connection can be reused; a longer body costs a new connection, which
// is cheaper than reading an unbounded error page.
const drainLimit = 64 << 10

// Options configure a Transport. The zero value is ready to use: each zero
// field takes the default named in its comment.
//
// NewTransport copies them; Next, Clock, Rand, Retryable and Pace are shared
// by every RoundTrip and must be safe for concurrent use if the Transport is
// shared.
type Options struct {
	// Base is the backoff ceiling before the first retry; it doubles on
	// each later retry up to Cap. Default DefaultBase (500ms).
	Base time.Duration
	// Cap bounds the backoff ceiling. Default DefaultCap (30s).
	Cap time.Duration
	// MaxAttempts bounds the attempts, the first included; 1 disables
	// retries. Default DefaultMaxAttempts (5).
	MaxAttempts int
	// MaxElapsed bounds the time from the start of RoundTrip to the start
	// of the last attempt: no wait is begun that would end past it. It does
	// not time out an attempt in flight; use the request's context or
	// http.Client.Timeout for that. Default DefaultMaxElapsed (1m).
	MaxElapsed time.Duration
	// MaxWait bounds any one wait between attempts. A backoff longer
	// than it is shortened to it; a server that asks for a longer wait
	// (see Transport) is taken at its word, and its response returned at
	// once rather than retried early into another refusal. Default 0: no
	// bound but MaxElapsed.
	MaxWait time.Duration
	// RetryAfterJitter bounds a random delay added to the wait a server
	// asks for, to spread out clients told the same second; the sum is
	// shortened to fit MaxWait and MaxElapsed. Default 0: wait exactly
	// what the server asked.
	RetryAfterJitter time.Duration
	// Retryable reports whether a response is worth another attempt.
	// Default: 429 and every 5xx but 501, 505 and 511, which say the
	// request or the client's network will not work, not that the server
	// is briefly unable.
	Retryable func(*http.Response) bool
	// Pace, if set, paces every attempt, retries included: before each
	// the Transport takes one token, waiting on Clock until it is due. A
	// client set below a server's limit (rate.NewLimiter(80, 10) under a
	// limit of 100/s) stays below it even when retries add to its
	// traffic, which a limiter the caller waits on before RoundTrip cannot
	// promise. A wait that would end past the request context's deadline
	// is not begun, and gives its token back. Pacing waits are not
	// backoff: they count toward MaxElapsed as they pass but are not cut
	// short by it. Share one Limiter among the Transports that call the
	// same server. Default nil: no pacing.
	Pace *rate.Limiter
	// Next sends each attempt. Default http.DefaultTransport.
	Next http.RoundTripper
	// Clock reads the time and waits. Default the system clock.
	Clock Clock
	// Rand returns a number in [0, 1); it must be safe for concurrent use
	// if the Transport is shared. Default math/rand/v2's Float64.
	Rand func() float64
}

func (o Options) withDefaults() Options {
	if o.Base <= 0 {
		o.Base = DefaultBase
	}
	if o.Cap <= 0 {
		o.Cap = DefaultCap
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.MaxElapsed <= 0 {
		o.MaxElapsed = DefaultMaxElapsed
	}
	o.RetryAfterJitter = max(o.RetryAfterJitter, 0)
	if o.Retryable == nil {
		o.Retryable = defaultRetryable
	}
	if o.Next == nil {
		o.Next = http.DefaultTransport
	}
	if o.Clock == nil {
		o.Clock = SystemClock()
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	return o
}

// defaultRetryable retries the non-standard 5xx too: 520-524 from
// Cloudflare and 529 "overloaded" from some APIs are as passing as a 503.
func defaultRetryable(r *http.Response) bool {
	switch c := r.StatusCode; c {
	case http.StatusTooManyRequests:
		return true
	case http.StatusNotImplemented, http.StatusHTTPVersionNotSupported,
		http.StatusNetworkAuthenticationRequired:
		return false
	default:
		return c >= 500 && c <= 599
	}
}

// RetryOnStatus returns a Retryable that retries exactly the given status
// codes.
func RetryOnStatus(codes ...int) func(*http.Response) bool {
	set := make(map[int]bool, len(codes))
	for _, c := range codes {
		set[c] = true
	}
	return func(r *http.Response) bool { return set[r.StatusCode] }
}

// Transport is an http.RoundTripper that retries; see Options for what it
// retries and when it stops. It is safe for concurrent use if Next, Clock
// and Rand are. The zero value behaves as NewTransport(Options{}).
//
// A request is retried only if it is safe to repeat: its method is GET,
// HEAD, OPTIONS, TRACE, PUT or DELETE, or it carries an Idempotency-Key (or
// X-Idempotency-Key, which net/http also honours) header; and its body, if
// any, can be replayed through GetBody. Any other request is sent once.
//
// A request with a body but no GetBody is sent once rather than buffered:
// http.NewRequest sets GetBody for the in-memory bodies it knows, and a
// caller streaming anything else is better placed to choose how much to
// hold.
//
// The server's word replaces the backoff: a retryable response's
// Retry-After, when valid (delay-seconds, or an HTTP-date measured from
// the response's Date); or else, on a 429 only, the longest reset time t
// of the policies its RateLimit header (draft-ietf-httpapi-ratelimit-headers)
// reports exhausted (r=0). That field describes quota, and so says when a
// 429 will stop but nothing of when a 5xx will. A server's wait that
// reaches past MaxWait or what is left of MaxElapsed is not cut short:
// retrying before it would only be refused again, so the response is
// returned at once. Otherwise the wait before retry n (n = 0 before the
// second attempt) is uniform in [0, min(Cap, Base·2ⁿ)) (full jitter),
// shortened to fit MaxWait and MaxElapsed.
//
// Failed attempts (transport errors) are retried under the same rules.
// Nothing is sent once the request's context is done: an attempt that
// fails because of it ends RoundTrip with its error, and one done by the
// end of a wait ends RoundTrip with an error wrapping ctx.Err() instead
// of another attempt. Discarded responses are drained (up to 64 KiB) and closed, so
// their connections are reused. When the Transport gives up it returns
// the last response untouched, or, if the last attempt failed without
// one, its error.
type Transport struct {
	opts Options
}

// NewTransport returns a Transport with the given options.
func NewTransport(o Options) *Transport {
	return &Transport{opts: o.withDefaults()}
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	o := t.opts.withDefaults() // idempotent; lets the zero Transport work
	if o.MaxAttempts == 1 || !replayable(req) {
		if err := o.pace(req.Context(), 1); err != nil {
			closeBody(req)
			return nil, err
		}
		return o.Next.RoundTrip(req)
	}
	ctx := req.Context()
	start := o.Clock.Now()
	attempt := req
	for n := 0; ; n++ {
		if err := o.pace(ctx, n+1); err != nil {
			closeBody(attempt)
			return nil, err
		}
		resp, err := o.Next.RoundTrip(attempt)
		if err == nil && !o.Retryable(resp) {
			return resp, nil
		}
		if err != nil && ctx.Err() != nil {
			return nil, err // the caller gave up; the error says why
		}
		if n+1 >= o.MaxAttempts {
			return giveUp(resp, err, n+1)
		}
		now := o.Clock.Now()
		wait, ok := o.delay(n, resp, o.MaxElapsed-now.Sub(start), now)
		if !ok {
			return giveUp(resp, err, n+1)
		}
		// Rewind before discarding: if the body cannot be had again, the
		// caller still gets this response rather than an error.
		next, rerr := rewind(req)
		if rerr != nil {
			if resp != nil {
				return resp, nil
			}
			return nil, errors.Join(err, rerr)
		}
		discard(resp)
		err = o.Clock.Sleep(ctx, wait)
		if err == nil {
			// The context may end as the wait does, and a Clock might
			// not look: nothing is sent once it is done.
			err = ctx.Err()
		}
		if err != nil {
			closeBody(next)
			return nil, fmt.Errorf("retry: waiting %v before attempt %d: %w", wait, n+2, err)
		}
		attempt = next
	}
}

// CloseIdleConnections closes Next's idle connections if it keeps any, so
// that http.Client.CloseIdleConnections reaches through the Transport.
func (t *Transport) CloseIdleConnections() {
	type closeIdler interface{ CloseIdleConnections() }
	if c, ok := t.opts.withDefaults().Next.(closeIdler); ok {
		c.CloseIdleConnections()
	}
}

// pace waits on the Clock for Pace's token for the given attempt.
func (o *Options) pace(ctx context.Context, attempt int) error {
	if o.Pace == nil {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	now := o.Clock.Now()
	r := o.Pace.ReserveN(now, 1)
	if !r.OK() {
		return fmt.Errorf("retry: Pace (burst %d) can never allow attempt %d", o.Pace.Burst(), attempt)
	}
	wait := r.DelayFrom(now)
	if wait <= 0 {
		return nil
	}
	// The deadline is on the system clock, whatever Clock is.
	if deadline, ok := ctx.Deadline(); ok && wait > time.Until(deadline) {
		r.CancelAt(now)
		return fmt.Errorf("retry: pacing attempt %d would wait %v, past the context deadline: %w", attempt, wait, context.DeadlineExceeded)
	}
	if err := o.Clock.Sleep(ctx, wait); err != nil {
		r.CancelAt(o.Clock.Now())
		return fmt.Errorf("retry: pacing attempt %d: %w", attempt, err)
	}
	return nil
}

// delay is the wait before retry n given the time left in the budget, or
// false if the Transport should give up instead.
func (o *Options) delay(n int, resp *http.Response, left time.Duration, now time.Time) (time.Duration, bool) {
	if left <= 0 {
		return 0, false
	}
	limit := left
	if o.MaxWait > 0 {
		limit = min(limit, o.MaxWait)
	}
	if resp != nil {
		if d, ok := serverWait(resp, now); ok {
			// The server knows when capacity returns: waiting less is
			// pointless, so a wait past the limit means giving up.
			if d > limit {
				return 0, false
			}
			if j := o.jitter(o.RetryAfterJitter); j < limit-d {
				return d + j, true
			}
			return limit, true
		}
	}
	return min(o.backoff(n), limit), true
}

// backoff is the full-jitter delay before retry n.
func (o *Options) backoff(n int) time.Duration {
	ceil := o.Cap
	if n < 63 && o.Base <= o.Cap>>n { // Base·2ⁿ ≤ Cap, without overflow
		ceil = o.Base << n
	}
	return o.jitter(ceil)
}

// jitter is uniform in [0, d), trusting Rand only to return a float.
func (o *Options) jitter(d time.Duration) time.Duration {
	r := o.Rand()
	if !(r > 0) { // also NaN
		return 0
	}
	f := r * float64(d)
	if f >= float64(d) { // r ≥ 1, or rounding up near MaxInt64
		return d
	}
	return time.Duration(f)
}

// replayable reports whether req may be sent more than once.
func replayable(req *http.Request) bool {
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return false
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions,
		http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	// Presence is what counts: net/http treats a nil value the same way.
	_, key := req.Header["Idempotency-Key"]
	_, xkey := req.Header["X-Idempotency-Key"]
	return key || xkey
}

// rewind returns a request to send again. RoundTrip must not modify the
// caller's request, so a fresh body goes into a shallow copy.
func rewind(req *http.Request) (*http.Request, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, nil
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, fmt.Errorf("retry: rewind request body: %w", err)
	}
	r := *req
	r.Body = body
	return &r, nil
}

func giveUp(resp *http.Response, err error, attempts int) (*http.Response, error) {
	if resp != nil {
		return resp, nil
	}
	return nil, fmt.Errorf("retry: %d attempts: %w", attempts, err)
}

// discard drains and closes a response the caller will never see, so its
// connection goes back to the pool.
func discard(resp *http.Response) {
	if resp == nil || resp.Body == nil {
		return
	}
	_, _ = io.CopyN(io.Discard, resp.Body, drainLimit)
	_ = resp.Body.Close()
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}
