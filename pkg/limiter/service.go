package limiter

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/cache"
	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/share"
	"github.com/sluicehq/sluice/pkg/topkeys"
)

// Decider decides all the limits of one request at once.
//
// A Service calls it from every request's goroutine: an implementation must
// be safe for concurrent use.
type Decider interface {
	// Decide fills b.Results, one per item, all or nothing: if a
	// non-shadow item is denied, no item consumes. An error means no
	// decision was made.
	Decide(ctx context.Context, b *Batch) error
}

// Asker is a Decider that counts demand (an async tier reporting it to
// pkg/share): the requests the flag cache answers in front of it never
// reach Decide, so they are told to Asked instead. Without them a flood
// the flag cache holds back reports a fraction of its demand, and a key is
// judged far from its limit while it is not (one server in cached mode
// admitted 1.05 × an exact limiter so). Asked must be cheap, for it is on
// the flag cache's path, and safe for concurrent use: every request's
// goroutine calls it.
type Asker interface {
	Asked(b *Batch)
}

// Batch is the decision one request needs. Its slices may live in the
// request's own space: a Decider must not keep them past Decide.
//
// A Batch belongs to one request's goroutine and is not safe for concurrent
// use.
type Batch struct {
	// Request is the request being decided; Descriptors are, per item, the
	// index of the descriptor it comes from (a sidecar forwards them).
	Request     Request
	Descriptors []int
	Items       []algorithm.Item
	// Limits are the limit behind each item (read only).
	Limits []*config.Limit
	// Paths are, per descriptor, the path of the configured limit it
	// matched before any override ("" for none): what a sidecar sends with
	// recorded hits (DecideOptions.Paths).
	Paths   []string
	Results []algorithm.Result
	// Degraded is set by a Decider that decided without its store (a
	// failure mode, a shed request); such answers are not remembered in
	// the flag cache.
	Degraded bool
	// Unavailable is set when the failure mode denied because the store
	// was unavailable; the answer says so.
	Unavailable bool
	// Source names what decided, for sluice_tier_decisions_total: set by
	// the Decider; empty means SourceStore.
	Source Source
	// Exact asks for the store's answer or none: a caller that decides
	// locally itself when the store is late (a sidecar: its sync call, its
	// recorded hits) gets ErrLate rather than an answer decided in this
	// process's memory, which the store would never count.
	Exact bool
}

// ErrUnavailable says the decision could not be made and the caller
// (Envoy, through its failure_mode_deny) should decide.
var ErrUnavailable = errors.New("rate limit store unavailable")

// ErrLate says the store had not answered by the caller's deadline (an
// Exact batch): not a failure of the store, and no decision was made.
var ErrLate = errors.New("rate limit store did not answer in time")

// ErrNoConfig says no descriptor config is loaded yet.
var ErrNoConfig = errors.New("no descriptor config loaded")

// ErrRecordDenied was returned for a record marker from a caller not
// known as a sidecar. Such a marker is now ignored and the request
// decided as a client's (see pkg/peerauth), so nothing returns it.
//
// Deprecated: never returned; ErrRecordDenied goes in the next release.
var ErrRecordDenied = errors.New("this caller may not record hits")

// Options configure a Service.
//
// New copies them; what they name (Config, Decider, Cache, Logger,
// Metrics, Now) is shared with the Service, which calls it
// from every request's goroutine: each must be safe for concurrent use.
type Options struct {
	// Config returns the current descriptor config; it is read once per
	// request. Required.
	Config func() *config.Config
	// Decider decides. Required.
	Decider Decider
	// Cache, if set, answers keys that were just found over limit from
	// memory until their retry time.
	Cache *cache.OverLimit
	// KeyPrefix starts every store key. Default "sluice:".
	KeyPrefix string
	// LegacyHeaders adds X-RateLimit-Limit, -Remaining and -Reset.
	LegacyHeaders bool
	// Logger gets one line per rejection, rate-limited. Default: discard.
	Logger *slog.Logger
	// ShadowAll answers every request OK, over limit or not, counting as
	// usual (the reference's SHADOW_MODE); QuotaAll makes every limit a
	// quota limit (its QUOTA_MODE; config.Limit.QuotaMode).
	ShadowAll, QuotaAll bool
	// ReferenceCounting counts as envoyproxy/ratelimit does: a limit whose
	// config names no algorithm is a fixed window, and every hit counts,
	// those of rejected requests included, on every limit of the request
	// (algorithm.Count).
	ReferenceCounting bool
	// Refunds says the Decider applies refunds (Request.Refund,
	// algorithm.GiveBack): the stores do, and pkg/localtier passes them on.
	// Without it a request carrying one is refused as invalid.
	Refunds bool
	// TopKeys, if set, counts each refusal by limit and key (pkg/topkeys),
	// for operators to see who is being limited.
	TopKeys *topkeys.Tracker
	// Shares, if set, hands sidecars their allowances on tight keys
	// (DecideOptions.Demand). Unset, every allowance is -1: none.
	Shares *share.Tracker
	// Metrics, if set, counts decisions.
	Metrics *Metrics
	// Now is the clock for the flag cache. Default time.Now.
	Now func() time.Time
}

// DecideOptions say how a request is decided and answered.
//
// A plain value, safe to share between goroutines. The zero value
// decides a client's request and answers codes and times only.
type DecideOptions struct {
	// Record marks hits a sidecar already admitted: they are recorded in
	// full (algorithm.Force, within its debt cap), past the flag cache, and
	// a status is over limit when its limit is used up. Only a caller
	// known to be a sidecar may ask for it: the wire that sets it
	// authenticates the caller first (pkg/peerauth).
	Record bool
	// Paths, with Record, name per descriptor the configured limit the
	// sidecar matched ("" for none): the hits are recorded on it rather
	// than on what the descriptor would match here, since a sidecar sends
	// values as they are counted (EntryValue: long ones by digest), on
	// which a wildcard rule could not be matched again; and requests that
	// were decided apart are recorded apart, never replacing one another. A
	// path this config does not know is matched as usual. Ignored unless
	// there is one per descriptor.
	Paths []string
	// Content asks for what a client's answer carries: the limits, the
	// headers and, on a 429, the problem body. A sidecar needs codes and
	// times only.
	Content bool
	// Demand, with Record, is the sidecar's demand per descriptor: each
	// status then carries its allowance (Status.Allowance).
	Demand *Demand
	// Ages, with Record, are per descriptor how long before now (µs, on
	// the sidecar's own clock) its newest hit was admitted: the store
	// places the hits in the window that held them (algorithm.Record),
	// at most a window back. Ignored unless there is one per descriptor.
	Ages []int64
}

// Service is sluice's decision core. It is safe for concurrent use.
type Service struct {
	opts  Options
	logs  *logLimiter
	texts config.LimitMemo[*limitText]

	// flagsCfg is the config the flag cache's entries were decided under:
	// a flag repeats an answer of its limits, so a new config purges them.
	// flagsMu orders a purge against flags being added (read-locked).
	flagsCfg atomic.Pointer[config.Config]
	flagsMu  sync.RWMutex

	// decisions are the decisions given back by Done, for the next
	// requests: a decision is the request path's largest allocation.
	decisions sync.Pool
}

// New returns a Service.
func New(opts Options) (*Service, error) {
	if opts.Config == nil || opts.Decider == nil {
		return nil, errors.New("limiter: Config and Decider are required")
	}
	if opts.KeyPrefix == "" {
		opts.KeyPrefix = "sluice:"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Service{opts: opts, logs: newLogLimiter(10, time.Second)}
	s.decisions.New = func() any { return new(decision) }
	return s, nil
}

// Decide decides req and answers it. The answer is the caller's until it
// hands it back with Done, if it does. Errors: *InvalidError for a
// request that cannot be decided, ErrUnavailable (wrapped) when the store
// could not decide and the failure mode says so, ErrNoConfig, or the
// context's.
func (s *Service) Decide(ctx context.Context, req Request, o DecideOptions) (*Answer, error) {
	d, err := s.decide(ctx, req, o)
	if err != nil {
		s.count(nil, err, d.source)
		return nil, err
	}
	s.count(&d.answer, nil, d.source)
	d.answer.owner = d
	return &d.answer, nil
}

// Done hands back an answer Decide gave, which the caller and everything
// it gave the answer to will not read again (strings taken from it
// excepted: they are immutable), so that its space serves a later
// request. Calling it is optional; a second call on one answer does
// nothing.
func (s *Service) Done(a *Answer) {
	if a == nil || a.owner == nil {
		return
	}
	d := a.owner
	a.owner = nil
	s.decisions.Put(d)
}

func (s *Service) decide(ctx context.Context, req Request, o DecideOptions) (*decision, error) {
	if err := validate(req); err != nil {
		return &decision{}, err
	}
	if !s.opts.Refunds {
		for i := range req.Len() {
			if req.Refund(i) {
				return &decision{}, Invalidf("descriptor %d: is_negative_hits: this service's decider applies no refunds", i)
			}
		}
	}
	cfg := s.opts.Config()
	if cfg == nil {
		return &decision{}, ErrNoConfig
	}
	s.flagsFollow(cfg)
	paths := o.Paths
	if !o.Record || len(paths) != req.Len() {
		paths = nil
	}
	d := s.plan(cfg, req, paths)
	d.store.Exact = !o.Content // a sidecar's
	if o.Record {
		ages := o.Ages
		if len(ages) != req.Len() {
			ages = nil
		}
		for i := range d.batch.Items {
			if d.batch.Items[i].Mode == algorithm.GiveBack {
				continue // a refund the sidecar passes on
			}
			d.batch.Items[i].Mode = algorithm.Force
			if ages != nil {
				d.batch.Items[i].Age = ages[d.batch.Descriptors[i]]
			}
		}
	}
	switch {
	case d.blocked:
		d.source = SourceConfig
		if d.store.Refunds() > 0 {
			s.refundAlone(ctx, d)
		}
	case len(d.store.Items) > 0:
		now := s.opts.Now()
		// A request with a refund goes to the store whatever is flagged:
		// the refund applies even when its charges are refused.
		if !o.Record && d.store.Refunds() == 0 && s.fromCache(d, now) {
			d.source = SourceFlagCache
			if a, ok := s.opts.Decider.(Asker); ok {
				a.Asked(&d.store)
			}
			break
		}
		if err := s.opts.Decider.Decide(ctx, &d.store); err != nil {
			return d, err
		}
		d.source = d.store.Source
		if d.source == "" {
			d.source, d.storeRefunds = SourceStore, true
		}
		d.batch.Unavailable = d.store.Unavailable
		s.flag(cfg, &d.store, now)
	}
	s.answer(d, o.Content)
	if o.Record && o.Demand != nil {
		s.allot(d, o.Demand)
	}
	s.observe(d)
	return d, nil
}

// count counts one request by outcome, and by the source that decided it
// when one did.
func (s *Service) count(a *Answer, err error, source Source) {
	code := "ok"
	switch {
	case err == nil && a.Overall == OverLimit:
		code = "over_limit"
	case err == nil:
	case isInvalid(err):
		code = "invalid"
	case errors.Is(err, ErrLate):
		code = "late"
	default:
		code = "error"
	}
	s.opts.Metrics.request(code)
	if source != "" && err == nil {
		s.opts.Metrics.sourceDecision(source, code)
	}
}

// isInvalid reports whether err is a bad request's. (A function of its
// own: the target errors.As needs escapes, and the request path should not
// allocate it when there is no error.)
func isInvalid(err error) bool {
	var bad *InvalidError
	return errors.As(err, &bad)
}
