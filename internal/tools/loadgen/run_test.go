package loadgen

import (
	"context"
	"net"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// checkNoLeak fails the test if goroutines started during it are still
// running once its other cleanups (registered later, so run earlier) are
// done. gRPC's goroutines end asynchronously, so it polls with a deadline.
func checkNoLeak(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<16)
				t.Errorf("goroutines: %d before, %d after\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// startServer serves svc on 127.0.0.1:0 with the production options and
// returns its address; it is stopped in t.Cleanup.
func startServer(t *testing.T, svc rlsv3.RateLimitServiceServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewGRPCServer(svc)
	done := make(chan error, 1)
	go func() { done <- s.Serve(lis) }()
	t.Cleanup(func() {
		s.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return lis.Addr().String()
}

func run(t *testing.T, opts Options) *Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := Run(ctx, opts)
	if err != nil {
		t.Fatalf("Run(%+v) = %v", opts, err)
	}
	return res
}

func logResult(t *testing.T, res *Result) {
	t.Helper()
	var b strings.Builder
	if err := res.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
}

func checkCounts(t *testing.T, res *Result) {
	t.Helper()
	var byCode uint64
	for _, n := range res.ErrorsByCode {
		byCode += n
	}
	if res.OK+res.OverLimit+res.Unknown+res.Errors != res.Sent || byCode != res.Errors {
		t.Errorf("ok %d + over %d + unknown %d + errors %d (by code %d) != sent %d",
			res.OK, res.OverLimit, res.Unknown, res.Errors, byCode, res.Sent)
	}
	if res.Latencies.Count() != res.Sent {
		t.Errorf("latency samples %d; want one per sent request, %d", res.Latencies.Count(), res.Sent)
	}
}

func TestClosedLoopAgainstNoop(t *testing.T) {
	checkNoLeak(t)
	addr := startServer(t, NoopService{})
	res := run(t, Options{
		Target: addr, Conns: 2, Concurrency: 8, Requests: 200, Duration: 20 * time.Second,
		Keys: 50, Descriptors: "generic_key=api;remote_address=client-%d", Timeout: 5 * time.Second,
	})
	checkCounts(t, res)
	if res.Sent != 200 || res.OK != 200 {
		t.Fatalf("sent %d, ok %d; want 200 and 200 (errors %v)", res.Sent, res.OK, res.ErrorsByCode)
	}
	l := res.Latency
	if !(l.P50 > 0 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) {
		t.Fatalf("latency quantiles not positive and ordered: %+v", l)
	}
	if res.Mode != "closed" || res.Service != nil || res.RPS <= 0 {
		t.Fatalf("mode %q, service %v, rps %v; want closed, none, > 0", res.Mode, res.Service, res.RPS)
	}
}

// mixedService answers by key index (the number after "client-"): OK for
// 0 mod 3, OVER_LIMIT for 1, Unavailable for 2.
type mixedService struct{ NoopService }

func (mixedService) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	v := req.GetDescriptors()[0].GetEntries()[0].GetValue()
	k, err := strconv.Atoi(strings.TrimPrefix(v, "client-"))
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "value %q", v)
	}
	switch k % 3 {
	case 0:
		return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}, nil
	case 1:
		return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT}, nil
	}
	return nil, status.Error(codes.Unavailable, "store down")
}

func TestCountsByOutcome(t *testing.T) {
	checkNoLeak(t)
	addr := startServer(t, mixedService{})
	res := run(t, Options{Target: addr, Conns: 2, Concurrency: 4, Requests: 300, Duration: 20 * time.Second, Keys: 30, Seed: 5})
	checkCounts(t, res)
	if res.Sent != 300 || res.OK == 0 || res.OverLimit == 0 || res.ErrorsByCode["Unavailable"] != res.Errors || res.Errors == 0 {
		t.Fatalf("sent %d ok %d over %d errors %v; want 300 with each outcome and only Unavailable errors",
			res.Sent, res.OK, res.OverLimit, res.ErrorsByCode)
	}
	// Throughput counts the decided requests only, and the run says it
	// failed, with the errors by code next to it.
	if want := float64(res.OK+res.OverLimit) / res.ElapsedSeconds; res.DecidedRPS != want || !res.Failed() {
		t.Errorf("decided/s %v, failed %v; want %v and a failed run", res.DecidedRPS, res.Failed(), want)
	}
	var text strings.Builder
	res.WriteText(&text)
	if !strings.Contains(text.String(), "FAILED RUN") || !strings.Contains(text.String(), "Unavailable=") {
		t.Errorf("text of a run with errors:\n%s", text.String())
	}
}

func TestWarmupIsNotCounted(t *testing.T) {
	checkNoLeak(t)
	addr := startServer(t, NoopService{})
	res := run(t, Options{Target: addr, Concurrency: 2, Requests: 50, Duration: 20 * time.Second, Warmup: 100 * time.Millisecond})
	checkCounts(t, res)
	if res.Sent != 50 {
		t.Fatalf("sent %d after a warmup; want exactly the 50 measured", res.Sent)
	}
}

func TestDurationBoundStopsTheRun(t *testing.T) {
	checkNoLeak(t)
	addr := startServer(t, NoopService{})
	res := run(t, Options{Target: addr, Concurrency: 2, Duration: 200 * time.Millisecond})
	checkCounts(t, res)
	if res.Sent == 0 || res.ElapsedSeconds < 0.2 {
		t.Fatalf("sent %d in %.3fs; want requests and at least the 0.2s asked for", res.Sent, res.ElapsedSeconds)
	}
}

func TestCancelStopsTheRun(t *testing.T) {
	checkNoLeak(t)
	addr := startServer(t, NoopService{})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	res, err := Run(ctx, Options{Target: addr, Concurrency: 2, Duration: MaxDuration, Rate: 1000})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	if !res.Interrupted {
		t.Fatalf("Interrupted = false after cancel")
	}
}

// stallService stalls the whole server once: the at-th request starts a
// stall of d, and every request arriving during it waits until it ends.
type stallService struct {
	NoopService
	at    int64
	d     time.Duration
	n     atomic.Int64
	until atomic.Int64 // UnixNano end of the stall; 0 before it
}

func (s *stallService) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if s.n.Add(1) == s.at {
		s.until.Store(time.Now().Add(s.d).UnixNano())
	}
	if u := s.until.Load(); u != 0 {
		if wait := time.Until(time.Unix(0, u)); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	return s.NoopService.ShouldRateLimit(ctx, req)
}

func TestOpenLoopCorrectsCoordinatedOmission(t *testing.T) {
	checkNoLeak(t)
	svc := &stallService{at: 40, d: 200 * time.Millisecond}
	addr := startServer(t, svc)
	const concurrency = 4
	res := run(t, Options{Target: addr, Concurrency: concurrency, Rate: 400, Duration: 1500 * time.Millisecond, Timeout: 5 * time.Second})
	checkCounts(t, res)
	logResult(t, res)
	if svc.until.Load() == 0 {
		t.Fatalf("the stall never happened: server saw %d requests", svc.n.Load())
	}
	if res.Errors != 0 {
		t.Fatalf("errors %v; want none", res.ErrorsByCode)
	}
	if res.ServiceLatencies.Count() != res.Sent {
		t.Fatalf("service samples %d; want %d", res.ServiceLatencies.Count(), res.Sent)
	}
	// While the server stalls, only the callers' in-flight requests see it
	// from their actual send; every request the schedule held during the
	// stall waited too, and the corrected latency must say so.
	slow := res.Latencies.CountAbove(100 * time.Millisecond)
	if res.Latencies.Max() < 150*time.Millisecond || slow <= 1 {
		t.Fatalf("corrected max %v, %d samples above 100ms; want max ≥ 150ms and many slow samples", res.Latencies.Max(), slow)
	}
	if p99 := res.Latencies.Quantile(0.99); p99 < 100*time.Millisecond {
		t.Errorf("corrected p99 %v; want it to reflect the 200ms stall (≥ 100ms)", p99)
	}
	if svcSlow := res.ServiceLatencies.CountAbove(100 * time.Millisecond); svcSlow >= slow {
		t.Errorf("%d service-time samples above 100ms, %d corrected; want the corrected count larger", svcSlow, slow)
	}
}

func TestScheduledSends(t *testing.T) {
	tests := []struct {
		d        time.Duration
		interval float64
		limit    int64
		want     int64
	}{
		{time.Second, 1e6, 0, 1000}, // 1000/s for 1s: offsets 0..999ms
		{time.Second, 3e8, 0, 4},    // offsets 0, .3, .6, .9 s
		{time.Second, 1e6, 10, 10},
		{time.Nanosecond, 1e9, 0, 1},
	}
	for _, tt := range tests {
		if got := scheduledSends(tt.d, tt.interval, tt.limit); got != tt.want {
			t.Errorf("scheduledSends(%v, %v, %d) = %d; want %d", tt.d, tt.interval, tt.limit, got, tt.want)
		}
	}
}

func TestRunRefusesNonLoopback(t *testing.T) {
	for _, opts := range []Options{
		{Target: "10.1.2.3:8081", Duration: time.Second},
		{Target: "127.0.0.1:1", RedisAddr: "192.168.0.5:6379", Duration: time.Second},
	} {
		_, err := Run(context.Background(), opts)
		if err == nil || !strings.Contains(err.Error(), "not a loopback address") {
			t.Errorf("Run(target %q, redis %q) = %v; want a loopback refusal", opts.Target, opts.RedisAddr, err)
		}
	}
}

func TestRunRejectsBadOptions(t *testing.T) {
	base := Options{Target: "127.0.0.1:1", Duration: time.Second}
	tests := []struct {
		name   string
		modify func(*Options)
	}{
		{"no target", func(o *Options) { o.Target = "" }},
		{"no duration", func(o *Options) { o.Duration = 0 }},
		{"duration over the cap", func(o *Options) { o.Duration = MaxDuration + time.Second }},
		{"warmup over the cap", func(o *Options) { o.Warmup = MaxDuration + time.Second }},
		{"more conns than callers", func(o *Options) { o.Conns, o.Concurrency = 4, 2 }},
		{"too many callers", func(o *Options) { o.Concurrency = MaxConcurrency + 1 }},
		{"negative rate", func(o *Options) { o.Rate = -1 }},
		{"zipf exponent 1", func(o *Options) { o.Dist, o.ZipfS = Zipf, 1 }},
		{"unknown dist", func(o *Options) { o.Dist = "gauss" }},
		{"malformed descriptors", func(o *Options) { o.Descriptors = "remote_address" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := base
			tt.modify(&opts)
			if _, err := Run(context.Background(), opts); err == nil {
				t.Fatalf("Run(%+v) = nil error; want one", opts)
			}
		})
	}
}

func TestRunFailsWithoutServer(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := Run(ctx, Options{Target: addr, Duration: time.Second}); err == nil {
		t.Fatalf("Run against a closed port = nil error; want a connect error")
	}
}

func TestResultOutput(t *testing.T) {
	addr := startServer(t, NoopService{})
	res := run(t, Options{Target: addr, Requests: 20, Duration: 10 * time.Second, Rate: 1000})
	var text, js strings.Builder
	if err := res.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"decided/s", "p99.9", "intended", "service", "open loop at 1000/s"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text output lacks %q:\n%s", want, text.String())
		}
	}
	if err := res.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if s := js.String(); strings.Count(s, "\n") != 1 || !strings.Contains(s, `"latency_us":{"p50":`) || !strings.Contains(s, `"sent":20`) {
		t.Errorf("JSON output is not one object with latency_us and sent: %s", s)
	}
}

func BenchmarkClosedLoopNoop(b *testing.B) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s := NewGRPCServer(NoopService{})
	go s.Serve(lis)
	defer s.Stop()
	b.ReportAllocs()
	b.ResetTimer()
	res, err := Run(context.Background(), Options{Target: lis.Addr().String(), Conns: 2, Concurrency: 16, Requests: int64(b.N), Duration: MaxDuration})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(res.RPS, "decided/s")
	b.ReportMetric(res.ClientAllocsPerReq, "client-allocs/req")
}

// TestGOGCSetting records the collector in force, off included (the
// runtime's metric reads -1 as a uint64).
func TestGOGCSetting(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(250))
	if got := gogcSetting(); got != "250" {
		t.Errorf("at 250: %q", got)
	}
	debug.SetGCPercent(-1)
	if got := gogcSetting(); got != "off" {
		t.Errorf("off: %q", got)
	}
}
