package serve

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/internal/daemon/flagenv"
	"github.com/sluicehq/sluice/internal/daemon/refenv"
	"github.com/sluicehq/sluice/pkg/cache"
	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/topkeys"
)

// Flags are the flags both daemons take, under the same names and with
// the same meanings: where the config is, where to listen, the flag
// cache, the key prefix, the reply's legacy headers, logging, profiling,
// shutdown and the gRPC port's TLS.
type Flags struct {
	Config string
	// ConfigMaxFileBytes and ConfigMaxTotalBytes bound what a config load
	// reads (config.SizeBounds), from files or xDS.
	ConfigMaxFileBytes, ConfigMaxTotalBytes int64
	GRPCAddr, HTTPAddr                      string
	CacheSize                               int
	TopKeysBytes                            int64
	KeyPrefix                               string
	LegacyHeaders                           bool
	DynamicMetadata                         bool
	ShadowAll                               bool
	QuotaAll                                bool
	ReferenceMetrics                        bool
	ReferenceCounting                       bool
	Pprof                                   bool
	LogLevel                                string
	LogFormat                               string
	Grace                                   time.Duration
	TLS                                     GRPCTLS
	XDS                                     XDSFlags
	GC                                      GCFlags
	// FromReference are the flags set from envoyproxy/ratelimit's
	// environment, and IgnoredReference its variables that are set and
	// not honoured but only warn (Parse; Serve logs both).
	FromReference    []refenv.Applied
	IgnoredReference []refenv.Ignored
}

// Parse parses args into fs, then sets each flag not given from its
// SLUICE_ variable (flagenv), then each still unset from the reference's
// environment settings (refenv), recorded in FromReference.
func (f *Flags) Parse(fs *flag.FlagSet, args []string, getenv func(string) string) error {
	if err := flagenv.Parse(fs, args, "SLUICE_", getenv); err != nil {
		return err
	}
	var err error
	if f.FromReference, f.IgnoredReference, err = refenv.Apply(fs, getenv); err != nil {
		return fmt.Errorf("envoyproxy/ratelimit settings: %w", err)
	}
	return nil
}

// Register adds the flags to fs, with the daemon's default listen
// addresses.
func (f *Flags) Register(fs *flag.FlagSet, grpcAddr, httpAddr string) {
	fs.StringVar(&f.Config, "config", "", "descriptor config: a YAML file or a directory of them, in envoyproxy/ratelimit's format (this or -config-xds-server is required)")
	f.XDS.Register(fs)
	fs.Int64Var(&f.ConfigMaxFileBytes, "config-max-file-bytes", config.DefaultMaxFileBytes, "refuse a config file (or an xDS resource) larger than this, before reading it")
	fs.Int64Var(&f.ConfigMaxTotalBytes, "config-max-total-bytes", config.DefaultMaxTotalBytes, "refuse a config directory (or an xDS push) whose files add up to more than this")
	fs.StringVar(&f.GRPCAddr, "grpc-addr", grpcAddr, "gRPC listen address: RateLimitService (for Envoy), health, reflection")
	fs.StringVar(&f.HTTPAddr, "http-addr", httpAddr, "admin HTTP listen address: /healthz /readyz /metrics /config /json")
	fs.IntVar(&f.CacheSize, "cache-size", cache.DefaultSize, "keys in the over-limit flag cache; 0 turns it off")
	fs.Int64Var(&f.TopKeysBytes, "top-keys-max-bytes", topkeys.DefaultMaxBytes, "bytes the admin views' keys refused most may hold (/debug/top, the admin page); refusals past it are still counted, unattributed")
	fs.StringVar(&f.KeyPrefix, "key-prefix", "sluice:", "prefix of every store key (a sidecar's must be its server's)")
	fs.BoolVar(&f.LegacyHeaders, "legacy-headers", false, "also send X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset")
	fs.BoolVar(&f.ShadowAll, "shadow-mode", false, "admit every request, over limit or not, counting as usual (every limit in shadow mode; the reference's SHADOW_MODE)")
	fs.BoolVar(&f.QuotaAll, "quota-mode", false, "every limit a quota limit: a request fails only when all its limits are over (the reference's QUOTA_MODE; quota_mode in the config)")
	fs.BoolVar(&f.ReferenceCounting, "reference-counting", false, "count as envoyproxy/ratelimit does: limits that name no algorithm are fixed windows, and every hit counts on every limit, rejected requests' included (for a migration that wants identical numbers first)")
	fs.BoolVar(&f.ReferenceMetrics, "reference-metrics", false, "also export envoyproxy/ratelimit's per-limit metrics under its Prometheus names (ratelimit_service_rate_limit_total_hits and the rest), for its dashboards and alerts")
	fs.BoolVar(&f.DynamicMetadata, "response-dynamic-metadata", false, "add to every answer the dynamic metadata the reference's RESPONSE_DYNAMIC_METADATA adds: domain, descriptors and the metadata of the descriptors that passed")
	fs.BoolVar(&f.Pprof, "pprof", false, "serve Go's profiling endpoints under /debug/pprof/ on the admin listener (not cmdline, which would show the arguments' passwords)")
	fs.StringVar(&f.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.LogFormat, "log-format", "json", "json or text")
	fs.DurationVar(&f.Grace, "shutdown-grace", 10*time.Second, "how long shutdown waits for in-flight requests")
	f.TLS.Register(fs)
	f.GC.Register(fs)
}

// Validate reports what is wrong with the flags, each error naming its
// flag.
func (f *Flags) Validate() error {
	var errs []error
	switch {
	case f.Config == "" && f.XDS.Server == "":
		errs = append(errs, errors.New("-config is required (a YAML file or a directory; e.g. -config envoy/ratelimit-config), or -config-xds-server"))
	case f.Config != "" && f.XDS.Server != "":
		errs = append(errs, errors.New("give one of -config and -config-xds-server"))
	}
	if f.CacheSize < 0 {
		errs = append(errs, errors.New("-cache-size must not be negative"))
	}
	if f.ConfigMaxFileBytes <= 0 || f.ConfigMaxTotalBytes < f.ConfigMaxFileBytes {
		errs = append(errs, errors.New("-config-max-file-bytes must be positive and -config-max-total-bytes at least as large"))
	}
	if f.TopKeysBytes <= 0 {
		errs = append(errs, errors.New("-top-keys-max-bytes must be positive"))
	}
	if f.Grace < 0 {
		errs = append(errs, errors.New("-shutdown-grace must not be negative"))
	}
	if _, err := f.Logger(io.Discard); err != nil {
		errs = append(errs, err)
	}
	if err := f.TLS.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := f.GC.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Logger is the logger -log-level and -log-format ask for, writing to w.
func (f *Flags) Logger(w io.Writer) (*slog.Logger, error) {
	return NewLogger(f.LogLevel, f.LogFormat, w)
}

// ServiceCacheSize is -cache-size as server.Options.CacheSize takes
// it: the flag's 0 turns the cache off, the option's picks the default.
func (f *Flags) ServiceCacheSize() int {
	if f.CacheSize == 0 {
		return -1
	}
	return f.CacheSize
}

// LogReference logs, once, which flags came from envoyproxy/ratelimit's
// variables, and each of its variables that is set and ignored, with
// why. Values stay out (REDIS_AUTH).
func (f *Flags) LogReference(log *slog.Logger) {
	if len(f.FromReference) > 0 {
		var from []string
		for _, a := range f.FromReference {
			from = append(from, "-"+a.Flag+" from "+strings.Join(a.From, "+"))
		}
		log.Info("settings from envoyproxy/ratelimit's environment", "flags", from)
	}
	for _, i := range f.IgnoredReference {
		log.Warn("envoyproxy/ratelimit setting ignored", "variable", i.Var, "why", i.Note)
	}
}

// Serve runs svc on the gRPC listener and admin on the HTTP one, as the
// flags ask (TLS, pprof, the grace period), until ctx ends; see Run. Each
// of more registers another service on the gRPC server.
func (f *Flags) Serve(ctx context.Context, log *slog.Logger, svc rlsv3.RateLimitServiceServer, admin *http.ServeMux, listening func(grpc, http net.Addr), more ...func(*grpc.Server)) error {
	gopts, err := f.TLS.ServerOptions()
	if err != nil {
		return err
	}
	if f.Pprof {
		Profile(admin)
	}
	f.LogReference(log)
	f.GC.Apply(log)
	g := NewGRPC(svc, gopts...)
	for _, register := range more {
		register(g.Server)
	}
	return Run(ctx, Options{
		Log: log, GRPC: g, Admin: admin,
		GRPCAddr: f.GRPCAddr, HTTPAddr: f.HTTPAddr, Grace: f.Grace, Listening: listening,
	})
}
