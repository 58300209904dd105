package localtier

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/cache"
	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/global"
	"github.com/sluicehq/sluice/pkg/rls"
)

const limits = `domain: edge
descriptors:
  - key: client
    rate_limit: {name: per-client, unit: hour, requests_per_unit: 5, algorithm: fixed_window}
  - key: bucket
    rate_limit: {name: bucket, unit: hour, requests_per_unit: 20}
`

// countingUpstream is a real upstream rls.Service on the in-memory
// store, reached over gRPC, with calls counted; fail makes it unreachable.
type countingUpstream struct {
	client rlsv3.RateLimitServiceClient
	calls  atomic.Int64
	fail   atomic.Bool
	store  *global.Memory
}

func (u *countingUpstream) ShouldRateLimit(ctx context.Context, in *rlsv3.RateLimitRequest, opts ...grpc.CallOption) (*rlsv3.RateLimitResponse, error) {
	u.calls.Add(1)
	if u.fail.Load() {
		return nil, errors.New("connection refused")
	}
	return u.client.ShouldRateLimit(ctx, in, opts...)
}

func mustConfig(t *testing.T) *config.Config {
	cfg, err := config.Parse(map[string][]byte{"l.yaml": []byte(limits)})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func upstream(t *testing.T) *countingUpstream {
	cfg := mustConfig(t)
	m, _ := global.NewMemory(global.MemoryOptions{})
	svc, err := rls.New(rls.Options{Config: func() *config.Config { return cfg }, Decider: rls.Direct{Store: m}})
	if err != nil {
		t.Fatal(err)
	}
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	gs := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(gs, svc)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &countingUpstream{client: rlsv3.NewRateLimitServiceClient(conn), store: m}
}

// sidecar is an rls.Service on a Tier in front of up.
func sidecar(t *testing.T, up Upstream, opts Options) (*rls.Service, *Tier) {
	cfg := mustConfig(t)
	flags, _ := cache.New(1000)
	opts.Upstream, opts.Cache = up, flags
	if opts.Timeout == 0 {
		opts.Timeout = 5 * time.Second // -race on a shared machine
	}
	tier, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tier.Close() })
	svc, err := rls.New(rls.Options{Config: func() *config.Config { return cfg }, Decider: tier, Cache: flags})
	if err != nil {
		t.Fatal(err)
	}
	return svc, tier
}

func req(key, value string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: value}},
	}}}
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
		resp, err := s.ShouldRateLimit(context.Background(), req("client", "c"))
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode == rlsv3.RateLimitResponse_OK {
			ok++
		}
	}
	if ok != 5 {
		t.Fatalf("two sync sidecars admitted %d of a limit of 5", ok)
	}
}

func TestAsyncRecordsEveryAdmittedHit(t *testing.T) {
	up := upstream(t)
	s, tier := sidecar(t, up, Options{Mode: Async, FlushInterval: time.Hour, BatchSize: 1 << 20})
	ok := 0
	for range 8 {
		resp, err := s.ShouldRateLimit(context.Background(), req("bucket", "b"))
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode == rlsv3.RateLimitResponse_OK {
			ok++
		}
	}
	if ok != 8 || up.calls.Load() != 0 {
		t.Fatalf("async: %d admitted with %d upstream calls before a flush; want 8 from memory, 0 calls", ok, up.calls.Load())
	}
	tier.Close() // flushes
	if n := up.calls.Load(); n != 1 {
		t.Fatalf("%d upstream calls for one flush of one key; want 1", n)
	}
	// The upstream recorded all 8: 12 of 20 left.
	check := req("bucket", "b")
	check.Descriptors[0].HitsAddend = nil
	check.HitsAddend = 0
	resp, err := up.client.ShouldRateLimit(context.Background(), check)
	if err != nil || resp.Statuses[0].LimitRemaining != 11 {
		t.Fatalf("upstream after the flush: %v %v; want 11 left (20 − 8 recorded − 1 now)", resp, err)
	}
}

func TestAsyncFlagsOverLimitKeys(t *testing.T) {
	up := upstream(t)
	s, tier := sidecar(t, up, Options{Mode: Async, FlushInterval: time.Hour, BatchSize: 1 << 20})
	// Another client used the whole limit upstream.
	for range 5 {
		up.client.ShouldRateLimit(context.Background(), req("client", "x"))
	}
	s.ShouldRateLimit(context.Background(), req("client", "x")) // admitted locally
	tier.flush()                                                // upstream: used up (debt)
	resp, _ := s.ShouldRateLimit(context.Background(), req("client", "x"))
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("after the upstream said over limit: %v; want OVER_LIMIT from the flag cache", resp.OverallCode)
	}
}

func TestUpstreamDownFallback(t *testing.T) {
	for _, mode := range []Mode{Sync, Async} {
		t.Run(mode.String(), func(t *testing.T) {
			up := upstream(t)
			up.fail.Store(true)
			s, tier := sidecar(t, up, Options{Mode: mode, FallbackShare: 0.5, FlushInterval: time.Hour})
			if mode == Async {
				// Async learns of the outage from a failed flush.
				s.ShouldRateLimit(context.Background(), req("bucket", "first"))
				tier.flush()
				if tier.Healthy() {
					t.Fatal("Healthy() after a failed flush")
				}
			}
			ok := 0
			for range 30 {
				resp, err := s.ShouldRateLimit(context.Background(), req("bucket", "down"))
				if err != nil {
					t.Fatal(err)
				}
				if resp.OverallCode == rlsv3.RateLimitResponse_OK {
					ok++
				}
			}
			// Half of the local share of 20.
			if ok != 10 {
				t.Fatalf("upstream down: %d admitted; want 10 (fallback share 0.5 of 20)", ok)
			}
			if tier.Healthy() && mode == Sync {
				t.Error("Healthy() with the upstream down")
			}
		})
	}
}

// TestFractionOneNeverRejectsWhatGlobalAdmits: at fraction 1.0 the local
// bucket, fed the admitted sequence, rejects only where a global token
// bucket with the same limit fed the same sequence also rejects.
func TestFractionOneNeverRejectsWhatGlobalAdmits(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	p := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 10, Window: 1_000_000, Burst: 15}
	for run := 0; run < 200; run++ {
		local, _ := global.NewMemory(global.MemoryOptions{})
		var g algorithm.State
		now := int64(1_780_000_000_000_000)
		for i := 0; i < 200; i++ {
			now += rng.Int64N(300_000)
			cost := 1 + rng.Int64N(3)
			items := scaled([]global.Item{{Key: "k", Params: p, Cost: cost}}, 1.0)
			out := make([]global.Result, 1)
			local.DecideAt(items, out, now)
			gs, gr := algorithm.Decide(g, p, now, cost, algorithm.Take)
			if !out[0].Allowed && gr.Allowed {
				t.Fatalf("run %d step %d: local rejected cost %d that the global bucket admits", run, i, cost)
			}
			if out[0].Allowed {
				g, _ = algorithm.Decide(g, p, now, cost, algorithm.Force) // the admitted sequence reaches the global state
			} else {
				g = gs
			}
		}
	}
}
