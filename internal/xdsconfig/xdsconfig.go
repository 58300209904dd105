// Package xdsconfig is a reload.Source that receives descriptor configs
// over xDS, as Envoy Gateway serves them to envoyproxy/ratelimit: an
// aggregated discovery stream (state of the world) of
// type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig
// resources, one per domain. Each response replaces the whole config at
// once; one that does not build (a bad limit, a domain twice) is NACKed
// with the reason and the last good config keeps serving. A broken stream
// is dialled again with backoff, and the server's state of the world is
// taken afresh.
package xdsconfig

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"gopkg.in/yaml.v3"

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
	// Backoff bounds the wait before dialling again: from Min, doubling,
	// to Max, with jitter. Defaults 250ms and 10s.
	BackoffMin, BackoffMax time.Duration
	Logger                 *slog.Logger
}

// Source is a reload.Source on an xDS stream.
type Source struct{ opts Options }

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
		s.opts.Logger.Warn("xDS config stream ended; dialling again", "server", s.opts.Server, "error", errString(err), "in", wait.String())
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

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
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
		cfg, err := build(resp)
		from := s.Name()
		if err != nil {
			w.Reject(err, from)
			if err := client.Nack(err.Error()); err != nil {
				return got, err
			}
			continue
		}
		w.Apply(cfg, from)
		if err := client.Ack(); err != nil {
			return got, err
		}
	}
}

// build makes one config of a response's resources: each is written as the
// YAML file the reference would read, named after the resource, and the
// files are parsed together, so xDS and files follow the same rules.
func build(resp *sotw.Response) (*config.Config, error) {
	files := make(map[string][]byte, len(resp.Resources))
	for _, a := range resp.Resources {
		var rc rlsconf.RateLimitConfig
		if err := a.UnmarshalTo(&rc); err != nil {
			return nil, fmt.Errorf("resource %s: %w", a.GetTypeUrl(), err)
		}
		name := rc.GetName()
		if name == "" {
			name = rc.GetDomain()
		}
		name = "xds:" + strings.ReplaceAll(name, "/", "_") + ".yaml"
		if _, dup := files[name]; dup {
			return nil, fmt.Errorf("two RateLimitConfigs named %q", rc.GetName())
		}
		b, err := yaml.Marshal(fileOf(&rc))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		files[name] = b
	}
	if len(files) == 0 {
		return nil, errors.New("no RateLimitConfig resources")
	}
	return config.Parse(files)
}

// fileOf is rc as the reference's YAML: the same fields, the same names.
func fileOf(rc *rlsconf.RateLimitConfig) map[string]any {
	return map[string]any{"domain": rc.GetDomain(), "descriptors": descriptorsOf(rc.GetDescriptors())}
}

func descriptorsOf(ds []*rlsconf.RateLimitDescriptor) []any {
	out := make([]any, 0, len(ds))
	for _, d := range ds {
		m := map[string]any{"key": d.GetKey()}
		if d.GetValue() != "" {
			m["value"] = d.GetValue()
		}
		if d.GetShadowMode() {
			m["shadow_mode"] = true
		}
		if d.GetDetailedMetric() {
			m["detailed_metric"] = true
		}
		if p := d.GetRateLimit(); p != nil {
			rl := map[string]any{}
			if p.GetUnlimited() {
				rl["unlimited"] = true
			} else {
				rl["unit"] = strings.ToLower(p.GetUnit().String())
				rl["requests_per_unit"] = p.GetRequestsPerUnit()
			}
			if p.GetName() != "" {
				rl["name"] = p.GetName()
			}
			var replaces []any
			for _, r := range p.GetReplaces() {
				replaces = append(replaces, map[string]any{"name": r.GetName()})
			}
			if len(replaces) > 0 {
				rl["replaces"] = replaces
			}
			m["rate_limit"] = rl
		}
		if len(d.GetDescriptors()) > 0 {
			m["descriptors"] = descriptorsOf(d.GetDescriptors())
		}
		out = append(out, m)
	}
	return out
}
