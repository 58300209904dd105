// Command localfilter is sluice's per-proxy sidecar: the same
// envoy.service.ratelimit.v3 RateLimitService as the server, answering
// from memory first (flag cache, local token buckets) in front of an
// upstream sluice server that applies the precise limit, synchronously
// (-mode sync) or with batched asynchronous hits (-mode async). See
// pkg/localtier for the tiers and the async overshoot bound.
//
// Every flag can also be set from the environment: -upstream from
// SLUICE_UPSTREAM, and so on.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/sluicehq/sluice/internal/flagenv"
	"github.com/sluicehq/sluice/internal/serve"
	"github.com/sluicehq/sluice/pkg/flagcache"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/localtier"
	"github.com/sluicehq/sluice/pkg/rls"
	"github.com/sluicehq/sluice/pkg/wire"
)

func main() { serve.Main("sluice localfilter", run) }

type options struct {
	serve.Flags
	upstream, mode                        string
	fraction, fallbackShare               float64
	flushInterval, upstreamTimeout, retry time.Duration
	batchSize, maxPending, localKeys      int
	maxPendingBytes                       int64
	// TLS to the upstream.
	upstreamTLS                                               bool
	upstreamCA, upstreamCert, upstreamKey, upstreamServerName string
}

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("localfilter", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.Flags.Register(fs, ":9081", ":9080")
	fs.StringVar(&o.upstream, "upstream", "", "the global server's gRPC address, host:port, or several comma-separated (round robin) (required)")
	fs.StringVar(&o.mode, "mode", "async", "sync (the upstream decides every request that passes locally) or async (admit from memory, send hits in batches)")
	fs.Float64Var(&o.fraction, "local-fraction", 1.0, "share of each limit the local bucket allows, in (0, 1]; 1 never rejects what the global limit admits")
	fs.Float64Var(&o.fallbackShare, "fallback-share", 0.5, "while the upstream is unavailable, share of the local fraction allowed, in (0, 1]")
	fs.DurationVar(&o.flushInterval, "flush-interval", 10*time.Millisecond, "async: how often admitted hits are sent upstream")
	fs.IntVar(&o.batchSize, "batch-size", 256, "async: send early once this many keys have pending hits")
	fs.IntVar(&o.maxPending, "max-pending", 100_000, "keys with admitted hits not yet recorded upstream (async, and either mode while the upstream is away); beyond, hits are dropped and counted")
	fs.Int64Var(&o.maxPendingBytes, "max-pending-bytes", 64<<20, "bytes those keys may hold (long values are held by digest); beyond, hits are dropped and counted")
	fs.DurationVar(&o.upstreamTimeout, "upstream-timeout", 20*time.Millisecond, "bound on each upstream call")
	fs.DurationVar(&o.retry, "upstream-retry", time.Second, "after a failed upstream call, how long to decide locally before trying the upstream again (one probe at a time)")
	fs.IntVar(&o.localKeys, "local-max-keys", 1<<20, "keys the local buckets hold")
	fs.BoolVar(&o.upstreamTLS, "upstream-tls", false, "TLS to the upstream, verified against the system's roots or -upstream-tls-ca (implied by any -upstream-tls-* flag)")
	fs.StringVar(&o.upstreamCA, "upstream-tls-ca", "", "PEM CAs that verify the upstream's certificate")
	fs.StringVar(&o.upstreamCert, "upstream-tls-cert", "", "PEM client certificate presented to the upstream (mTLS; with -upstream-tls-key)")
	fs.StringVar(&o.upstreamKey, "upstream-tls-key", "", "PEM private key of -upstream-tls-cert")
	fs.StringVar(&o.upstreamServerName, "upstream-tls-server-name", "", "name the upstream's certificate must carry (default: the host of -upstream)")
	if err := flagenv.Parse(fs, args, "SLUICE_", getenv); err != nil {
		return nil, err
	}
	errs := []error{o.Flags.Validate()}
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments: %q", fs.Args()))
	}
	if o.upstream == "" {
		errs = append(errs, errors.New("-upstream is required (the global server's gRPC address)"))
	}
	if _, err := localtier.ParseMode(o.mode); err != nil {
		errs = append(errs, fmt.Errorf("-mode: %w", err))
	}
	if o.fraction <= 0 || o.fraction > 1 || o.fallbackShare <= 0 || o.fallbackShare > 1 {
		errs = append(errs, errors.New("-local-fraction and -fallback-share must be in (0, 1]"))
	}
	if o.flushInterval <= 0 || o.upstreamTimeout <= 0 || o.retry <= 0 || o.batchSize <= 0 || o.maxPending <= 0 || o.maxPendingBytes <= 0 || o.localKeys <= 0 {
		errs = append(errs, errors.New("-flush-interval, -upstream-timeout, -upstream-retry, -batch-size, -max-pending, -max-pending-bytes and -local-max-keys must be positive"))
	}
	if (o.upstreamCert == "") != (o.upstreamKey == "") {
		errs = append(errs, errors.New("-upstream-tls-cert and -upstream-tls-key go together"))
	}
	o.upstreamTLS = o.upstreamTLS || o.upstreamCA != "" || o.upstreamCert != "" || o.upstreamServerName != ""
	return o, errors.Join(errs...)
}

// dialUpstream opens one long-lived HTTP/2 connection per upstream
// address, round robin across them, with TLS when o asks for it.
func dialUpstream(o *options) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if o.upstreamTLS {
		tc, err := serve.ClientTLS("-upstream-tls", o.upstreamCA, o.upstreamCert, o.upstreamKey, o.upstreamServerName)
		if err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(tc)
	}
	r := manual.NewBuilderWithScheme("sluice-upstream")
	var state resolver.State
	for _, a := range flagenv.List(o.upstream) {
		// The address is also the TLS server name unless one is given.
		state.Addresses = append(state.Addresses, resolver.Address{Addr: a, ServerName: hostOf(a)})
	}
	r.InitialState(state)
	return grpc.NewClient(r.Scheme()+":///upstream",
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(creds),
		// Values that are not UTF-8 are forwarded as Envoy sent them.
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(wire.Codec{})),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 5 * time.Second}),
		// Reconnect within a second of the upstream's return, however long
		// it was away (gRPC's default backoff grows to two minutes).
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{
			BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second,
		}, MinConnectTimeout: time.Second}),
	)
}

// hostOf is the host of a host:port address.
func hostOf(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	o, err := parseFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	log, err := o.Logger(stderr)
	if err != nil {
		return err
	}
	reg := serve.Registry()
	conn, err := dialUpstream(o)
	if err != nil {
		return fmt.Errorf("-upstream: %w", err)
	}
	defer conn.Close()
	mode, _ := localtier.ParseMode(o.mode)
	var tier *localtier.Tier
	srv, err := rls.NewServer(rls.ServerOptions{
		Config: o.Config, CacheSize: o.ServiceCacheSize(), KeyPrefix: o.KeyPrefix, LegacyHeaders: o.LegacyHeaders, Logger: log, Registerer: reg,
		Decider: func(flags *flagcache.OverLimit) (limiter.Decider, error) {
			t, err := localtier.New(localtier.Options{
				Upstream: rlsv3.NewRateLimitServiceClient(conn), Mode: mode, Fraction: o.fraction, FallbackShare: o.fallbackShare,
				Timeout: o.upstreamTimeout, RetryInterval: o.retry, FlushInterval: o.flushInterval, BatchSize: o.batchSize,
				MaxPending: o.maxPending, MaxPendingBytes: o.maxPendingBytes, MaxKeys: o.localKeys, Cache: flags, Logger: log, Registerer: reg,
			})
			tier = t
			return t, err
		},
	})
	if err != nil {
		if tier != nil {
			tier.Close()
		}
		return err
	}
	defer srv.Close()
	defer tier.Close()
	admin := srv.Admin(reg, func() (string, bool) {
		// Ready either way: without the upstream the sidecar decides locally.
		if !tier.Healthy() {
			return "upstream unavailable (deciding locally at the fallback share)", true
		}
		return "upstream reachable", true
	})
	err = o.Serve(ctx, log, srv.Service, admin, func(g, h net.Addr) {
		log.Info("sluice localfilter listening", "grpc_addr", g.String(), "http_addr", h.String(),
			"upstream", o.upstream, "mode", mode.String(), "local_fraction", o.fraction, "config_version", srv.Config().Current().Version())
	})
	tier.Close() // flush the hits admitted so far
	if err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}
