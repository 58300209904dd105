package rls

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/share"
)

// Service implements envoy.service.ratelimit.v3.RateLimitService on the
// decision core. It is safe for concurrent use.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	core    *limiter.Service
	limits  config.LimitMemo[*rlsv3.RateLimitResponse_RateLimit]
	dynamic bool // WithDynamicMetadata
}

// ServiceOption sets an optional behaviour of a Service. Options are
// functions without state of their own, safe to share between goroutines.
type ServiceOption func(*Service)

// WithDynamicMetadata adds to every answer to Envoy the dynamic metadata
// the reference's RESPONSE_DYNAMIC_METADATA setting adds (dynamicMetadata):
// the request's domain and descriptors, and the configured metadata of the
// descriptors that passed.
func WithDynamicMetadata() ServiceOption { return func(s *Service) { s.dynamic = true } }

// NewService serves core as Envoy's RateLimitService.
func NewService(core *limiter.Service, opts ...ServiceOption) *Service {
	s := &Service{core: core}
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
	// exceed what is left (the state goes into debt, within one capacity
	// of the limit), and a status is OVER_LIMIT when its limit is used up.
	// Unless the server's -record-clients says otherwise, the marker is
	// honoured from any caller that reaches the gRPC port (Envoy itself
	// never sets it): keep that port reachable only by Envoy and sidecars.
	SidecarRecord = "record"
	// LimitPathKey is request metadata a sidecar sends with recorded hits:
	// per descriptor, in order, the path of the configured limit it matched
	// ("" for none): limiter.DecideOptions.Paths.
	LimitPathKey = "x-sluice-limit-path-bin"
	// SidecarIDKey, IntervalKey and DemandKey are request metadata an async
	// sidecar sends with recorded hits (pkg/share): its name, how often it
	// reports (µs), and per descriptor, in order, the units it was asked
	// for per second since it last reported the key, comma-separated.
	SidecarIDKey = "x-sluice-sidecar-id"
	IntervalKey  = "x-sluice-flush-interval-us"
	DemandKey    = "x-sluice-demand"
	// AllowanceKey is the response header metadata answering them: per
	// descriptor, the units the sidecar may admit for the key until it
	// reports again, or -1 for no allowance (decide as usual).
	AllowanceKey = "x-sluice-allowance"
	// RetryAfterKey is the response header metadata answering a sidecar:
	// per descriptor, the µs until a retry can succeed (0 when admitted or
	// unlimited), comma-separated, so its flag cache can hold each key for
	// exactly as long as the store would reject it.
	RetryAfterKey = "x-sluice-retry-after-us"
)

// ShouldRateLimit answers one request from Envoy (or a sluice sidecar).
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if err := checkWire(req); err != nil {
		return nil, grpcError(err)
	}
	sidecar := sidecarMode(ctx)
	o := limiter.DecideOptions{Record: sidecar == SidecarRecord, Content: sidecar == ""}
	if o.Record {
		o.Paths = metadata.ValueFromIncomingContext(ctx, LimitPathKey)
		o.Demand = demandOf(ctx, len(req.GetDescriptors()))
	}
	a, err := s.core.Decide(ctx, view{req}, o)
	if err != nil {
		return nil, grpcError(err)
	}
	if sidecar != "" {
		md := metadata.Pairs(RetryAfterKey, retryList(a))
		if o.Demand != nil {
			md.Append(AllowanceKey, allowanceList(a))
		}
		grpc.SetHeader(ctx, md)
	}
	resp := s.reply(a)
	if s.dynamic && sidecar == "" {
		resp.DynamicMetadata = dynamicMetadata(req, a)
	}
	return resp, nil
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
// bounds (the hits are recorded all the same, without allowances).
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
		if err != nil || len(d.Rates) == n {
			return nil
		}
		d.Rates = append(d.Rates, r)
	}
	if len(d.Rates) != n || !(share.Report{Sidecar: d.Sidecar, Interval: d.Interval}).Valid() {
		return nil
	}
	return d
}

// maxRateText bounds one rate's text in DemandKey.
const maxRateText = 32

func allowanceList(a *limiter.Answer) string {
	return statusList(a, func(b []byte, st *limiter.Status) []byte { return strconv.AppendFloat(b, st.Allowance, 'f', -1, 64) })
}

func retryList(a *limiter.Answer) string {
	return statusList(a, func(b []byte, st *limiter.Status) []byte { return strconv.AppendInt(b, st.RetryAfter, 10) })
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
	case errors.Is(err, limiter.ErrUnavailable), errors.Is(err, limiter.ErrNoConfig):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, limiter.ErrRecordDenied):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}
