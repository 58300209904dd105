package rls

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/flagcache"
	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/global"
)

// Decider decides all the limits of one request at once.
type Decider interface {
	// Decide fills b.Results, one per item, all or nothing: if a
	// non-shadow item is denied, no item consumes. An error means no
	// decision was made.
	Decide(ctx context.Context, b *Batch) error
}

// Batch is the decision one request needs.
type Batch struct {
	Domain string
	Items  []global.Item
	// Limits and Descriptors are the matched limit and the request's
	// descriptor behind each item (a sidecar forwards the descriptors).
	Limits      []*config.Limit
	Descriptors []*ratelimitv3.RateLimitDescriptor
	// Paths are, per item, the path of the configured limit its
	// descriptor matched before any override ("" for none): what a sidecar
	// sends with recorded hits (LimitPathKey).
	Paths   []string
	Results []global.Result
	// Degraded is set by a Decider that decided without its store (by a
	// failure mode); such answers are not remembered in the flag cache.
	Degraded bool
	// Unavailable is set when the failure mode denied because the store
	// was unavailable; the reply says so.
	Unavailable bool
	// Tier names what decided, for sluice_tier_decisions_total: set by the
	// Decider; empty means TierStore.
	Tier string
}

// Tiers the Service itself reports in sluice_tier_decisions_total.
const (
	TierStore       = "store"        // the Decider, when it names no tier
	TierFlagCache   = "flag_cache"   // the flag cache, without the Decider
	TierConfig      = "config"       // a limit with requests_per_unit 0, without the Decider
	TierFailureMode = "failure_mode" // StoreDecider's failure mode, the store unavailable
	TierShed        = "shed"         // StoreDecider's local answer, this process too slow for the store's
)

// ErrUnavailable says the decision could not be made and the caller
// (Envoy, through its failure_mode_deny) should decide: gRPC UNAVAILABLE.
var ErrUnavailable = errors.New("rate limit store unavailable")

// Options configure a Service.
type Options struct {
	// Config returns the current descriptor config; it is read once per
	// request. Required.
	Config func() *config.Config
	// Decider decides. Required.
	Decider Decider
	// Cache, if set, answers keys that were just found over limit from
	// memory until their retry time.
	Cache *flagcache.OverLimit
	// KeyPrefix starts every store key. Default "sluice:".
	KeyPrefix string
	// LegacyHeaders adds X-RateLimit-Limit, -Remaining and -Reset.
	LegacyHeaders bool
	// Logger gets one line per rejection, rate-limited. Default: discard.
	Logger *slog.Logger
	// Metrics, if set, counts decisions.
	Metrics *Metrics
	// Now is the clock for the flag cache. Default time.Now.
	Now func() time.Time
	// RecordAllowed, if set, says whether a caller may send the sidecar's
	// record marker (SidecarRecord): one it refuses is answered
	// PermissionDenied. Unset, every caller may (see SidecarRecord).
	RecordAllowed func(ctx context.Context) bool
}

// Service implements envoy.service.ratelimit.v3.RateLimitService.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	opts  Options
	logs  *logLimiter
	texts textCache

	// flagsCfg is the config the flag cache's entries were decided under:
	// a flag repeats an answer of its limits, so a new config purges them.
	// flagsMu orders a purge against flags being added (read-locked).
	flagsCfg atomic.Pointer[config.Config]
	flagsMu  sync.RWMutex
}

// New returns a Service.
func New(opts Options) (*Service, error) {
	if opts.Config == nil || opts.Decider == nil {
		return nil, errors.New("rls: Config and Decider are required")
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
	return &Service{opts: opts, logs: newLogLimiter(10, time.Second)}, nil
}

// ShouldRateLimit answers one request from Envoy.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	sidecar := sidecarMode(ctx)
	if sidecar == SidecarRecord && s.opts.RecordAllowed != nil && !s.opts.RecordAllowed(ctx) {
		s.count(nil, errRecordDenied, "")
		return nil, grpcError(errRecordDenied)
	}
	var paths []string
	if sidecar == SidecarRecord {
		paths = metadata.ValueFromIncomingContext(ctx, LimitPathKey)
	}
	// A sidecar builds its own reply from the statuses: it needs no
	// headers or body.
	d, resp, err := s.decide(ctx, req, sidecar == SidecarRecord, paths, sidecar == "")
	s.count(resp, err, d.tier)
	if err != nil {
		return nil, grpcError(err)
	}
	if sidecar != "" {
		grpc.SetHeader(ctx, metadata.Pairs(RetryAfterKey, retryList(d)))
	}
	return resp, nil
}

// The sidecar's side channel on the standard API. Envoy never sets this
// metadata, so its path is unchanged.
const (
	// SidecarKey is the gRPC request metadata a sluice sidecar sets.
	SidecarKey = "x-sluice-sidecar"
	// SidecarSync marks a sidecar's ordinary decision.
	SidecarSync = "sync"
	// SidecarRecord marks hits a sidecar already admitted: they are
	// recorded in full even where they exceed what is left (the state goes
	// into debt, holding later requests back until it is repaid), and a
	// status is OVER_LIMIT when its limit is used up.
	//
	// Unless Options.RecordAllowed says otherwise (the server's
	// -record-clients: callers whose client certificate names one of
	// them), the marker is honoured from any caller that reaches the gRPC
	// port (Envoy itself never sets it): keep that port reachable only by
	// Envoy and sidecars. Either way what one call records is bounded: at
	// most one capacity of debt per key (see algorithm.Decide).
	SidecarRecord = "record"
	// LimitPathKey is request metadata a sidecar sends with recorded hits:
	// per descriptor, in order, the path of the configured limit it matched
	// ("" for none). The hits are recorded on that limit rather than on
	// what the descriptor would match here, since a sidecar sends each
	// value as it is counted (EntryValue: long values by digest), on which
	// a wildcard rule could not be matched again; and requests that were
	// decided apart are recorded apart, never replacing one another. A
	// path this server does not know is matched as usual.
	LimitPathKey = "x-sluice-limit-path-bin"
	// RetryAfterKey is the response header metadata answering a sidecar:
	// per descriptor, the µs until a retry can succeed (0 when admitted or
	// unlimited), comma-separated, so its flag cache can hold each key for
	// exactly as long as the store would reject it.
	RetryAfterKey = "x-sluice-retry-after-us"
)

func sidecarMode(ctx context.Context) string {
	// ValueFromIncomingContext copies the one key, not the whole metadata.
	switch v := metadata.ValueFromIncomingContext(ctx, SidecarKey); {
	case len(v) == 0:
		return ""
	case v[0] == SidecarRecord:
		return SidecarRecord
	default:
		return SidecarSync
	}
}

func retryList(d *decision) string {
	var b []byte
	for i, j := range d.itemOf {
		if i > 0 {
			b = append(b, ',')
		}
		var r int64
		if j >= 0 && !d.batch.Results[j].Allowed {
			r = d.batch.Results[j].RetryAfter
		}
		b = strconv.AppendInt(b, r, 10)
	}
	return string(b)
}

// count counts one request by outcome, and by the tier that decided it
// when one did.
func (s *Service) count(resp *rlsv3.RateLimitResponse, err error, tier string) {
	code := "ok"
	switch {
	case err != nil:
		code = "error"
		switch {
		case isInvalid(err):
			code = "invalid"
		case errors.Is(err, errRecordDenied):
			code = "denied"
		}
	case resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT:
		code = "over_limit"
	}
	s.opts.Metrics.request(code)
	if tier != "" && err == nil {
		s.opts.Metrics.tierDecision(tier, code)
	}
}

// isInvalid reports whether err is a bad request's. (A separate function:
// the target errors.As needs escapes, and the request path should not
// allocate it when there is no error.)
func isInvalid(err error) bool {
	var bad *invalid
	return errors.As(err, &bad)
}

// grpcError is the one place errors become gRPC status codes.
func grpcError(err error) error {
	var bad *invalid
	switch {
	case errors.As(err, &bad):
		return status.Error(codes.InvalidArgument, bad.msg)
	case errors.Is(err, ErrUnavailable):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, errNoConfig):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, errRecordDenied):
		return status.Error(codes.PermissionDenied, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

var (
	errNoConfig     = errors.New("no descriptor config loaded")
	errRecordDenied = errors.New("this caller may not record hits (" + SidecarKey + ": " + SidecarRecord + "): its client certificate names none of the server's -record-clients")
)

// decide answers req. With record, the request's hits were already
// admitted by a sidecar: they are recorded in full (algorithm.Force, within
// its debt cap), past the flag cache, on the limits paths name when it
// names one per descriptor (LimitPathKey). forClient asks for the reply's
// current limits, headers and body.
func (s *Service) decide(ctx context.Context, req *rlsv3.RateLimitRequest, record bool, paths []string, forClient bool) (*decision, *rlsv3.RateLimitResponse, error) {
	if err := validate(req); err != nil {
		return &decision{}, nil, err
	}
	cfg := s.opts.Config()
	if cfg == nil {
		return &decision{}, nil, errNoConfig
	}
	s.flagsFollow(cfg)
	if len(paths) != len(req.GetDescriptors()) {
		paths = nil
	}
	d := s.plan(cfg, req, paths)
	if record {
		for i := range d.batch.Items {
			d.batch.Items[i].Mode = algorithm.Force
		}
	}
	switch {
	case d.blocked:
		d.tier = TierConfig
	case len(d.store.Items) > 0:
		now := s.opts.Now()
		if !record && s.fromCache(d, now) {
			d.tier = TierFlagCache
			break
		}
		if err := s.opts.Decider.Decide(ctx, &d.store); err != nil {
			return d, nil, err
		}
		d.tier = d.store.Tier
		if d.tier == "" {
			d.tier = TierStore
		}
		d.batch.Unavailable = d.store.Unavailable
		s.flag(cfg, &d.store, now)
	}
	resp := s.reply(d, req, forClient)
	s.observe(d)
	return d, resp, nil
}

// flagsFollow purges the flag cache when cfg, the current config, is not
// the one its flags were decided under: a reload that raises a limit takes
// effect at once rather than when the flags expire. Requests still on an
// older snapshot never purge (nor add flags, see flag).
func (s *Service) flagsFollow(cfg *config.Config) {
	if s.opts.Cache == nil || s.flagsCfg.Load() == cfg || s.opts.Config() != cfg {
		return
	}
	s.flagsMu.Lock()
	defer s.flagsMu.Unlock()
	if s.flagsCfg.Load() != cfg {
		if s.flagsCfg.Load() != nil {
			s.opts.Cache.Purge()
		}
		s.flagsCfg.Store(cfg)
	}
}

// fromCache answers the request from the flag cache when one of its
// non-shadow keys is flagged over limit: the store would reject it, and
// all-or-nothing means the other limits would consume nothing.
func (s *Service) fromCache(d *decision, now time.Time) bool {
	c := s.opts.Cache
	if c == nil {
		return false
	}
	hit := false
	b := &d.store
	for i, it := range b.Items {
		if it.Shadow {
			// Never flagged, so not known: as below.
			b.Results[i] = global.Result{Allowed: true}
			continue
		}
		if until, ok := c.Until(it.Key, now); ok {
			left := until.Sub(now).Microseconds()
			b.Results[i] = global.Result{Allowed: false, RetryAfter: left, ResetAfter: left}
			hit = true
		} else {
			// Not known: reported as allowed with nothing to say about
			// what is left, since the store was not asked.
			b.Results[i] = global.Result{Allowed: true}
		}
	}
	if hit {
		d.cached = true
		s.opts.Metrics.cacheHit()
	}
	return hit
}

// flag remembers the keys the decider found over limit until their retry
// time, so a flood from one client costs no more store calls. Only items
// denied on their own are flagged, never one the request's other limits
// vetoed, and never a shadow item; and only requests of one unit (a check
// of zero is judged as one), whose retry time is the key's for every later
// request: a costlier one refused can leave room for cheaper ones.
func (s *Service) flag(cfg *config.Config, b *Batch, now time.Time) {
	c := s.opts.Cache
	if c == nil || b.Degraded {
		return
	}
	s.flagsMu.RLock()
	defer s.flagsMu.RUnlock()
	if s.flagsCfg.Load() != cfg {
		return // decided on a config that has since been replaced
	}
	for i, r := range b.Results {
		it := &b.Items[i]
		// A Force item's answer is already for the next unit.
		if !r.Allowed && !it.Shadow && r.RetryAfter > 0 && (it.Cost <= 1 || it.Mode == algorithm.Force) {
			c.Add(it.Key, now.Add(time.Duration(r.RetryAfter)*time.Microsecond))
		}
	}
}
