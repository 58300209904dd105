// Package xdsconfig is a reload.Source that receives descriptor configs
// over xDS, as Envoy Gateway serves them to envoyproxy/ratelimit: an
// aggregated discovery stream (state of the world) of
// type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig
// resources, one per domain. Each response replaces the whole config at
// once; one that does not build (a bad limit, a domain twice) is NACKed
// with the reason and the last good config keeps serving. A broken stream
// is dialled again with backoff, and the server's state of the world is
// taken afresh.
//
// Resources are held to the bounds of config files (pkg/config's MaxFiles,
// MaxDepth, MaxNodes, MaxScalarBytes and SizeBounds) on the protobuf,
// before they are converted, and converted to the YAML tree a file would
// give, never to its text. A response refused once is not built again:
// go-control-plane answers a NACK with its snapshot at once, so the same
// refused response comes back until the server's config changes; it is
// NACKed again with the same reason, after a wait that doubles from
// BackoffMin to BackoffMax so that the exchange does not spin.
package xdsconfig

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/reload"
)

// Options configure a Source. Zero values take the defaults given.
type Options struct {
	// Server is the xDS server's address, host:port. Required.
	Server string
	// NodeID names this process to the server. Default "default".
	NodeID string
	// TLS, if set, secures the stream (with a client certificate for mTLS).
	TLS *tls.Config
	// Backoff bounds the wait before dialling again, and before NACKing a
	// refused response sent again: from Min, doubling, to Max, with
	// jitter. Defaults 250ms and 10s.
	BackoffMin, BackoffMax time.Duration
	// Sizes bound each resource (MaxFileBytes) and a response's resources
	// together (MaxTotalBytes), as they bound config files; zero values
	// mean config.DefaultMaxFileBytes and config.DefaultMaxTotalBytes.
	// gRPC refuses a response over 4 MiB whatever these say.
	Sizes  config.SizeBounds
	Logger *slog.Logger
}

// Source is a reload.Source on an xDS stream. Its Run is called once;
// the Source is not otherwise used concurrently.
type Source struct {
	opts Options
	// refused is the last response refused: its digest and why. Only
	// Run's goroutine touches it.
	refused *refusal
}

// refusal is a refused response, answered again without being rebuilt.
type refusal struct {
	digest  [sha256.Size]byte
	err     error
	repeats int // times it came back since it was refused
}

var _ reload.Source = (*Source)(nil)

// New returns a Source.
func New(o Options) (*Source, error) {
	if o.Server == "" {
		return nil, errors.New("xdsconfig: Server is required")
	}
	if o.NodeID == "" {
		o.NodeID = "default"
	}
	if o.BackoffMin <= 0 {
		o.BackoffMin = 250 * time.Millisecond
	}
	if o.BackoffMax <= 0 {
		o.BackoffMax = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Source{opts: o}, nil
}

// Name is where its configs come from.
func (s *Source) Name() string { return "xds://" + s.opts.Server }

// Run streams configs into w until ctx ends.
func (s *Source) Run(ctx context.Context, w *reload.Watcher) error {
	wait := s.opts.BackoffMin
	for ctx.Err() == nil {
		got, err := s.stream(ctx, w)
		if ctx.Err() != nil {
			return nil
		}
		if got {
			wait = s.opts.BackoffMin // it worked for a while: start over
		}
		s.opts.Logger.Warn("xDS config stream ended; dialling again", "server", s.opts.Server, slog.Any("error", err), "in", wait.String())
		jittered := time.Duration(float64(wait) * (0.8 + 0.4*rand.Float64()))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(jittered):
		}
		wait = min(2*wait, s.opts.BackoffMax)
	}
	return nil
}

// stream runs one stream: it reports whether a response came.
func (s *Source) stream(ctx context.Context, w *reload.Watcher) (bool, error) {
	creds := insecure.NewCredentials()
	if s.opts.TLS != nil {
		creds = credentials.NewTLS(s.opts.TLS)
	}
	conn, err := grpc.NewClient(s.opts.Server, grpc.WithTransportCredentials(creds))
	if err != nil {
		return false, err
	}
	defer conn.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := sotw.NewADSClient(sctx, &corev3.Node{Id: s.opts.NodeID}, resource.RateLimitConfigType)
	if err := client.InitConnect(conn); err != nil {
		return false, err
	}
	got := false
	for {
		resp, err := client.Fetch()
		if err != nil {
			return got, err
		}
		got = true
		d := digest(resp.Resources)
		if r := s.refused; r != nil && r.digest == d {
			// Sent again after the NACK: the same answer, built once.
			if !s.pause(ctx, r) {
				return got, ctx.Err()
			}
			if err := client.Nack(r.err.Error()); err != nil {
				return got, err
			}
			continue
		}
		cfg, err := s.build(resp.Resources)
		from := s.Name()
		if err != nil {
			s.refused = &refusal{digest: d, err: err}
			w.Reject(err, from)
			if err := client.Nack(err.Error()); err != nil {
				return got, err
			}
			continue
		}
		s.refused = nil
		w.Apply(cfg, from)
		if err := client.Ack(); err != nil {
			return got, err
		}
	}
}

// pause waits before a refused response is NACKed again: BackoffMin
// doubling to BackoffMax, with jitter. It reports false if ctx ended.
func (s *Source) pause(ctx context.Context, r *refusal) bool {
	wait := s.opts.BackoffMin
	for i := 0; i < r.repeats && wait < s.opts.BackoffMax; i++ {
		wait *= 2
	}
	wait = min(wait, s.opts.BackoffMax)
	r.repeats++
	t := time.NewTimer(time.Duration(float64(wait) * (0.8 + 0.4*rand.Float64())))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// digest identifies a response by its resources' types and contents, in
// any order (a snapshot's resources are a map: their order changes from
// one response to the next). The same digest is the same config.
func digest(resources []*anypb.Any) [sha256.Size]byte {
	each := make([][sha256.Size]byte, len(resources))
	var n [binary.MaxVarintLen64]byte
	for i, a := range resources {
		h := sha256.New()
		for _, b := range [][]byte{[]byte(a.GetTypeUrl()), a.GetValue()} {
			h.Write(n[:binary.PutUvarint(n[:], uint64(len(b)))])
			h.Write(b)
		}
		h.Sum(each[i][:0])
	}
	slices.SortFunc(each, func(a, b [sha256.Size]byte) int { return bytes.Compare(a[:], b[:]) })
	h := sha256.New()
	for _, d := range each {
		h.Write(d[:])
	}
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}

// build makes one config of a response's resources: each is checked on
// the protobuf, then converted to the YAML tree of the file the reference
// would read, named after the resource, and the trees are parsed
// together, so that xDS and files follow the same rules and bounds.
func (s *Source) build(resources []*anypb.Any) (*config.Config, error) {
	checked, err := check(resources, s.opts.Sizes)
	if err != nil {
		return nil, err
	}
	docs := make([]config.Document, len(checked))
	for i, r := range checked {
		docs[i] = document(r)
	}
	return config.ParseDocuments(docs)
}
