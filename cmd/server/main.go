// Command server is sluice's global rate-limit service: Envoy's
// envoy.service.ratelimit.v3 RateLimitService over gRPC, deciding on Redis
// (single node, Cluster or Sentinel) or, with no Redis configured, on an
// embedded in-memory store. An admin HTTP listener serves the admin page
// (/), /healthz, /readyz, /healthcheck, /metrics, /config, /json and
// /debug/top.
//
// Every flag can also be set from the environment: -grpc-addr from
// SLUICE_GRPC_ADDR, and so on. Run with -h for the list.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"
	_ "time/tzdata" // calendar limits: time zones whatever the image carries

	"github.com/sluicehq/sluice/internal/daemon/serve"
	"github.com/sluicehq/sluice/pkg/breaker"
	"github.com/sluicehq/sluice/pkg/global"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/share"
)

func main() { serve.Main("sluice server", run) }

// options are the server's flags, validated.
type options struct {
	serve.Flags
	tier          serve.TierFlags
	redisMode     string
	redisURL      string
	redisCluster  string
	sentinelAddrs string
	sentinelName  string
	redisUser     string
	redisPassword string
	redisTLS      bool
	redisCA       string
	redisAuth     // -redis-tls-cert, -redis-tls-key, -redis-sentinel-username, -redis-sentinel-password (redis.go)
	redisPool     int
	writers       int
	recordLinger  time.Duration
	stateFormat   string
	failureMode   string
	storeTimeout  time.Duration
	maxWait       time.Duration
	breaker       breaker.Options
	localShare    float64
	memoryKeys    int
	memoryBytes   int64
	shareBytes    int64
	// Who is a sidecar (pkg/peerauth).
	recordClients   string
	sidecarTokens   string
	tokensPlaintext bool
	trustAny        bool
}

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.Flags.Register(fs, ":8081", ":8080")
	fs.StringVar(&o.redisURL, "redis-url", "", "single Redis node: redis://[user:password@]host:port[/db] or rediss:// for TLS; empty (and no -redis-cluster or -redis-sentinel-addrs) runs on the in-memory store")
	fs.StringVar(&o.redisCluster, "redis-cluster", "", "Redis Cluster seed addresses, comma-separated host:port")
	fs.StringVar(&o.sentinelAddrs, "redis-sentinel-addrs", "", "Redis Sentinel addresses, comma-separated host:port (with -redis-sentinel-master)")
	fs.StringVar(&o.sentinelName, "redis-sentinel-master", "", "the master name Sentinel monitors")
	fs.StringVar(&o.redisUser, "redis-username", "", "Redis ACL user for -redis-cluster and Sentinel (a URL carries its own)")
	fs.StringVar(&o.redisPassword, "redis-password", "", "Redis password for -redis-cluster and Sentinel (a URL carries its own)")
	fs.BoolVar(&o.redisTLS, "redis-tls", false, "use TLS to -redis-cluster and Sentinel masters (rediss:// does it for a URL)")
	fs.StringVar(&o.redisCA, "redis-tls-ca", "", "PEM file of CAs to verify Redis's certificate (default: system roots)")
	o.redisAuth.register(fs)
	fs.StringVar(&o.redisMode, "redis-mode", "direct", "direct (Redis decides every request) or cached (each replica admits from local token buckets and records the admitted hits to Redis in batches, every -flush-interval: the sidecar's async tier in process; overshoot bounded as documented in pkg/localtier; while Redis is unavailable it decides at -local-share and records the hits when Redis returns, in place of -failure-mode)")
	o.tier.Register(fs)
	fs.IntVar(&o.redisPool, "redis-pool-size", 16, "Redis connections per node")
	fs.IntVar(&o.writers, "redis-pipelines", global.DefaultWriters, "the most pipelines in flight at once; concurrent decisions are coalesced into them, fewer while Redis's round trips are mostly its work rather than the wire's delay")
	fs.StringVar(&o.stateFormat, "redis-state-format", "text", "how the algorithms' states are stored in Redis: text, or packed (0.7 µs less of Redis's time a decision); every server reads both: switch to packed once every server on the Redis is of a version that reads it")
	fs.DurationVar(&o.recordLinger, "redis-record-linger", global.DefaultRecordLinger, "how long recorded hits (sidecars' flushes, cached mode's tier) wait for others to share a Redis script call with; their answers are on no client's path; 0: none")
	fs.StringVar(&o.failureMode, "failure-mode", "error", "when the store is unavailable: allow, deny, error (gRPC UNAVAILABLE: Envoy's failure_mode_deny decides) or local (in-process limits at -local-share)")
	fs.DurationVar(&o.storeTimeout, "store-timeout", global.DefaultTimeout, "how long Redis may leave a reply overdue, answering nothing else, before it is taken as not answering (this process being slow does not count); keep it under Envoy's filter timeout (20ms by default)")
	fs.DurationVar(&o.maxWait, "store-max-wait", 0, "how long a request waits for the store when its caller set no deadline (Envoy sets its filter timeout); past it, or just before the caller's deadline, the request is decided in memory at -local-share; 0: max(1s, 5 × -store-timeout)")
	fs.IntVar(&o.breaker.MinCalls, "breaker-min-calls", breaker.DefaultMinCalls, "store calls the breaker's window must hold before their failure ratio can open it")
	fs.Float64Var(&o.breaker.FailureRatio, "breaker-failure-ratio", breaker.DefaultFailureRatio, "share of the window's store calls that failed (refused, reset, not answered) that opens the circuit breaker, in (0, 1]")
	fs.DurationVar(&o.breaker.Window, "breaker-window", breaker.DefaultWindow, "how far back the breaker counts store calls")
	fs.DurationVar(&o.breaker.Cooldown, "breaker-cooldown", breaker.DefaultCooldown, "how long the open breaker waits before probing the store")
	fs.Float64Var(&o.localShare, "local-share", limiter.DefaultLocalShare, "share of each limit one process allows in -failure-mode local; 1/replicas keeps the sum at the limit")
	fs.IntVar(&o.memoryKeys, "memory-max-keys", global.DefaultMemoryKeys, "keys the in-memory store holds (the embedded store, and the local fallback)")
	fs.Int64Var(&o.memoryBytes, "memory-max-bytes", global.DefaultMemoryBytes, "bytes the in-memory store's keys may hold; beyond, keys not used lately are dropped first (CLOCK, an approximation of least recently used)")
	fs.StringVar(&o.recordClients, "record-clients", "", "sidecars known by their client certificates (with -grpc-tls-client-ca): the names (DNS or URI SAN, or common name), comma-separated, whose holders may record the hits they admitted, report demand and receive allowances")
	fs.StringVar(&o.sidecarTokens, "sidecar-tokens", "", "sidecars known by bearer token: a file of one \"name token\" a line, read again when it changes; accepted only over TLS (-grpc-tls-cert) unless -sidecar-tokens-plaintext")
	fs.BoolVar(&o.tokensPlaintext, "sidecar-tokens-plaintext", false, "accept -sidecar-tokens on a gRPC port without TLS, where anyone on the path can read and replay them: only on a network you trust")
	fs.BoolVar(&o.trustAny, "trust-any-sidecar", false, "INSECURE: every caller of the gRPC port may record hits, report demand and receive allowances as a sidecar (sluice's behaviour before sidecars were authenticated); only where nothing but your own sidecars reaches the port")
	fs.Int64Var(&o.shareBytes, "share-max-bytes", share.DefaultMaxBytes, "bytes the async sidecars' demand reports may hold (pkg/share); beyond, the least recently reported keys are forgotten")
	if err := o.Flags.Parse(fs, args, getenv); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		// Not shown: the tail of an unquoted password with a space lands here.
		return nil, fmt.Errorf("%d unexpected arguments after the flags (not shown: one may be part of a password; quote a value with spaces)", fs.NArg())
	}
	err := o.validate()
	if o.redisMode == "cached" && isSet(fs, "failure-mode") {
		err = errors.Join(err, errors.New("-failure-mode does not apply with -redis-mode cached (it decides at -local-share while Redis is unavailable)"))
	}
	return o, err
}

// isSet reports whether the flag name was given (on the command line or
// from the environment).
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func (o *options) validate() error {
	errs := []error{o.Flags.Validate(), o.tier.Validate()}
	switch o.redisMode {
	case "direct":
	case "cached":
		if o.redisURL == "" && o.redisCluster == "" && o.sentinelAddrs == "" {
			errs = append(errs, errors.New("-redis-mode cached needs a Redis (-redis-url, -redis-cluster or -redis-sentinel-addrs)"))
		}
	default:
		errs = append(errs, fmt.Errorf("-redis-mode %q: want direct or cached", o.redisMode))
	}
	n := 0
	for _, s := range []string{o.redisURL, o.redisCluster, o.sentinelAddrs} {
		if s != "" {
			n++
		}
	}
	if n > 1 {
		errs = append(errs, errors.New("give at most one of -redis-url, -redis-cluster and -redis-sentinel-addrs"))
	}
	if (o.sentinelAddrs == "") != (o.sentinelName == "") {
		errs = append(errs, errors.New("-redis-sentinel-addrs and -redis-sentinel-master go together"))
	}
	if o.recordClients != "" && o.TLS.ClientCA == "" {
		errs = append(errs, errors.New("-record-clients needs -grpc-tls-client-ca: callers are known by their client certificates"))
	}
	if o.sidecarTokens != "" && o.TLS.Cert == "" && !o.tokensPlaintext {
		errs = append(errs, errors.New("-sidecar-tokens are accepted only over TLS: give -grpc-tls-cert and -grpc-tls-key, or -sidecar-tokens-plaintext on a network you trust"))
	}
	if o.trustAny && (o.recordClients != "" || o.sidecarTokens != "") {
		errs = append(errs, errors.New("-trust-any-sidecar leaves nothing for -record-clients or -sidecar-tokens to do: give one or the other"))
	}
	if o.shareBytes <= 0 {
		errs = append(errs, errors.New("-share-max-bytes must be positive"))
	}
	if o.maxWait == 0 {
		o.maxWait = limiter.DefaultMaxWait(o.storeTimeout)
	}
	if o.storeTimeout <= 0 || o.maxWait <= o.storeTimeout {
		errs = append(errs, fmt.Errorf("-store-timeout %v must be positive and -store-max-wait %v longer", o.storeTimeout, o.maxWait))
	}
	if o.breaker.MinCalls <= 0 || o.breaker.Window <= 0 || !(o.breaker.FailureRatio > 0 && o.breaker.FailureRatio <= 1) {
		errs = append(errs, errors.New("-breaker-min-calls and -breaker-window must be positive, -breaker-failure-ratio in (0, 1]"))
	}
	if o.localShare <= 0 || o.localShare > 1 {
		errs = append(errs, fmt.Errorf("-local-share %v: want a share in (0, 1]", o.localShare))
	}
	if o.memoryKeys <= 0 || o.memoryBytes <= 0 || o.redisPool <= 0 || o.writers <= 0 || o.breaker.Cooldown <= 0 {
		errs = append(errs, errors.New("-memory-max-keys, -memory-max-bytes, -redis-pool-size, -redis-pipelines and -breaker-cooldown must be positive"))
	}
	if o.stateFormat != "text" && o.stateFormat != "packed" {
		errs = append(errs, fmt.Errorf("-redis-state-format %q: want text or packed", o.stateFormat))
	}
	if o.recordLinger < 0 || o.recordLinger > maxRecordLinger {
		errs = append(errs, fmt.Errorf("-redis-record-linger %v: want 0 to %v", o.recordLinger, maxRecordLinger))
	}
	return errors.Join(errs...)
}

// maxRecordLinger bounds -redis-record-linger: well within a sidecar's
// call timeout and the share tracker's reporting intervals.
const maxRecordLinger = 100 * time.Millisecond
