// Command loadgen drives an Envoy RateLimitService (ShouldRateLimit over
// gRPC) with a bounded load and reports throughput, answers, errors, latency
// quantiles and, optionally, Redis work per request. With -serve-noop it is
// instead the do-nothing RLS server that measures the transport's ceiling.
//
// See README.md beside this file, and -h.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/daemon/serve"
	"github.com/sluicehq/sluice/internal/tools/loadgen"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // the run could not start or be measured
	exitUsage = 2
)

// config is everything the flags say.
type config struct {
	opts      loadgen.Options
	dist      string
	json      bool
	serveNoop string
	// gc is the collector's setting, the daemons' flags and defaults: the
	// do-nothing handler's ceiling is measured on the daemons' terms, and
	// the load generator spends as little of its core on collecting.
	gc serve.GCFlags
}

func newFlagSet(cfg *config, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage:
  loadgen -target 127.0.0.1:8081 [flags]    drive an RLS server and report
  loadgen -serve-noop 127.0.0.1:PORT        serve the do-nothing RLS handler

Targets must be loopback addresses unless -allow-remote. Flags:
`)
		fs.PrintDefaults()
	}
	o := &cfg.opts
	fs.StringVar(&o.Target, "target", "", "RLS server `host:port` to drive (loopback only unless -allow-remote)")
	fs.IntVar(&o.Conns, "conns", 1, fmt.Sprintf("gRPC connections (separate ClientConns); caller i uses connection i mod N (1..%d, ≤ -concurrency)", loadgen.MaxConns))
	fs.IntVar(&o.Concurrency, "concurrency", 1, fmt.Sprintf("callers, each with one request in flight (1..%d)", loadgen.MaxConcurrency))
	fs.DurationVar(&o.Duration, "duration", 10*time.Second, fmt.Sprintf("length of the measured phase (at most %v)", loadgen.MaxDuration))
	fs.Int64Var(&o.Requests, "requests", 0, "stop the measured phase after N requests too (0: time bound only)")
	fs.Float64Var(&o.Rate, "rate", 0, "requests/s of all callers together on a fixed schedule (open loop; latency from each request's intended send time); 0: closed loop")
	fs.DurationVar(&o.Warmup, "warmup", 0, "run the same load this long first, not measured")
	fs.DurationVar(&o.Timeout, "timeout", time.Second, "per-request deadline (0: none)")
	fs.StringVar(&o.Domain, "domain", "loadgen", "rate-limit domain of every request")
	fs.StringVar(&o.Descriptors, "descriptors", "remote_address=client-%d", "descriptor template: descriptors separated by ';', each key=value entries separated by ','; %d is the key index, %% a '%'")
	fs.IntVar(&o.Keys, "keys", 1, "key space: %d takes values 0..N-1")
	fs.StringVar(&cfg.dist, "dist", string(loadgen.Uniform), "key choice: uniform or zipf (index 0 hottest)")
	fs.Float64Var(&o.ZipfS, "zipf-s", 1.1, "zipf exponent s (> 1): P(k) ∝ (1+k)^-s")
	fs.Uint64Var(&o.Seed, "seed", 1, "seed for key choice (caller i draws from PCG(seed, i)): same seed, same keys per caller")
	fs.IntVar(&o.CacheKeys, "cache-keys", loadgen.DefaultCacheKeys, "prebuild requests for the first N key indexes; higher indexes are built per request")
	fs.StringVar(&o.RedisAddr, "redis-addr", "", "Redis `host:port` to sample (INFO) before and after the measured phase; reports scripts, commands and read events per request")
	fs.StringVar(&o.MetricsURL, "metrics-url", "", "the server's Prometheus `url` (http://127.0.0.1:8080/metrics): its "+loadgen.RoundTripsMetric+" is sampled around the measured phase, Redis round trips as its go-redis hook counts them")
	fs.Func("cpu-pids", "comma-separated `pids` of server-side processes whose CPU time per request is reported (Linux)", pidList(&o.CPUPids))
	fs.Func("central-pids", "comma-separated `pids` of the central service behind a hybrid tier (servers, Redis): their CPU time per decided request is reported as its central cost", pidList(&o.CentralPids))
	fs.StringVar(&o.TierMetricsURL, "tier-metrics-url", "", "a hybrid tier's Prometheus `url` (a sidecar's, or a cached-mode server's): a run in which it decided anything without the central state (fallback, shed, failure mode, dropped hits, upstream marked down) has failed")
	fs.StringVar(&o.Label, "label", "", "a name for the run, kept in its result (benchmark scripts)")
	fs.BoolVar(&o.AllowRemote, "allow-remote", false, "allow a non-loopback -target or -redis-addr (forbidden by this machine's policy)")
	fs.BoolVar(&cfg.json, "json", false, "print the result as one JSON object on stdout")
	fs.StringVar(&cfg.serveNoop, "serve-noop", "", "serve the do-nothing RLS handler on `addr` (e.g. 127.0.0.1:9999) until interrupted, instead of driving a target")
	cfg.gc.Register(fs) // -gc-percent, -memory-limit: as the daemons'
	fs.Func("hits", "`N`: hits_addend of every request (0: unset, which servers read as 1)", func(v string) error {
		n, err := strconv.ParseUint(v, 10, 32)
		o.HitsAddend = uint32(n)
		return err
	})
	return fs
}

// pidList parses a comma-separated list of pids into dst.
func pidList(dst *[]int) func(string) error {
	return func(v string) error {
		for _, f := range strings.Split(v, ",") {
			pid, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || pid <= 0 {
				return fmt.Errorf("pid %q", f)
			}
			*dst = append(*dst, pid)
		}
		return nil
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var cfg config
	fs := newFlagSet(&cfg, stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "loadgen: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	cfg.opts.Dist = loadgen.Distribution(cfg.dist)
	if err := cfg.gc.Validate(); err != nil {
		fmt.Fprintf(stderr, "loadgen: %v\n", err)
		return exitUsage
	}
	cfg.gc.Apply(slog.New(slog.DiscardHandler))

	if cfg.serveNoop != "" {
		if cfg.opts.Target != "" {
			fmt.Fprintln(stderr, "loadgen: -serve-noop and -target are exclusive: run the server and the load in separate processes")
			return exitUsage
		}
		if err := serveNoop(ctx, cfg.serveNoop, stderr); err != nil {
			fmt.Fprintf(stderr, "loadgen: %v\n", err)
			return exitError
		}
		return exitOK
	}
	if cfg.opts.Target == "" {
		fmt.Fprintln(stderr, "loadgen: -target is required (or -serve-noop)")
		fs.Usage()
		return exitUsage
	}

	res, err := loadgen.Run(ctx, cfg.opts)
	if err != nil {
		fmt.Fprintf(stderr, "loadgen: %v\n", err)
		return exitError
	}
	if cfg.json {
		err = res.WriteJSON(stdout)
	} else {
		err = res.WriteText(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "loadgen: write result: %v\n", err)
		return exitError
	}
	return exitOK
}

// serveNoop serves loadgen.NoopService on addr until ctx is done, its
// collector set by -gc-percent and -memory-limit as the daemons' are, and
// GOMAXPROCS left to the environment, as for them.
func serveNoop(ctx context.Context, addr string, stderr io.Writer) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("serve-noop: %w", err)
	}
	s := loadgen.NewGRPCServer(loadgen.NoopService{})
	fmt.Fprintf(stderr, "loadgen: noop RLS serving on %s\n", lis.Addr())
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve-noop: %w", err)
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() { s.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		s.Stop() // open streams past the grace period are cut
		<-stopped
	}
	return <-served
}
