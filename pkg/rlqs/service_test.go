package rlqs

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/internal/testkit/rlqsenvoy"
	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/global"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/peerauth"
)

// nobody refuses every caller, as a server without sidecar credentials
// does.
type nobody struct{}

func (nobody) Authenticate(context.Context) (string, peerauth.Refusal) {
	return "", peerauth.NotConfigured
}

// serveQuota serves a Service on the memory store over loopback gRPC.
func serveQuota(t *testing.T, auth Authenticator) (*grpc.ClientConn, *Service) {
	t.Helper()
	cfg, err := config.Parse(map[string][]byte{"q.yaml": []byte(modelLimits)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := global.NewMemory(global.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	core, err := limiter.New(limiter.Options{Config: func() *config.Config { return cfg }, Decider: limiter.Infallible{Store: m}})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(Options{Config: func() *config.Config { return cfg }, Decider: core, Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	rlqsv3.RegisterRateLimitQuotaServiceServer(gs, svc)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, svc
}

// TestFleetOverGRPC: five model Envoys flood a limit of 100 a second over
// real gRPC for six seconds, a periodic report included: they admit
// within 1.05 of an exact limiter fed the same requests.
func TestFleetOverGRPC(t *testing.T) {
	conn, svc := serveQuota(t, anyone{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exact := exactLimiter(t, "bucket")
	var (
		mu                sync.Mutex
		admitted, decided int
		wg                sync.WaitGroup
	)
	start := time.Now()
	for range 5 {
		var e *rlqsenvoy.Envoy
		e = rlqsenvoy.New("quota", rlqsenvoy.GRPC(ctx, conn, func() *rlqsenvoy.Envoy { return e }, time.Now))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < 6*time.Second {
				now := time.Now()
				ok := e.Request(map[string]string{"name": "bucket"}, rlqsenvoy.Settings{}, now)
				e.Tick(now)
				mu.Lock()
				if ok {
					admitted++
				}
				if exact(now) {
					decided++
				}
				mu.Unlock()
				time.Sleep(2 * time.Millisecond) // 500 a second each: a flood of 25×
			}
		}()
	}
	wg.Wait()
	ratio := float64(admitted) / float64(decided)
	t.Logf("admitted %d, exact %d: %.3f; %v reports, %v pushes", admitted, decided, ratio,
		testutil.ToFloat64(svc.m.reports), testutil.ToFloat64(svc.m.pushes))
	if ratio > 1.05 {
		t.Errorf("admitted %.3f of exact; want at most 1.05", ratio)
	}
	if testutil.ToFloat64(svc.m.reports) < 10 {
		t.Errorf("%v reports; want each Envoy's first and at least one periodic", testutil.ToFloat64(svc.m.reports))
	}
}

// TestStreamRefusedWithoutCredentials: a caller the server does not know
// opens no stream.
func TestStreamRefusedWithoutCredentials(t *testing.T) {
	conn, svc := serveQuota(t, nobody{})
	st, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.Recv()
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a stranger's stream: %v; want PermissionDenied", err)
	}
	if n := testutil.ToFloat64(svc.m.refused.WithLabelValues(string(peerauth.NotConfigured))); n != 1 {
		t.Errorf("refusals counted %v; want 1", n)
	}
}

// TestHostileReports: reports past the bounds end the stream or are
// skipped, counted; numbers past what a descriptor carries are capped;
// nothing panics.
func TestHostileReports(t *testing.T) {
	s := newSim(t, time.Unix(1_700_000_040, 0))
	usage := func(id map[string]string, allowed, denied uint64, elapsed time.Duration) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
		return &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqsv3.BucketId{Bucket: id},
			TimeElapsed: durationpb.New(elapsed), NumRequestsAllowed: allowed, NumRequestsDenied: denied}
	}
	newStream := func() *stream {
		return &stream{id: s.svc.ids.Add(1), buckets: make(map[string]*bucket), pokes: make(chan string, maxPokes)}
	}
	ctx := context.Background()
	cases := []struct {
		name string
		msg  *rlqsv3.RateLimitQuotaUsageReports
		code codes.Code
	}{
		{"no domain", &rlqsv3.RateLimitQuotaUsageReports{}, codes.InvalidArgument},
		{"a domain too long", &rlqsv3.RateLimitQuotaUsageReports{Domain: string(make([]byte, maxDomainLen+1))}, codes.InvalidArgument},
		{"too many buckets in one report", func() *rlqsv3.RateLimitQuotaUsageReports {
			m := &rlqsv3.RateLimitQuotaUsageReports{Domain: "quota"}
			for range DefaultMaxBucketsPerStream + 1 {
				m.BucketQuotaUsages = append(m.BucketQuotaUsages, usage(map[string]string{"name": "bucket"}, 1, 0, time.Second))
			}
			return m
		}(), codes.ResourceExhausted},
	}
	for _, c := range cases {
		if _, err := s.svc.report(ctx, newStream(), c.msg); status.Code(err) != c.code {
			t.Errorf("%s: %v; want %v", c.name, err, c.code)
		}
	}
	ss := newStream()
	big := map[string]string{}
	for i := range config.MaxBucketEntries + 1 {
		big[string(rune('a'+i))] = "v"
	}
	resp, err := s.svc.report(ctx, ss, &rlqsv3.RateLimitQuotaUsageReports{Domain: "quota", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		usage(big, 1, 0, time.Second),
		usage(map[string]string{"name": ""}, 1, 0, time.Second),
		usage(map[string]string{"name": "bucket"}, 1<<63, 1<<63, 5*time.Second),
		usage(map[string]string{"name": "nothing-limits-it"}, 10, 0, -time.Hour),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(s.svc.m.refused.WithLabelValues("bad_bucket")); n != 2 {
		t.Errorf("bad buckets counted %v; want 2", n)
	}
	if len(resp.GetBucketAction()) != 2 {
		t.Fatalf("%d actions; want 2 (the limited bucket and the unlimited one)", len(resp.GetBucketAction()))
	}
	if b := ss.buckets[mustCanonical(t, map[string]string{"name": "bucket"})]; b == nil || !b.idle.IsZero() {
		t.Error("a bucket reported with 2^64 requests taken as idle (the sum wrapped to 0)")
	}
	if got := testutil.ToFloat64(s.svc.m.recorded.WithLabelValues("ok")); got != float64(limiter.MaxCost) {
		t.Errorf("recorded %v requests; want the most one descriptor carries, %d", got, uint64(limiter.MaxCost))
	}
	if a := resp.GetBucketAction()[1].GetQuotaAssignmentAction().GetRateLimitStrategy().GetBlanketRule(); a.String() != "ALLOW_ALL" {
		t.Errorf("a bucket no limit takes: %v; want ALLOW_ALL", a)
	}
	if _, err := s.svc.report(ctx, ss, &rlqsv3.RateLimitQuotaUsageReports{Domain: "other"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("another domain on the stream: %v; want InvalidArgument", err)
	}
}

// TestAbandonIdleBuckets: a bucket reported with no requests for
// AbandonAfter is abandoned; Envoy drops it, and its next request makes
// it anew with a first report.
func TestAbandonIdleBuckets(t *testing.T) {
	s := newSim(t, time.Unix(1_700_000_040, 0))
	e := s.addEnvoy(0)
	id := map[string]string{"name": "bucket"}
	e.env.Request(id, rlqsenvoy.Settings{}, s.now)
	s.settle()
	s.run(id, DefaultAbandonAfter+2*ReportInterval, 100*time.Millisecond, func(time.Time) bool { return true })
	if n := e.env.Buckets(); n != 0 {
		t.Fatalf("after %s idle: Envoy holds %d buckets; want 0 (abandoned)", DefaultAbandonAfter, n)
	}
	if n := testutil.ToFloat64(s.svc.m.assignments.WithLabelValues("abandon")); n != 1 {
		t.Errorf("abandons counted %v; want 1", n)
	}
	if !e.env.Request(id, rlqsenvoy.Settings{}, s.now) {
		t.Error("the bucket's next request refused; want allowed as a new bucket's first")
	}
	s.settle()
	if n := e.env.Buckets(); n != 1 {
		t.Errorf("after a new request: %d buckets; want 1", n)
	}
}

func mustCanonical(t *testing.T, id map[string]string) string {
	t.Helper()
	name, ok := canonical(&rlqsv3.BucketId{Bucket: id})
	if !ok {
		t.Fatalf("%v: not a bucket id", id)
	}
	return name
}
