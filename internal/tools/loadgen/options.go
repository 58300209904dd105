package loadgen

import (
	"errors"
	"fmt"
	"time"
)

// Bounds that every run respects, whatever it is asked for: the load must
// stop by itself, and the client must fit on the machine.
const (
	MaxDuration    = 10 * time.Minute // for Duration and for Warmup
	MaxConcurrency = 1024
	MaxConns       = 256
	MaxRate        = 10_000_000 // requests per second
	// DefaultCacheKeys bounds the prebuilt requests (a few hundred bytes
	// each); keys beyond it are built per request.
	DefaultCacheKeys = 100_000
)

// Options configure one load run. The zero value of each optional field
// picks the default named on it.
type Options struct {
	// Target is the RLS server's host:port. It must resolve to loopback
	// unless AllowRemote.
	Target string
	// Conns is the number of gRPC ClientConns (HTTP/2 connections); caller i
	// uses connection i mod Conns. Default 1; at most Concurrency.
	Conns int
	// Concurrency is the number of callers, each with at most one request in
	// flight. Default 1.
	Concurrency int
	// Duration bounds the measured phase (required, at most MaxDuration).
	Duration time.Duration
	// Requests, if > 0, also bounds the measured phase by count.
	Requests int64
	// Rate, if > 0, sends at this fixed rate (requests/s, all callers
	// together) on a schedule, measuring latency from each request's
	// intended send time. 0 is closed loop.
	Rate float64
	// Warmup runs the same load for this long before measuring (results
	// discarded). At most MaxDuration.
	Warmup time.Duration
	// Timeout is each request's deadline; 0 means none beyond the run's.
	Timeout time.Duration

	// Domain of every request. Default "loadgen".
	Domain string
	// Descriptors is the [Template] text. Default "remote_address=client-%d".
	Descriptors string
	// Keys is the key-index space: %d takes values in [0, Keys). Default 1.
	Keys int
	// Dist draws key indexes. Default Uniform.
	Dist Distribution
	// ZipfS is the Zipf exponent (> 1). Default 1.1.
	ZipfS float64
	// Seed makes key choice reproducible: caller i draws from
	// PCG(Seed, i).
	Seed uint64
	// HitsAddend is each request's hits_addend; 0 leaves it unset.
	HitsAddend uint32
	// CacheKeys bounds the prebuilt requests. Default DefaultCacheKeys.
	CacheKeys int

	// RedisAddr, if set, is a Redis (host:port, loopback unless AllowRemote)
	// sampled before and after the measured phase; see [RedisFigures].
	RedisAddr string
	// MetricsURL, if set, is the server's Prometheus endpoint
	// (http://host:port/metrics, loopback unless AllowRemote), whose
	// RoundTripsMetric is sampled before and after the measured phase.
	MetricsURL string
	// TierMetricsURL, if set, is a hybrid tier's Prometheus endpoint (a
	// sidecar's, or a cached-mode server's; loopback unless AllowRemote):
	// its counters of decisions taken without the central state are
	// sampled before and after the measured phase, and a run in which any
	// moved has failed (Result.TierFaults).
	TierMetricsURL string
	// CPUPids are processes (the server side) whose CPU time over the
	// measured phase is reported per request. Linux only.
	CPUPids []int
	// CentralPids are the central service's processes (the servers and
	// Redis behind a hybrid tier): their CPU time over the measured phase
	// per decided request is reported as the tier's central cost. Linux
	// only.
	CentralPids []int
	// Label names the run in its Result, for benchmark scripts.
	Label string
	// AllowRemote permits non-loopback Target, RedisAddr, MetricsURL and
	// TierMetricsURL.
	// This machine's policy forbids it; it exists for other machines.
	AllowRemote bool
}

func (o Options) withDefaults() Options {
	if o.Conns == 0 {
		o.Conns = 1
	}
	if o.Concurrency == 0 {
		o.Concurrency = 1
	}
	if o.Domain == "" {
		o.Domain = "loadgen"
	}
	if o.Descriptors == "" {
		o.Descriptors = "remote_address=client-%d"
	}
	if o.Keys == 0 {
		o.Keys = 1
	}
	if o.Dist == "" {
		o.Dist = Uniform
	}
	if o.ZipfS == 0 {
		o.ZipfS = 1.1
	}
	if o.CacheKeys == 0 {
		o.CacheKeys = DefaultCacheKeys
	}
	return o
}

func (o Options) validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(o.Target != "", "target: required")
	check(o.Duration > 0 && o.Duration <= MaxDuration, "duration %v: want > 0 and ≤ %v", o.Duration, MaxDuration)
	check(o.Warmup >= 0 && o.Warmup <= MaxDuration, "warmup %v: want ≥ 0 and ≤ %v", o.Warmup, MaxDuration)
	check(o.Concurrency >= 1 && o.Concurrency <= MaxConcurrency, "concurrency %d: want 1..%d", o.Concurrency, MaxConcurrency)
	check(o.Conns >= 1 && o.Conns <= MaxConns, "conns %d: want 1..%d", o.Conns, MaxConns)
	check(o.Conns <= o.Concurrency, "conns %d: more connections than callers (%d) leaves some idle", o.Conns, o.Concurrency)
	check(o.Requests >= 0, "requests %d: want ≥ 0", o.Requests)
	check(o.Rate >= 0 && o.Rate <= MaxRate, "rate %v: want 0 (closed loop) or up to %d/s", o.Rate, MaxRate)
	check(o.Timeout >= 0, "timeout %v: want ≥ 0", o.Timeout)
	check(o.Keys >= 1, "keys %d: want ≥ 1", o.Keys)
	check(o.CacheKeys >= 1, "cache keys %d: want ≥ 1", o.CacheKeys)
	check(o.Dist == Uniform || o.Dist == Zipf, "dist %q: want %q or %q", o.Dist, Uniform, Zipf)
	check(o.Dist != Zipf || o.ZipfS > 1, "zipf-s %v: want > 1", o.ZipfS)
	return errors.Join(errs...)
}
