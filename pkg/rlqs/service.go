package rlqs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/peerauth"
)

// ReportInterval is how often Envoy reports: every 5 s, whatever its
// reporting_interval says (rlqs-notes §2). The service reads it as the
// longest wait for an Envoy's next report; Envoys that report more often
// (envoyproxy/envoy pull request 47104) are held to the same bounds, and
// from cold sooner (TestModelFleets, the cells reporting every second).
const ReportInterval = 5 * time.Second

// Defaults of Options.
const (
	DefaultTTL                 = 3 * ReportInterval
	DefaultMaxStreams          = 10_000
	DefaultMaxBucketsPerStream = 10_000
	DefaultMaxKeys             = 1_000_000
	DefaultAbandonAfter        = time.Minute
	DefaultIdleTimeout         = 4 * ReportInterval
)

// Decider records a report's allowed counts: limiter.Service. The service
// calls it from many streams at once: it must be safe for concurrent use.
type Decider interface {
	Decide(ctx context.Context, req limiter.Request, o limiter.DecideOptions) (*limiter.Answer, error)
}

// Authenticator names the caller of a stream, or says why it is not one
// the server knows: pkg/peerauth's, the sidecars' own. It must be safe for
// concurrent use.
type Authenticator interface {
	Authenticate(ctx context.Context) (name string, refusal peerauth.Refusal)
}

// Peers are the other server replicas' word on each limit's demand:
// global.FleetDemand. It must be safe for concurrent use.
type Peers interface {
	// Demand says, of each word's key, that this replica's Envoys ask
	// for Mine units a second and hold Handed of its rate, for ttl, and
	// fills in what the others said of theirs: all the words in as few
	// round trips as it can.
	Demand(ctx context.Context, ttl time.Duration, words []PeerWord) error
}

// PeerWord is one limit key's word between replicas (Peers). A plain
// value, safe to share between goroutines.
type PeerWord struct {
	Key                  string
	Mine, Handed         float64 // this replica's: demand, rate handed out
	Others, OthersHanded float64 // the others', summed
}

// Options configure a Service. Zero values take the defaults given. New
// copies them; what they name is shared and must be safe for concurrent
// use.
type Options struct {
	// Config is the descriptor config the buckets map onto. Required.
	Config func() *config.Config
	// Decider records the counts Envoys allowed on the limits' global
	// state, as a sidecar's hits are. Required.
	Decider Decider
	// Auth admits the streams' callers: as a record changes the global
	// state, a stream is opened only by a caller it names. Required.
	Auth Authenticator
	// TTL is how long an assignment holds without a new one, in whole
	// seconds, at least ReportInterval. Default DefaultTTL.
	TTL time.Duration
	// MaxStreams bounds the streams open at once, MaxBucketsPerStream the
	// buckets one stream may report, MaxKeys the limit keys whose demand
	// is tracked. Defaults DefaultMaxStreams, DefaultMaxBucketsPerStream,
	// DefaultMaxKeys.
	MaxStreams, MaxBucketsPerStream, MaxKeys int
	// AbandonAfter is how long a bucket reported with no requests is kept
	// before Envoy is told to drop it. Default DefaultAbandonAfter.
	AbandonAfter time.Duration
	// Peers, with several server replicas behind one fleet of Envoys,
	// says what the others serve of each limit (global.FleetDemand on
	// their Redis): each replica splits among its Envoys the part of a
	// limit its Envoys' demand is of all. Nil: this server alone.
	Peers Peers
	// IdleTimeout ends a stream that sends nothing for so long (Envoy
	// reports every ReportInterval). Default DefaultIdleTimeout.
	IdleTimeout time.Duration
	Now         func() time.Time
	Logger      *slog.Logger
	Registerer  prometheus.Registerer
}

// Service is the rate limit quota service. It is safe for concurrent use.
type Service struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	opts    Options
	fleet   *fleet
	m       *metrics
	streams atomic.Int64
	ids     atomic.Uint64
	buckets atomic.Int64 // across streams
	reports atomic.Int64
	lostLog rate.Sometimes // usage not recorded, logged at most every 10 s
}

// Stats are what a Service holds and has done, for the admin page. A
// plain value, safe to share between goroutines.
type Stats struct {
	Streams, Buckets, Keys int
	Reports                int64
}

// Stats are the service's figures now.
func (s *Service) Stats() Stats {
	return Stats{Streams: int(s.streams.Load()), Buckets: int(s.buckets.Load()), Keys: s.fleet.len(), Reports: s.reports.Load()}
}

// New returns a Service.
func New(opts Options) (*Service, error) {
	if opts.Config == nil || opts.Decider == nil || opts.Auth == nil {
		return nil, errors.New("rlqs: Config, Decider and Auth are required")
	}
	if opts.TTL == 0 {
		opts.TTL = DefaultTTL
	}
	if opts.TTL < ReportInterval || opts.TTL%time.Second != 0 {
		return nil, fmt.Errorf("rlqs: TTL %s must be whole seconds, at least %s (Envoy reads whole seconds)", opts.TTL, ReportInterval)
	}
	for _, d := range []struct {
		v *int
		d int
	}{{&opts.MaxStreams, DefaultMaxStreams}, {&opts.MaxBucketsPerStream, DefaultMaxBucketsPerStream}, {&opts.MaxKeys, DefaultMaxKeys}} {
		if *d.v <= 0 {
			*d.v = d.d
		}
	}
	if opts.AbandonAfter <= 0 {
		opts.AbandonAfter = DefaultAbandonAfter
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Service{opts: opts, fleet: newFleet(opts.MaxKeys), lostLog: rate.Sometimes{Interval: 10 * time.Second}}
	s.m = newMetrics(opts.Registerer, s)
	return s, nil
}

// StreamRateLimitQuotas serves one Envoy's stream: each report is
// recorded and answered with the assignments of its buckets.
func (s *Service) StreamRateLimitQuotas(st grpc.BidiStreamingServer[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]) error {
	ctx := st.Context()
	_, refusal := s.opts.Auth.Authenticate(ctx)
	if refusal != "" {
		s.m.refused.WithLabelValues(string(refusal)).Inc()
		return status.Errorf(codes.PermissionDenied, "rlqs: the caller is not one the server knows (%s): give Envoy's rlqs_server a token (initial_metadata authorization: Bearer ...) or a client certificate the server lists", refusal)
	}
	if s.streams.Add(1) > int64(s.opts.MaxStreams) {
		s.streams.Add(-1)
		s.m.refused.WithLabelValues("streams_full").Inc()
		return status.Errorf(codes.ResourceExhausted, "rlqs: %d streams open, the most this server takes", s.opts.MaxStreams)
	}
	ss := &stream{id: s.ids.Add(1), buckets: make(map[string]*bucket), pokes: make(chan string, maxPokes)}
	defer func() {
		s.streams.Add(-1)
		s.end(ss)
	}()
	msgs, errs := make(chan *rlqsv3.RateLimitQuotaUsageReports), make(chan error, 1)
	go func() {
		for {
			m, err := st.Recv()
			if err != nil {
				errs <- err
				return
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	idle := time.NewTimer(s.opts.IdleTimeout)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errs:
			if errors.Is(err, context.Canceled) || status.Code(err) == codes.Canceled {
				return nil
			}
			return err
		case <-idle.C:
			s.m.refused.WithLabelValues("idle").Inc()
			return status.Errorf(codes.DeadlineExceeded, "rlqs: no report for %s", s.opts.IdleTimeout)
		case key := <-ss.pokes:
			if resp := s.poked(ss, key); resp != nil {
				if err := st.Send(resp); err != nil {
					return err
				}
			}
		case m := <-msgs:
			idle.Reset(s.opts.IdleTimeout)
			resp, err := s.report(ctx, ss, m)
			if err != nil {
				return err
			}
			if len(resp.GetBucketAction()) > 0 {
				if err := st.Send(resp); err != nil {
					return err
				}
			}
		}
	}
}

// maxPokes bounds the pokes waiting on a stream.
const maxPokes = 1024

// end forgets a stream's buckets.
func (s *Service) end(ss *stream) {
	for _, b := range ss.buckets {
		if b.key != "" {
			s.fleet.leave(b.key, ss.id)
		}
	}
	s.buckets.Add(-int64(len(ss.buckets)))
}
