package localtier

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/cache"
	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/global"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/peerauth"
	"github.com/sluicehq/sluice/pkg/rls"
)

const limits = `domain: edge
descriptors:
  - key: client
    rate_limit: {name: per-client, unit: hour, requests_per_unit: 5, algorithm: fixed_window}
  - key: bucket
    rate_limit: {name: bucket, unit: hour, requests_per_unit: 20}
  - key: route
    rate_limit: {name: per-route, unit: hour, requests_per_unit: 3}
`

// countingUpstream is a real upstream rls.Service on the in-memory store,
// reached over loopback gRPC, with its calls counted; while fail is set it
// answers like an unreachable address, without reaching the service.
type countingUpstream struct {
	client rlsv3.RateLimitServiceClient
	calls  atomic.Int64
	fail   atomic.Bool
}

func (u *countingUpstream) ShouldRateLimit(ctx context.Context, in *rlsv3.RateLimitRequest, opts ...grpc.CallOption) (*rlsv3.RateLimitResponse, error) {
	u.calls.Add(1)
	if u.fail.Load() {
		return nil, errors.New("connection refused")
	}
	return u.client.ShouldRateLimit(ctx, in, opts...)
}

func mustConfig(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := config.Parse(map[string][]byte{"l.yaml": []byte(limits)})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func upstream(t *testing.T) *countingUpstream {
	t.Helper()
	m, err := global.NewMemory(global.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return serveUpstream(t, mustConfig(t), m)
}

// serveUpstream serves an rls.Service on cfg and store m over loopback
// gRPC, as cmd/server does (with gRPC's default 4 MB message limit).
func serveUpstream(t *testing.T, cfg *config.Config, m *global.Memory) *countingUpstream {
	t.Helper()
	return serveService(t, limiter.Options{Config: func() *config.Config { return cfg }, Decider: limiter.Infallible{Store: m}, Refunds: true})
}

// serveService serves an rls.Service on the core opts describe.
func serveService(t *testing.T, opts limiter.Options) *countingUpstream {
	t.Helper()
	svc, err := newService(opts)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(gs, svc)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &countingUpstream{client: rlsv3.NewRateLimitServiceClient(conn)}
}

// sidecar is an rls.Service on a Tier in front of up, as cmd/localfilter
// wires them.
func sidecar(t *testing.T, up Upstream, opts Options) (*rls.Service, *Tier) {
	t.Helper()
	return sidecarOn(t, mustConfig(t), up, opts)
}

// sidecarOn is sidecar with the limits of cfg.
func sidecarOn(t *testing.T, cfg *config.Config, up Upstream, opts Options) (*rls.Service, *Tier) {
	t.Helper()
	flags, _ := cache.New(1000)
	opts.Upstream, opts.Cache = up, flags
	if opts.Timeout == 0 {
		opts.Timeout = 5 * time.Second // -race on a shared machine
	}
	if opts.LooseHold == 0 {
		opts.LooseHold = -1 // every flush sends every key, unless the test holds
	}
	tier, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tier.Close() })
	svc, err := newService(limiter.Options{Config: func() *config.Config { return cfg }, Decider: tier, Cache: flags, Now: opts.Now, Refunds: true})
	if err != nil {
		t.Fatal(err)
	}
	return svc, tier
}

func req(kv ...string) *rlsv3.RateLimitRequest {
	r := &rlsv3.RateLimitRequest{Domain: "edge"}
	for i := 0; i < len(kv); i += 2 {
		r.Descriptors = append(r.Descriptors, &ratelimitv3.RateLimitDescriptor{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: kv[i], Value: kv[i+1]}},
		})
	}
	return r
}

// admit sends n requests and returns how many were admitted.
func admit(t *testing.T, s *rls.Service, n int, r *rlsv3.RateLimitRequest) int {
	t.Helper()
	ok := 0
	for range n {
		resp, err := s.ShouldRateLimit(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode == rlsv3.RateLimitResponse_OK {
			ok++
		}
	}
	return ok
}

// remaining asks up, as Envoy would, what is left of a limit.
func remaining(t *testing.T, up *countingUpstream, kv ...string) uint32 {
	t.Helper()
	check := req(kv...)
	for _, d := range check.Descriptors {
		d.HitsAddend = wrapperspb.UInt64(0)
	}
	resp, err := up.client.ShouldRateLimit(context.Background(), check)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Statuses[0].LimitRemaining
}

func TestSyncExactAcrossSidecars(t *testing.T) {
	up := upstream(t)
	a, _ := sidecar(t, up, Options{Mode: Sync})
	b, _ := sidecar(t, up, Options{Mode: Sync})
	ok := 0
	for i := range 12 {
		s := a
		if i%2 == 1 {
			s = b
		}
		ok += admit(t, s, 1, req("client", "c"))
	}
	if ok != 5 {
		t.Fatalf("two sync sidecars admitted %d of a limit of 5", ok)
	}
}

// TestSyncRejectGivesLocalTokensBack: what the upstream rejects costs the
// local bucket nothing, so the local bucket never runs dry before the
// global limit does.
func TestSyncRejectGivesLocalTokensBack(t *testing.T) {
	up := upstream(t)
	_, tier := sidecar(t, up, Options{Mode: Sync})
	// Another proxy used the whole limit of 3.
	for range 3 {
		up.client.ShouldRateLimit(context.Background(), req("route", "r"))
	}
	b := batch("route", "r", routeParams, 1)
	if err := tier.Decide(context.Background(), b); err != nil || b.Results[0].Allowed || b.Source != limiter.SourceGlobal {
		t.Fatalf("Decide = %v, %+v from %q; want rejected by the global tier", err, b.Results[0], b.Source)
	}
	check := batch("route", "r", routeParams, 0)
	tier.takeLocal(check, 1, time.Now())
	if got := check.Results[0].Remaining; got != 3 {
		t.Errorf("local bucket after a globally rejected request holds %d; want all 3", got)
	}
}

func TestAsyncRecordsEveryAdmittedHit(t *testing.T) {
	up := upstream(t)
	s, tier := sidecar(t, up, Options{Mode: Async, FlushInterval: time.Hour, BatchSize: 1 << 20})
	if ok := admit(t, s, 8, req("bucket", "b")); ok != 8 || up.calls.Load() != 0 {
		t.Fatalf("async: %d admitted with %d upstream calls before a flush; want 8 from memory, 0 calls", ok, up.calls.Load())
	}
	tier.Close() // flushes
	if n := up.calls.Load(); n != 1 {
		t.Fatalf("%d upstream calls for one flush of one key; want 1", n)
	}
	if left := remaining(t, up, "bucket", "b"); left != 12 {
		t.Fatalf("upstream after the flush: %d left; want 12 (20 − 8 recorded)", left)
	}
}

// TestAsyncRecordsPastTheLimit: hits admitted locally are recorded even
// where the global limit has no room for them (debt), and the answer flags
// the key until the debt is repaid.
func TestAsyncRecordsPastTheLimit(t *testing.T) {
	up := upstream(t)
	s, tier := sidecar(t, up, Options{Mode: Async, FlushInterval: time.Hour, BatchSize: 1 << 20})
	// Another client used 4 of the 5 upstream.
	for range 4 {
		up.client.ShouldRateLimit(context.Background(), req("client", "x"))
	}
	if ok := admit(t, s, 3, req("client", "x")); ok != 3 {
		t.Fatalf("admitted %d from memory; want 3", ok)
	}
	tier.flush(nil, true)
	// 4 + 3 recorded on a limit of 5: the next request is over limit, from
	// the flag cache, without another upstream call.
	calls := up.calls.Load()
	resp, err := s.ShouldRateLimit(context.Background(), req("client", "x"))
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("after recording past the limit: %v %v; want OVER_LIMIT from the flag cache", resp, err)
	}
	if up.calls.Load() != calls {
		t.Error("the flagged key cost an upstream call")
	}
	resp, err = up.client.ShouldRateLimit(context.Background(), req("client", "x"))
	if err != nil || resp.Statuses[0].LimitRemaining != 0 || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("upstream after the flush: %v %v; want used up", resp, err)
	}
}

func TestAsyncBatchesPerKeyAndDomain(t *testing.T) {
	up := upstream(t)
	reg := prometheus.NewRegistry()
	s, tier := sidecar(t, up, Options{Mode: Async, FlushInterval: time.Hour, BatchSize: 1 << 20, Registerer: reg})
	for i := range 100 {
		admit(t, s, 2, req("bucket", "k"+strings.Repeat("x", i%70)))
	}
	tier.flush(nil, true)
	// 70 keys: two calls (64 descriptors at most per call).
	if n := up.calls.Load(); n != 2 {
		t.Errorf("%d upstream calls for 70 keys; want 2", n)
	}
	if got := testutil.ToFloat64(tier.m.upstreamCalls.WithLabelValues(rls.SidecarRecord, "ok")); got != 2 {
		t.Errorf("upstream calls metric = %v; want 2", got)
	}
	if left := remaining(t, up, "bucket", "k"); left != 20-4 {
		t.Errorf("key k: %d left upstream; want 16 (2 requests × 2 rounds recorded)", left)
	}
}

// TestUpstreamDown: the sidecar keeps answering at the fallback share,
// probes the upstream once per RetryInterval, and recovers when it returns;
// async hits admitted meanwhile are recorded then.
func TestUpstreamDown(t *testing.T) {
	for _, mode := range []Mode{Sync, Async} {
		t.Run(mode.String(), func(t *testing.T) {
			up := upstream(t)
			up.fail.Store(true)
			clock := newClock()
			s, tier := sidecar(t, up, Options{Mode: mode, FallbackShare: 0.5, FlushInterval: time.Hour, RetryInterval: time.Second, Now: clock.Now})
			if mode == Async {
				// Async learns of the outage from a failed flush.
				admit(t, s, 1, req("bucket", "first"))
				tier.flush(nil, true)
			} else {
				admit(t, s, 1, req("bucket", "first"))
			}
			if tier.Healthy() {
				t.Fatal("Healthy() after a failed call")
			}
			calls := up.calls.Load()
			// Half of the local share of 20.
			if ok := admit(t, s, 30, req("bucket", "down")); ok != 10 {
				t.Fatalf("upstream down: %d admitted; want 10 (fallback share 0.5 of 20)", ok)
			}
			if up.calls.Load() != calls {
				t.Fatalf("%d upstream calls within the retry interval; want none", up.calls.Load()-calls)
			}
			up.fail.Store(false)
			clock.Advance(time.Second)
			if mode == Async {
				tier.flush(nil, true)
			} else {
				admit(t, s, 1, req("bucket", "probe"))
			}
			if !tier.Healthy() {
				t.Fatal("not Healthy() after the upstream returned")
			}
			if mode == Async {
				if left := remaining(t, up, "bucket", "down"); left != 10 {
					t.Errorf("after recovery the upstream holds %d of 20 for the key; want 10 (the 10 admitted while down, recorded)", left)
				}
			}
		})
	}
}

// TestProbeOneAtATime: with the upstream down, a burst of concurrent
// requests after the retry interval sends one probe, not one call each.
func TestProbeOneAtATime(t *testing.T) {
	up := upstream(t)
	up.fail.Store(true)
	clock := newClock()
	s, tier := sidecar(t, up, Options{Mode: Sync, RetryInterval: time.Second, Now: clock.Now})
	admit(t, s, 1, req("bucket", "a"))
	if tier.Healthy() {
		t.Fatal("healthy after a failed call")
	}
	clock.Advance(time.Second)
	var wg sync.WaitGroup
	before := up.calls.Load()
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			admit(t, s, 1, req("bucket", "c"+string(rune('a'+i))))
		}()
	}
	wg.Wait()
	if n := up.calls.Load() - before; n != 1 {
		t.Errorf("%d upstream calls from 32 concurrent requests to a dead upstream; want 1 probe", n)
	}
}

// TestPendingBounded: while the upstream is away the unsent hits of at most
// MaxPending keys are kept; the rest are dropped and counted.
func TestPendingBounded(t *testing.T) {
	up := upstream(t)
	up.fail.Store(true)
	reg := prometheus.NewRegistry()
	clock := newClock()
	s, tier := sidecar(t, up, Options{Mode: Async, FlushInterval: time.Hour, BatchSize: 1 << 20, MaxPending: 65, Registerer: reg, Now: clock.Now})
	admit(t, s, 1, req("bucket", "first"))
	tier.flush(nil, true) // fails: unhealthy
	for i := range 1000 {
		admit(t, s, 1, req("bucket", "k"+strings.Repeat("y", i%200)+string(rune('a'+i%26))))
	}
	held := tier.pending.keys.Load()
	dropped := testutil.ToFloat64(tier.m.dropped)
	if held != 65 {
		t.Errorf("%d keys pending; want MaxPending, 65", held)
	}
	if dropped == 0 {
		t.Error("no dropped hits counted past MaxPending")
	}
	if got, err := testutil.GatherAndCount(reg, "sluice_localfilter_pending_keys", "sluice_localfilter_dropped_hits_total"); err != nil || got != 2 {
		t.Errorf("metrics: %d, %v", got, err)
	}
}

func TestCloseStopsTheFlusher(t *testing.T) {
	up := upstream(t)
	before := goroutines()
	for range 5 {
		tier, err := New(Options{Upstream: up, Mode: Async})
		if err != nil {
			t.Fatal(err)
		}
		tier.Close()
		tier.Close() // twice is fine
	}
	deadline := time.Now().Add(5 * time.Second)
	for goroutines() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := goroutines(); n > before {
		t.Errorf("%d goroutines after Close; %d before", n, before)
	}
}

func TestNewValidates(t *testing.T) {
	up := upstream(t)
	for _, o := range []Options{{}, {Upstream: up, Fraction: 1.5}, {Upstream: up, Fraction: -1}, {Upstream: up, FallbackShare: 2}} {
		if tier, err := New(o); err == nil {
			tier.Close()
			t.Errorf("New(%+v) accepted", o)
		}
	}
}

var routeParams = algorithm.Params{Kind: algorithm.TokenBucket, Limit: 3, Window: 3600e6, Burst: 3}

// batch is the decision one descriptor key=value needs, as the core would
// hand it to the Tier.
func batch(key, value string, p algorithm.Params, cost int64) *limiter.Batch {
	return &limiter.Batch{
		Request:     rls.Request(req(key, value)),
		Descriptors: []int{0},
		Paths:       []string{""},
		Items:       []algorithm.Item{{Key: "edge/" + key + "=" + value, Params: p, Cost: cost}},
		Results:     make([]algorithm.Result, 1),
	}
}

// clock is an injected time that tests advance.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Now()} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func goroutines() int { return runtime.NumGoroutine() }

// silentUpstream accepts calls and never answers, like a frozen server.
type silentUpstream struct{ calls atomic.Int64 }

func (u *silentUpstream) ShouldRateLimit(ctx context.Context, _ *rlsv3.RateLimitRequest, _ ...grpc.CallOption) (*rlsv3.RateLimitResponse, error) {
	u.calls.Add(1)
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestSilentUpstreamWithinCallerDeadline: Envoy's deadline (here 100ms) is
// shorter than the upstream timeout (1s): the call gives up a little before
// the caller's deadline, the request is answered locally at the fallback
// share in time, and the upstream, silent for longer than slowWindow, is
// marked away.
func TestSilentUpstreamWithinCallerDeadline(t *testing.T) {
	up := &silentUpstream{}
	clk := newClock()
	s, tier := sidecar(t, up, Options{Mode: Sync, Timeout: time.Second, FallbackShare: 0.5, Now: clk.Now})
	clk.Advance(2 * slowWindow) // silent since the start: gone, not slow
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	resp, err := s.ShouldRateLimit(ctx, req("bucket", "b"))
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("with the upstream silent: %v, %v; want an answer from the fallback before the deadline", resp, err)
	}
	if tier.Healthy() {
		t.Error("the upstream is still taken for healthy")
	}
	// Later requests are answered locally without waiting on it.
	calls := up.calls.Load()
	admit(t, s, 5, req("bucket", "c"))
	if up.calls.Load() != calls {
		t.Errorf("%d more calls to a silent upstream within the retry interval", up.calls.Load()-calls)
	}
}

// TestSyncCallerDeadlinePassedIsCounted: when the caller's deadline has
// passed by the time the upstream's call is given up (a late timer on a
// busy machine), the caller (Envoy, failing open) admitted the request
// itself: it is answered locally and counted, never dropped as a caller
// that went away, however select picks between the two ready channels.
func TestSyncCallerDeadlinePassedIsCounted(t *testing.T) {
	up := &silentUpstream{}
	clk := newClock()
	s, _ := sidecar(t, up, Options{Mode: Sync, Timeout: time.Second, FallbackShare: 0.5, Now: clk.Now})
	clk.Advance(2 * slowWindow) // silent since the start: gone, not slow
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
	defer cancel()
	for i := range 20 {
		resp, err := s.ShouldRateLimit(ctx, req("bucket", fmt.Sprint("late-", i)))
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("request %d, the caller's deadline passed: %v, %v; want a local answer", i, resp, err)
		}
	}
}

// TestAsyncProbesWithNothingPending: an async sidecar whose upstream went
// away probes it when the retry interval has passed even with no hits to
// send, so it does not stay on the fallback share once the upstream is back.
func TestAsyncProbesWithNothingPending(t *testing.T) {
	up := upstream(t)
	clock := newClock()
	_, tier := sidecar(t, up, Options{Mode: Async, FlushInterval: time.Hour, RetryInterval: time.Second, Now: clock.Now})
	tier.br.Failure(false, errors.New("connection refused"))
	tier.flush(nil, true)
	if tier.Healthy() || up.calls.Load() != 0 {
		t.Fatalf("within the retry interval: healthy %v after %d calls; want no probe yet", tier.Healthy(), up.calls.Load())
	}
	clock.Advance(time.Second)
	tier.flush(nil, true)
	if !tier.Healthy() || up.calls.Load() != 1 {
		t.Errorf("after the retry interval: healthy %v after %d calls; want one probe and healthy", tier.Healthy(), up.calls.Load())
	}
}

// refusing is an upstream that answers every request with one error code.
type refusing struct {
	code  codes.Code
	calls atomic.Int64
}

func (u *refusing) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest, ...grpc.CallOption) (*rlsv3.RateLimitResponse, error) {
	u.calls.Add(1)
	return nil, status.Error(u.code, "refused")
}

// TestAsyncRefusedHitsDropped: hits the upstream refuses (invalid, too
// large...) are dropped and counted, not sent again and again, and the
// upstream is not taken for away; an upstream that is away or refuses
// this sidecar is.
func TestAsyncRefusedHitsDropped(t *testing.T) {
	for code, refusal := range map[codes.Code]bool{
		codes.InvalidArgument: true, codes.ResourceExhausted: true, codes.FailedPrecondition: true, codes.Unimplemented: true,
		codes.Unavailable: false, codes.DeadlineExceeded: false, codes.Internal: false, codes.PermissionDenied: false,
	} {
		t.Run(code.String(), func(t *testing.T) {
			up := &refusing{code: code}
			clk := newClock()
			s, tier := sidecar(t, up, Options{Mode: Async, FlushInterval: time.Hour, Now: clk.Now})
			clk.Advance(2 * slowWindow) // a timeout, with nothing answered since the start: gone
			admit(t, s, 3, req("bucket", "b"))
			tier.flush(nil, true)
			tier.flush(nil, true)
			dropped := testutil.ToFloat64(tier.m.dropped)
			if refusal && (up.calls.Load() != 1 || !tier.Healthy() || dropped != 3) {
				t.Errorf("after two flushes: %d calls, healthy %v, %v dropped; want 1 call, healthy, 3 dropped", up.calls.Load(), tier.Healthy(), dropped)
			}
			if !refusal && (tier.Healthy() || dropped != 0 || tier.pending.keys.Load() != 1) {
				t.Errorf("after a failed flush: healthy %v, %v dropped, %d keys pending; want away, hits kept", tier.Healthy(), dropped, tier.pending.keys.Load())
			}
		})
	}
}

// TestPendingBoundedInBytes: with the upstream away, hits of requests
// carrying huge values are held by digest, a few hundred bytes a key, and
// within MaxPendingBytes (the finding: 1,500 requests with 256 KB values
// held 425 MB).
func TestPendingBoundedInBytes(t *testing.T) {
	up := upstream(t)
	up.fail.Store(true)
	clock := newClock()
	const budget = 256 << 10
	s, tier := sidecar(t, up, Options{Mode: Async, FlushInterval: time.Hour, BatchSize: 1 << 20, MaxPendingBytes: budget, Now: clock.Now})
	admit(t, s, 1, req("bucket", "first"))
	tier.flush(nil, true) // fails: the upstream is away
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	pad := strings.Repeat("v", 256<<10)
	for i := range 1500 {
		admit(t, s, 1, req("bucket", fmt.Sprint(i, pad)))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if b := tier.pending.bytes.Load(); b > budget {
		t.Errorf("%d bytes pending; want at most %d", b, budget)
	}
	if keys := tier.pending.keys.Load(); keys < 500 {
		t.Errorf("%d keys pending within %d bytes; want a digest's few hundred bytes a key", keys, budget)
	}
	if testutil.ToFloat64(tier.m.dropped) == 0 {
		t.Error("no hits dropped past MaxPendingBytes")
	}
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 16<<20 {
		t.Errorf("heap grew %d MB holding pending hits", grew>>20)
	}
}

const scannerLimits = `domain: edge
descriptors:
  - key: agent
    value: "*sqlmap*"
    rate_limit: {unit: hour, requests_per_unit: 2, name: scanners, algorithm: fixed_window}
  - key: agent
    rate_limit: {unit: hour, requests_per_unit: 100, name: per-agent, algorithm: fixed_window}
  - key: plan
    value: free
    rate_limit: {unit: hour, requests_per_unit: 5, name: free-plan, algorithm: fixed_window}
  - key: plan
    value: vip
    rate_limit: {unit: hour, requests_per_unit: 50, name: vip-plan, algorithm: fixed_window, replaces: [{name: free-plan}]}
`

// TestRecordedOnTheLimitMatched: a flush of many keys with 100 KB values
// fits one message and is recorded on the limits the sidecar matched, a
// wildcard one included (the values go by digest, which a wildcard cannot
// match again), and hits of requests decided apart are recorded apart,
// however limits replace one another (the finding: such a flush exceeded
// the server's 4 MB message limit and was taken for an outage).
func TestRecordedOnTheLimitMatched(t *testing.T) {
	cfg, err := config.Parse(map[string][]byte{"l.yaml": []byte(scannerLimits)})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := global.NewMemory(global.MemoryOptions{})
	up := serveUpstream(t, cfg, m)
	flags, _ := cache.New(1000)
	tier, err := New(Options{Upstream: up, Mode: Async, FlushInterval: time.Hour, BatchSize: 1 << 20, Timeout: 5 * time.Second, Cache: flags})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tier.Close() })
	s, err := newService(limiter.Options{Config: func() *config.Config { return cfg }, Decider: tier, Cache: flags})
	if err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("A", 100<<10)
	for i := range 64 {
		admit(t, s, 1, req("agent", fmt.Sprint(i, " sqlmap/1.7 ", pad)))
	}
	admit(t, s, 1, req("plan", "free"))
	admit(t, s, 1, req("plan", "vip"))
	tier.flush(nil, true)
	if !tier.Healthy() || testutil.ToFloat64(tier.m.dropped) != 0 {
		t.Fatalf("after the flush: healthy %v, %v dropped; want every hit recorded", tier.Healthy(), testutil.ToFloat64(tier.m.dropped))
	}
	for _, c := range []struct {
		kv   []string
		left uint32
	}{{[]string{"agent", "7 sqlmap/1.7 " + pad}, 1}, {[]string{"plan", "free"}, 4}, {[]string{"plan", "vip"}, 49}} {
		if got := remaining(t, up, c.kv...); got != c.left {
			t.Errorf("%s upstream: %d left; want %d", c.kv[0], got, c.left)
		}
	}
}

// newService is the service a sidecar serves: the core on opts, answering
// Envoy's messages.
func newService(opts limiter.Options) (*rls.Service, error) {
	core, err := limiter.New(opts)
	if err != nil {
		return nil, err
	}
	// Every caller is a sidecar (the server's -trust-any-sidecar): these
	// tests are of the tier, not of who may record.
	trust, err := peerauth.New(peerauth.Options{TrustAnyCaller: true})
	if err != nil {
		return nil, err
	}
	return rls.NewService(core, rls.WithProxies(trust, nil, nil)), nil
}

// TestNextTick: the flushes start on the epoch's multiples of the
// interval, the instants the tick numbers count, for any interval.
func TestNextTick(t *testing.T) {
	now := time.Unix(1_700_000_000, 123_456_789)
	for _, iv := range []time.Duration{time.Millisecond, 7 * time.Millisecond, 10 * time.Millisecond, 17 * time.Millisecond, 70 * time.Millisecond, time.Second} {
		next := nextTick(now, iv)
		if next.UnixNano()%int64(iv) != 0 || !next.After(now) || next.Sub(now) > iv {
			t.Errorf("interval %v: next tick %v after %v; want the next multiple of %v since the epoch", iv, next.UnixNano(), now.UnixNano(), iv)
		}
	}
}
