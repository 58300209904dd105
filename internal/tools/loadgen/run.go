package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
)

// connectTimeout bounds waiting for every connection to be ready before the
// clock starts, so connection setup is never measured.
const connectTimeout = 5 * time.Second

// numCodes is the number of gRPC status codes (OK through Unauthenticated).
const numCodes = int(codes.Unauthenticated) + 1

// Run drives the load opts describes and returns what the measured phase
// saw. It returns when the phase's time or count bound is reached, or early
// when ctx is done (the figures so far, with Result.Interrupted set). The
// error is for runs that could not start or be measured: bad options, a
// refused address, a target that does not connect, a Redis that cannot be
// sampled.
func Run(ctx context.Context, opts Options) (*Result, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	tmpl, err := ParseTemplate(opts.Descriptors)
	if err != nil {
		return nil, err
	}
	target, err := LoopbackAddr(ctx, opts.Target, opts.AllowRemote)
	if err != nil {
		return nil, fmt.Errorf("target: %w", err)
	}
	var sampler *redisSampler
	if opts.RedisAddr != "" {
		addr, err := LoopbackAddr(ctx, opts.RedisAddr, opts.AllowRemote)
		if err != nil {
			return nil, fmt.Errorf("redis: %w", err)
		}
		sampler = newRedisSampler(addr)
		defer sampler.Close()
		// Open the sampler's one connection now, so its handshake is not
		// counted between the samples.
		if err := sampler.client.Ping(ctx).Err(); err != nil {
			return nil, fmt.Errorf("redis %s: %w", addr, err)
		}
	}

	var metrics *metricsSampler
	if opts.MetricsURL != "" {
		if metrics, err = newMetricsSampler(ctx, opts.MetricsURL, opts.AllowRemote); err != nil {
			return nil, err
		}
	}

	var tier *metricsSampler
	if opts.TierMetricsURL != "" {
		if tier, err = newMetricsSampler(ctx, opts.TierMetricsURL, opts.AllowRemote); err != nil {
			return nil, err
		}
	}

	reqs := newRequestSet(tmpl, opts.Domain, opts.HitsAddend, opts.Keys, opts.CacheKeys)
	conns, err := dialAll(ctx, target, opts.Conns)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, cc := range conns {
			cc.Close()
		}
	}()

	callers := make([]*caller, opts.Concurrency)
	for i := range callers {
		keys, err := NewKeyChooser(opts.Dist, opts.Keys, opts.ZipfS, opts.Seed, uint64(i))
		if err != nil {
			return nil, err
		}
		c := &caller{conn: conns[i%len(conns)], keys: keys, reqs: reqs, timeout: opts.Timeout, parent: ctx}
		c.renew()
		defer func() { c.cancel() }()
		if opts.Rate > 0 {
			c.stats.service = new(Histogram)
			c.timer = time.NewTimer(time.Hour)
			c.timer.Stop()
		}
		callers[i] = c
	}

	if opts.Warmup > 0 {
		runPhase(ctx, callers, opts.Warmup, 0, opts.Rate)
		for _, c := range callers {
			c.stats.reset()
		}
	}

	var before redisSample
	if sampler != nil {
		if before, err = sampler.sample(ctx); err != nil {
			return nil, err
		}
	}
	var trips0 float64
	if metrics != nil {
		if trips0, err = metrics.sample(ctx); err != nil {
			return nil, err
		}
	}
	var faults0 map[string]float64
	if tier != nil {
		if faults0, err = tier.tierSample(ctx, false); err != nil {
			return nil, err
		}
	}
	cpu0, err := cpuTimes(opts.CPUPids)
	if err != nil {
		return nil, err
	}
	central0, err := cpuTimes(opts.CentralPids)
	if err != nil {
		return nil, err
	}
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	elapsed, scheduled := runPhase(ctx, callers, opts.Duration, opts.Requests, opts.Rate)
	runtime.ReadMemStats(&ms1)
	cpu1, cpuErr := cpuTimes(opts.CPUPids)
	central1, centralErr := cpuTimes(opts.CentralPids)

	res := newResult(opts, target, callers, elapsed, scheduled)
	res.Label = opts.Label
	if err := errors.Join(cpuErr, centralErr); err != nil {
		return res, err
	}
	if len(opts.CPUPids) > 0 && res.Sent > 0 {
		res.CPUMicrosPerReq = make([]float64, len(cpu0))
		for i := range cpu0 {
			res.CPUMicrosPerReq[i] = float64((cpu1[i] - cpu0[i]).Microseconds()) / float64(res.Sent)
		}
	}
	if decided := res.OK + res.OverLimit; len(opts.CentralPids) > 0 && decided > 0 {
		var central time.Duration
		for i := range central0 {
			central += central1[i] - central0[i]
		}
		per := float64(central.Microseconds()) / float64(decided)
		res.CentralMicrosPerReq = &per
	}
	if tier != nil {
		faults1, err := tier.tierSample(context.WithoutCancel(ctx), res.OK+res.OverLimit > 0)
		if err != nil {
			return res, err
		}
		res.TierFaults = tierDelta(faults0, faults1)
	}
	if metrics != nil && res.Sent > 0 {
		trips1, err := metrics.sample(context.WithoutCancel(ctx))
		if err != nil {
			return res, err
		}
		per := (trips1 - trips0) / float64(res.Sent)
		res.RoundTripsPerReq = &per
	}
	res.Interrupted = ctx.Err() != nil
	if res.Sent > 0 {
		res.ClientAllocsPerReq = float64(ms1.Mallocs-ms0.Mallocs) / float64(res.Sent)
	}
	if sampler != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		after, err := sampler.sample(sctx)
		if err != nil {
			return res, err
		}
		if res.Redis, err = redisDelta(sampler.addr, before, after, res.Sent); err != nil {
			return res, err
		}
	}
	return res, nil
}

// dialAll opens n ClientConns to target and waits until each is ready.
func dialAll(ctx context.Context, target string, n int) ([]*grpc.ClientConn, error) {
	conns := make([]*grpc.ClientConn, 0, n)
	fail := func(err error) ([]*grpc.ClientConn, error) {
		for _, cc := range conns {
			cc.Close()
		}
		return nil, err
	}
	for range n {
		// passthrough: dial exactly the address that was checked.
		cc, err := grpc.NewClient("passthrough:///"+target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return fail(fmt.Errorf("target %s: %w", target, err))
		}
		conns = append(conns, cc)
		cc.Connect()
	}
	wctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	for _, cc := range conns {
		for s := cc.GetState(); s != connectivity.Ready; s = cc.GetState() {
			if !cc.WaitForStateChange(wctx, s) {
				return fail(fmt.Errorf("target %s: connection still %v after %v: is the server running?", target, s, connectTimeout))
			}
		}
	}
	return conns, nil
}

// phase is one bounded stretch of load shared by all callers. Only next is
// written on the hot path (one atomic add per request, and only when a count
// bound or a schedule needs it).
type phase struct {
	done     <-chan struct{}
	start    time.Time
	deadline time.Time
	limit    int64   // > 0: at most this many requests
	interval float64 // open loop: ns between scheduled sends; 0: closed loop
	next     atomic.Int64
}

// runPhase runs every caller until the phase's bounds and returns its
// elapsed time and, for open loop, how many sends the schedule held.
func runPhase(ctx context.Context, callers []*caller, d time.Duration, limit int64, rate float64) (elapsed time.Duration, scheduled int64) {
	p := &phase{done: ctx.Done(), limit: limit}
	if rate > 0 {
		p.interval = 1e9 / rate
		scheduled = scheduledSends(d, p.interval, limit)
	}
	var wg sync.WaitGroup
	p.start = time.Now()
	p.deadline = p.start.Add(d)
	for _, c := range callers {
		wg.Go(func() {
			if p.interval > 0 {
				c.openLoop(p)
			} else {
				c.closedLoop(p)
			}
		})
	}
	wg.Wait()
	return time.Since(p.start), scheduled
}

// scheduledSends counts the i ≥ 0 with offset(i) < d (and i < limit).
func scheduledSends(d time.Duration, interval float64, limit int64) int64 {
	offset := func(i int64) time.Duration { return time.Duration(float64(i) * interval) }
	n := int64(float64(d) / interval)
	for n > 0 && offset(n-1) >= d {
		n--
	}
	for offset(n) < d {
		n++
	}
	if limit > 0 {
		n = min(n, limit)
	}
	return n
}

// gogcSetting names the garbage collector target in force, for the
// record: the runtime's (set by GOGC, or by cmd/loadgen's -gc-percent).
func gogcSetting() string {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	switch {
	case s[0].Value.Kind() != metrics.KindUint64:
		return "unknown"
	case s[0].Value.Uint64() > math.MaxInt32: // -1 as a uint64
		return "off"
	}
	return strconv.FormatUint(s[0].Value.Uint64(), 10)
}
