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
	_ "time/tzdata" // calendar limits: time zones whatever the image carries

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/sluicehq/sluice/internal/daemon/flagenv"
	"github.com/sluicehq/sluice/internal/daemon/serve"
	"github.com/sluicehq/sluice/pkg/console"
	"github.com/sluicehq/sluice/pkg/localtier"
	"github.com/sluicehq/sluice/pkg/peerauth"
	"github.com/sluicehq/sluice/pkg/server"
	"github.com/sluicehq/sluice/pkg/wire"
)

func main() { serve.Main("sluice localfilter", run) }

type options struct {
	serve.Flags
	tier                   serve.TierFlags
	upstream               string
	mode                   localtier.Mode
	fallbackShare          float64
	upstreamTimeout, retry time.Duration
	// TLS to the upstream.
	upstreamTLS                                               bool
	upstreamCA, upstreamCert, upstreamKey, upstreamServerName string
	// The token the servers know this sidecar by (their -sidecar-tokens).
	tokenFile      string
	tokenPlaintext bool
}

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("localfilter", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.Flags.Register(fs, ":9081", ":9080")
	fs.StringVar(&o.upstream, "upstream", "", "the global server's gRPC address, host:port, or several comma-separated (round robin) (required)")
	o.mode = localtier.Async
	fs.Var(&o.mode, "mode", "sync (the upstream decides every request that passes locally) or async (admit from memory, send hits in batches)")
	fs.Float64Var(&o.fallbackShare, "fallback-share", localtier.DefaultFallbackShare, "while the upstream is unavailable, share of the local fraction allowed, in (0, 1]")
	o.tier.Register(fs)
	fs.DurationVar(&o.upstreamTimeout, "upstream-timeout", localtier.DefaultTimeout, "bound on each upstream call")
	fs.DurationVar(&o.retry, "upstream-retry", localtier.DefaultRetryInterval, "after a failed upstream call, how long to decide locally before trying the upstream again (one probe at a time)")
	fs.BoolVar(&o.upstreamTLS, "upstream-tls", false, "TLS to the upstream, verified against the system's roots or -upstream-tls-ca (implied by any -upstream-tls-* flag)")
	fs.StringVar(&o.upstreamCA, "upstream-tls-ca", "", "PEM CAs that verify the upstream's certificate")
	fs.StringVar(&o.upstreamCert, "upstream-tls-cert", "", "PEM client certificate presented to the upstream (mTLS; with -upstream-tls-key)")
	fs.StringVar(&o.upstreamKey, "upstream-tls-key", "", "PEM private key of -upstream-tls-cert")
	fs.StringVar(&o.upstreamServerName, "upstream-tls-server-name", "", "name the upstream's certificate must carry (default: the host of -upstream)")
	fs.StringVar(&o.tokenFile, "upstream-token-file", "", "file holding the token the servers know this sidecar by (a line of their -sidecar-tokens names it), sent with every upstream call; read again when it changes")
	fs.BoolVar(&o.tokenPlaintext, "upstream-token-plaintext", false, "send -upstream-token-file's token without -upstream-tls, where anyone on the path can read it: only on a network you trust")
	if err := o.Flags.Parse(fs, args, getenv); err != nil {
		return nil, err
	}
	errs := []error{o.Flags.Validate(), o.tier.Validate()}
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("%d unexpected arguments after the flags (not shown: one may be part of a password; quote a value with spaces)", fs.NArg()))
	}
	if o.upstream == "" {
		errs = append(errs, errors.New("-upstream is required (the global server's gRPC address)"))
	}
	if o.fallbackShare <= 0 || o.fallbackShare > 1 {
		errs = append(errs, errors.New("-fallback-share must be in (0, 1]"))
	}
	if o.upstreamTimeout <= 0 || o.retry <= 0 {
		errs = append(errs, errors.New("-upstream-timeout and -upstream-retry must be positive"))
	}
	if (o.upstreamCert == "") != (o.upstreamKey == "") {
		errs = append(errs, errors.New("-upstream-tls-cert and -upstream-tls-key go together"))
	}
	o.upstreamTLS = o.upstreamTLS || o.upstreamCA != "" || o.upstreamCert != "" || o.upstreamServerName != ""
	if o.tokenFile != "" && !o.upstreamTLS && !o.tokenPlaintext {
		errs = append(errs, errors.New("-upstream-token-file is sent only over TLS: give -upstream-tls (or -upstream-tls-ca), or -upstream-token-plaintext on a network you trust"))
	}
	return o, errors.Join(errs...)
}

// upstreamCredentials are the dial options every upstream connection
// shares: TLS when o asks for it, the token when it names one (read
// once, however many connections).
func upstreamCredentials(o *options) ([]grpc.DialOption, error) {
	creds := insecure.NewCredentials()
	if o.upstreamTLS {
		tc, err := serve.ClientTLS("-upstream-tls", o.upstreamCA, o.upstreamCert, o.upstreamKey, o.upstreamServerName)
		if err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(tc)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if o.tokenFile != "" {
		tok, err := peerauth.NewTokenCredentials(o.tokenFile, o.tokenPlaintext)
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.WithPerRPCCredentials(tok))
	}
	return opts, nil
}

// dialUpstream opens one long-lived HTTP/2 connection per upstream
// address in addrs, round robin across them, with the credentials opts
// carry (upstreamCredentials).
func dialUpstream(opts []grpc.DialOption, addrs []string) (*grpc.ClientConn, error) {
	r := manual.NewBuilderWithScheme("sluice-upstream")
	var state resolver.State
	for _, a := range addrs {
		// The address is also the TLS server name unless one is given.
		state.Addresses = append(state.Addresses, resolver.Address{Addr: a, ServerName: serve.HostOf(a)})
	}
	r.InitialState(state)
	return grpc.NewClient(r.Scheme()+":///upstream", append(opts,
		grpc.WithResolvers(r),
		// Values that are not UTF-8 are forwarded as Envoy sent them.
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(wire.Codec{})),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 5 * time.Second}),
		// Reconnect within a quarter of a second of the upstream's return,
		// however long it was away (gRPC's default backoff grows to two
		// minutes), so that allowances are back within a second.
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{
			BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 250 * time.Millisecond,
		}, MinConnectTimeout: time.Second}),
	)...)
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
	addrs := flagenv.List(o.upstream)
	dial, err := upstreamCredentials(o)
	if err != nil {
		return fmt.Errorf("-upstream: %w", err)
	}
	conn, err := dialUpstream(dial, addrs)
	if err != nil {
		return fmt.Errorf("-upstream: %w", err)
	}
	defer conn.Close()
	// With several servers, one more connection to each, for the flushes
	// (flushUpstream).
	var each []*grpc.ClientConn
	if len(addrs) > 1 {
		for _, a := range addrs {
			c, err := dialUpstream(dial, []string{a})
			if err != nil {
				return fmt.Errorf("-upstream: %w", err)
			}
			defer c.Close()
			each = append(each, c)
		}
	}
	sopts, err := o.ServerOptions(log, reg)
	if err != nil {
		return err
	}
	sopts.Sidecar = true
	parts, err := server.NewParts(sopts)
	if err != nil {
		return err
	}
	to := o.tier.Options()
	to.Upstream, to.Mode, to.FallbackShare = newFlushUpstream(conn, each), o.mode, o.fallbackShare
	to.Timeout, to.RetryInterval, to.Cache, to.Logger, to.Registerer = o.upstreamTimeout, o.retry, parts.Cache, log, reg
	tier, err := localtier.New(to)
	if err != nil {
		parts.Close()
		return err
	}
	srv, err := server.New(parts, tier)
	if err != nil {
		tier.Close()
		return err
	}
	defer srv.Close()
	defer tier.Close()
	admin := srv.Admin(reg, server.AdminOptions{
		Daemon: "sluice localfilter",
		Readiness: func() (string, bool) {
			// The upstream takes this sidecar's hits for a client's: they
			// are lost when they do not fit, so say so where it is seen.
			if r := tier.Refused(); r != "" {
				return "the upstream does not know this sidecar (" + r + "): its recorded hits are decided as ordinary requests; see -upstream-token-file", false
			}
			// Ready either way: without the upstream the sidecar decides locally.
			if !tier.Healthy() {
				return "upstream unavailable (deciding locally at the fallback share)", true
			}
			return "upstream reachable", true
		},
		Sections: func() []console.Section {
			st := tier.Status()
			st.Fields = append([]console.Field{{Name: "upstream address", Value: o.upstream}}, st.Fields...)
			return []console.Section{st}
		},
	})
	err = o.Serve(ctx, log, srv.Service, admin, func(g, h net.Addr) {
		log.Info("sluice localfilter listening", "grpc_addr", g.String(), "http_addr", h.String(),
			"upstream", o.upstream, "mode", o.mode.String(), "local_fraction", o.tier.Fraction, "config_version", srv.Config().Current().Version())
	})
	tier.Close() // flush the hits admitted so far
	if err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}
