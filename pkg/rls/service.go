package rls

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/peerauth"
	"github.com/sluicehq/sluice/pkg/share"
)

// Service implements envoy.service.ratelimit.v3.RateLimitService on the
// decision core. It is safe for concurrent use.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	core    *limiter.Service
	limits  config.LimitMemo[*rlsv3.RateLimitResponse_RateLimit]
	dynamic bool // WithDynamicMetadata
	// Who may speak as a sidecar (WithProxies); nil: nobody.
	proxies  *peerauth.Authenticator
	refusals *prometheus.CounterVec // nil: not counted
	log      *slog.Logger
	logEvery rate.Sometimes // refusals logged at most once a second
}

// ServiceOption sets an optional behaviour of a Service. Options are
// functions without state of their own, safe to share between goroutines.
type ServiceOption func(*Service)

// WithDynamicMetadata adds to every answer to Envoy the dynamic metadata
// the reference's RESPONSE_DYNAMIC_METADATA setting adds (dynamicMetadata):
// the request's domain and descriptors, and the configured metadata of the
// descriptors that passed.
func WithDynamicMetadata() ServiceOption { return func(s *Service) { s.dynamic = true } }

// WithProxies says which callers are sluice's sidecars, whose record
// marker, demand reports and allowances are honoured: those auth names.
// A marker from anyone else is answered as an ordinary request, with
// RefusedKey saying why, counted in sluice_sidecar_refusals_total on reg
// (if not nil) and logged to log at most once a second. Without this
// option no caller is a sidecar.
func WithProxies(auth *peerauth.Authenticator, log *slog.Logger, reg prometheus.Registerer) ServiceOption {
	return func(s *Service) {
		s.proxies = auth
		if log != nil {
			s.log = log
		}
		if reg != nil {
			s.refusals = prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "sluice_sidecar_refusals_total",
				Help: "Sidecar markers (recorded hits, demand reports) refused because the caller is not a known sidecar, by reason: not_configured, no_credentials, unknown_certificate, bad_token, token_without_tls. The request is decided as an ordinary one.",
			}, []string{"reason"})
			reg.MustRegister(s.refusals)
		}
	}
}

// NewService serves core as Envoy's RateLimitService.
func NewService(core *limiter.Service, opts ...ServiceOption) *Service {
	s := &Service{core: core, log: slog.New(slog.DiscardHandler), logEvery: rate.Sometimes{Interval: time.Second}}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Core is the decision core the service answers from.
func (s *Service) Core() *limiter.Service { return s.core }

// The sidecar's side channel on the standard API. Envoy never sets this
// metadata, so its path is unchanged.
const (
	// SidecarKey is the gRPC request metadata a sluice sidecar sets.
	SidecarKey = "x-sluice-sidecar"
	// SidecarSync marks a sidecar's ordinary decision: answered with codes
	// and times, no headers or body.
	SidecarSync = "sync"
	// SidecarRecord marks hits a sidecar already admitted
	// (limiter.DecideOptions.Record): recorded in full even where they
	// exceed what is left (the state goes into debt, within its cap), and
	// a status is OVER_LIMIT when its limit is used up. Honoured only from
	// callers WithProxies names; from anyone else the request is decided
	// as an ordinary one and RefusedKey says so.
	SidecarRecord = "record"
	// RefusedKey is the response header metadata answering a record
	// marker that was not honoured: why (a peerauth.Refusal). The request
	// was decided as a client's: its hits were taken only if they fit.
	RefusedKey = "x-sluice-sidecar-refused"
	// LimitPathKey is request metadata a sidecar sends with recorded hits:
	// per descriptor, in order, the path of the configured limit it matched
	// ("" for none): limiter.DecideOptions.Paths.
	LimitPathKey = "x-sluice-limit-path-bin"
	// SidecarIDKey, IntervalKey and DemandKey are request metadata an async
	// sidecar sends with recorded hits (pkg/share): its name, its
	// reporting interval (µs: its flush interval, or the cycle its flushes
	// actually run at plus a round trip, share.Report.Interval), and per
	// descriptor, in order, the units it was asked for per second since it
	// last reported the key, comma-separated.
	SidecarIDKey = "x-sluice-sidecar-id"
	IntervalKey  = "x-sluice-flush-interval-us"
	DemandKey    = "x-sluice-demand"
	// HeldKey is request metadata an async sidecar sends with them: per
	// descriptor, in order, the units it still held of its last allowance
	// for the key when it took the hits, comma-separated (share.Report.Held).
	// A server that does not know it takes none as held, as before.
	HeldKey = "x-sluice-held"
	// DeniedKey is request metadata an async sidecar sends with them: per
	// descriptor, in order, the units it denied of the key since it last
	// reported it, comma-separated.
	// With the hits it records they back its demand (share.Report.Asked);
	// a server that does not know it ignores it, and a sidecar that does
	// not send it has its demand believed as before, within the limit's
	// rate (share.MaxShareWeight).
	DeniedKey = "x-sluice-denied"
	// AllowanceKey is the response header metadata answering them: per
	// descriptor, the units the sidecar may admit for the key until it
	// reports again, or -1 for no allowance (decide as usual).
	AllowanceKey = "x-sluice-allowance"
	// LooseHoldKey is request metadata an async sidecar sends with
	// recorded hits: how long (µs) it may keep a loose key's hits before
	// recording them (share.Report.Hold). HoldKey answers it: per
	// descriptor, the units of the key it may keep so, 0 for none. A
	// server that does not know them answers none, and a sidecar that
	// does not send it is given none: it records every key every interval.
	LooseHoldKey = "x-sluice-loose-hold-us"
	HoldKey      = "x-sluice-hold"
	// AgeKey is request metadata a sidecar sends with recorded hits: per
	// descriptor, in order, how long before the call its newest hit was
	// admitted, in µs of its own monotonic clock, comma-separated
	// (limiter.DecideOptions.Ages). A server that does not know it charges
	// the hits at its own now, as before.
	AgeKey = "x-sluice-hit-age-us"
	// RetryAfterKey is the response header metadata answering a sidecar:
	// per descriptor, the µs until a retry can succeed (0 when admitted or
	// unlimited), comma-separated, so its flag cache can hold each key for
	// exactly as long as the store would reject it.
	RetryAfterKey = "x-sluice-retry-after-us"
)

// ShouldRateLimit answers one request from Envoy (or a sluice sidecar).
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	sidecar := sidecarMode(ctx)
	var proxy string
	if sidecar == SidecarRecord {
		var refusal peerauth.Refusal
		if proxy, refusal = s.authenticate(ctx); refusal != "" {
			sidecar = ""
			grpc.SetHeader(ctx, metadata.Pairs(RefusedKey, string(refusal)))
		}
	}
	o := limiter.DecideOptions{Record: sidecar == SidecarRecord, Content: sidecar == ""}
	if o.Record {
		o.Paths = metadata.ValueFromIncomingContext(ctx, LimitPathKey)
		o.Ages = agesOf(ctx, len(req.GetDescriptors()))
		if o.Demand = demandOf(ctx, len(req.GetDescriptors())); o.Demand != nil {
			o.Demand.Peer = proxy
		}
	}
	a, err := s.core.Decide(ctx, view{req}, o)
	if err != nil {
		return nil, grpcError(err)
	}
	if sidecar != "" {
		md := metadata.Pairs(RetryAfterKey, retryList(a))
		if o.Demand != nil {
			md.Append(AllowanceKey, allowanceList(a))
			if o.Demand.Hold > 0 {
				md.Append(HoldKey, holdList(a))
			}
		}
		grpc.SetHeader(ctx, md)
	}
	resp := s.reply(a)
	if s.dynamic && sidecar == "" {
		resp.DynamicMetadata = dynamicMetadata(req, a)
	}
	s.core.Done(a) // resp copies what it needs of a
	return resp, nil
}

// authenticate names the sidecar calling with ctx, or counts and logs
// (sampled) why the caller is not one.
func (s *Service) authenticate(ctx context.Context) (string, peerauth.Refusal) {
	name, refusal := s.proxies.Authenticate(ctx)
	if refusal != "" {
		return s.refuse(ctx, refusal)
	}
	return name, ""
}

func (s *Service) refuse(ctx context.Context, refusal peerauth.Refusal) (string, peerauth.Refusal) {
	if s.refusals != nil {
		s.refusals.WithLabelValues(string(refusal)).Inc()
	}
	s.logEvery.Do(func() {
		addr := ""
		if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
			addr = p.Addr.String()
		}
		s.log.Warn("sidecar marker refused: the caller is not a known sidecar; decided as an ordinary request (logged at most once a second)",
			"reason", string(refusal), "peer", addr)
	})
	return "", refusal
}

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

// demandOf reads a sidecar's demand report from ctx's metadata, for n
// descriptors; nil when there is none or it does not parse, or breaks the
// bounds of a share.Report (the hits are recorded all the same, without
// allowances).
func demandOf(ctx context.Context, n int) *limiter.Demand {
	id := metadata.ValueFromIncomingContext(ctx, SidecarIDKey)
	iv := metadata.ValueFromIncomingContext(ctx, IntervalKey)
	rates := metadata.ValueFromIncomingContext(ctx, DemandKey)
	if len(id) != 1 || len(iv) != 1 || len(rates) != 1 || n == 0 || len(rates[0]) > n*maxRateText {
		return nil
	}
	us, err := strconv.ParseInt(iv[0], 10, 64)
	if err != nil || us <= 0 || us > share.MaxInterval.Microseconds() {
		return nil
	}
	d := &limiter.Demand{Sidecar: id[0], Interval: time.Duration(us) * time.Microsecond, Rates: make([]float64, 0, n)}
	for f := range strings.SplitSeq(rates[0], ",") {
		r, err := strconv.ParseFloat(f, 64)
		if err != nil || len(d.Rates) == n || !(r >= 0 && r <= share.MaxRate) { // NaN fails both
			return nil
		}
		d.Rates = append(d.Rates, r)
	}
	if len(d.Rates) != n || !(share.Report{Sidecar: d.Sidecar, Interval: d.Interval}).Valid() {
		return nil
	}
	d.Held = heldOf(ctx, n)
	d.Denied = deniedOf(ctx, n)
	d.Hold = looseHoldOf(ctx)
	return d
}

// looseHoldOf reads how long a sidecar may keep loose keys' hits
// (LooseHoldKey): 0 when it says nothing, or it does not parse or is not
// within (0, share.MaxHold].
func looseHoldOf(ctx context.Context) time.Duration {
	v := metadata.ValueFromIncomingContext(ctx, LooseHoldKey)
	if len(v) != 1 || len(v[0]) > maxAgeText {
		return 0
	}
	us, err := strconv.ParseInt(v[0], 10, 64)
	if err != nil || us <= 0 || us > share.MaxHold.Microseconds() {
		return 0
	}
	return time.Duration(us) * time.Microsecond
}

// heldOf reads what a sidecar held of its allowances (HeldKey) for n
// descriptors: nil when it says nothing or it does not parse or passes
// share.MaxRate (then none is taken as held).
func heldOf(ctx context.Context, n int) []float64 {
	return listOf(ctx, HeldKey, n, maxRateText, func(f string) (float64, bool) {
		h, err := strconv.ParseFloat(f, 64)
		return h, err == nil && h >= 0 && h <= share.MaxRate // NaN fails both
	})
}

// deniedOf reads the units a sidecar denied (DeniedKey) for n
// descriptors: nil when it says nothing, or they do not parse or pass
// limiter.MaxCost.
func deniedOf(ctx context.Context, n int) []uint64 {
	return listOf(ctx, DeniedKey, n, maxAgeText, func(f string) (uint64, bool) {
		u, err := strconv.ParseUint(f, 10, 64)
		return u, err == nil && u <= limiter.MaxCost
	})
}

// agesOf reads the ages of a sidecar's recorded hits (AgeKey) for n
// descriptors: nil when there are none, or they do not parse or pass
// algorithm.MaxWindow (the hits are recorded all the same, at now).
func agesOf(ctx context.Context, n int) []int64 {
	return listOf(ctx, AgeKey, n, maxAgeText, func(f string) (int64, bool) {
		a, err := strconv.ParseInt(f, 10, 64)
		return a, err == nil && a >= 0 && a <= algorithm.MaxWindow
	})
}

// listOf reads metadata key as n comma-separated values, each at most
// maxText bytes on average and accepted by parse: nil when it is absent,
// repeated, too long, or any value is refused, or there are not n.
func listOf[T any](ctx context.Context, key string, n, maxText int, parse func(string) (T, bool)) []T {
	v := metadata.ValueFromIncomingContext(ctx, key)
	if len(v) != 1 || n == 0 || len(v[0]) > n*maxText {
		return nil
	}
	out := make([]T, 0, n)
	for f := range strings.SplitSeq(v[0], ",") {
		x, ok := parse(f)
		if !ok || len(out) == n {
			return nil
		}
		out = append(out, x)
	}
	if len(out) != n {
		return nil
	}
	return out
}

// maxAgeText bounds one age's text in AgeKey.
const maxAgeText = 20

// maxRateText bounds one rate's text in DemandKey.
const maxRateText = 32

func allowanceList(a *limiter.Answer) string {
	return statusList(a, func(b []byte, st *limiter.Status) []byte { return strconv.AppendFloat(b, st.Allowance, 'f', -1, 64) })
}

func holdList(a *limiter.Answer) string {
	return statusList(a, func(b []byte, st *limiter.Status) []byte { return strconv.AppendFloat(b, st.Hold, 'f', -1, 64) })
}

func retryList(a *limiter.Answer) string {
	return statusList(a, func(b []byte, st *limiter.Status) []byte {
		return strconv.AppendInt(b, st.RetryAfter.Microseconds(), 10)
	})
}

// statusList is the sidecar metadata form of one figure per status:
// comma-separated, in the descriptors' order.
func statusList(a *limiter.Answer, appendOne func([]byte, *limiter.Status) []byte) string {
	var b []byte
	for i := range a.Statuses {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendOne(b, &a.Statuses[i])
	}
	return string(b)
}

// grpcError is the one place errors become gRPC status codes.
func grpcError(err error) error {
	var bad *limiter.InvalidError
	switch {
	case errors.As(err, &bad):
		return status.Error(codes.InvalidArgument, bad.Error())
	case errors.Is(err, limiter.ErrLate):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, limiter.ErrUnavailable), errors.Is(err, limiter.ErrNoConfig):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}
