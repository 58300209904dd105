package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/testkit/corecfg"
	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/global"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/peerauth"
	"github.com/sluicehq/sluice/pkg/wire"
)

const testConfig = corecfg.Edge

// t0 is 15 s into a minute of the Unix epoch, in µs.
const t0 = corecfg.T0

// clockStore runs a real in-memory store at an injected time and counts
// calls.
type clockStore struct {
	m     *global.Memory
	now   atomic.Int64
	calls atomic.Int64
	err   error
}

func (c *clockStore) Decide(_ context.Context, items []algorithm.Item, out []algorithm.Result) error {
	c.calls.Add(1)
	if c.err != nil {
		return c.err
	}
	return c.m.DecideAt(items, out, c.now.Load())
}

func newClockStore(t testing.TB) *clockStore {
	m, err := global.NewMemory(global.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := &clockStore{m: m}
	c.now.Store(t0)
	return c
}

func mustConfig(t *testing.T, src string) *config.Config {
	t.Helper()
	cfg, err := config.Parse(map[string][]byte{"test.yaml": []byte(src)})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// trustAny makes every caller a sidecar, as a server started with
// -trust-any-sidecar does: for tests of the record path itself.
func trustAny(t testing.TB) ServiceOption {
	t.Helper()
	a, err := peerauth.New(peerauth.Options{TrustAnyCaller: true})
	if err != nil {
		t.Fatal(err)
	}
	return WithProxies(a, slog.New(slog.DiscardHandler), nil)
}

type harness struct {
	client rlsv3.RateLimitServiceClient
	store  *clockStore
	svc    *Service
}

// start serves a Service over gRPC on 127.0.0.1:0 and returns a client.
func start(t *testing.T, opts limiter.Options, sopts ...ServiceOption) *harness {
	t.Helper()
	h := &harness{store: newClockStore(t)}
	if opts.Config == nil {
		cfg := mustConfig(t, testConfig)
		opts.Config = func() *config.Config { return cfg }
	}
	if opts.Now == nil {
		opts.Now = func() time.Time { return time.UnixMicro(h.store.now.Load()) }
	}
	if opts.Decider == nil {
		fallback, _ := global.NewMemory(global.MemoryOptions{})
		d, err := limiter.NewStoreDecider(limiter.StoreOptions{Store: h.store, Mode: limiter.FailError, Fallback: fallback})
		if err != nil {
			t.Fatal(err)
		}
		opts.Decider = d
	}
	core, err := limiter.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	svc := NewService(core, sopts...)
	h.svc = svc
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(wire.Codec{})) // as the daemons serve it
	rlsv3.RegisterRateLimitServiceServer(srv, svc)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	// The client writes strings as Envoy does, bytes unchecked.
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(wire.Codec{})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	h.client = rlsv3.NewRateLimitServiceClient(conn)
	return h
}

func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func (h *harness) call(t *testing.T, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := h.client.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v) = %v", req, err)
	}
	return resp
}

func codesOf(resp *rlsv3.RateLimitResponse) string {
	var s []string
	for _, st := range resp.GetStatuses() {
		s = append(s, st.GetCode().String())
	}
	return resp.GetOverallCode().String() + ":" + strings.Join(s, ",")
}

// TestBadRequests: what Envoy's message can say and the core has no word
// for (hits that subtract, a nil descriptor) is refused, and every bad
// request is answered InvalidArgument with the core's reason, before the
// store is asked. (The core's own rules: limiter's TestBadRequests.)
func TestBadRequests(t *testing.T) {
	h := start(t, limiter.Options{})
	negative := desc("api_key", "x")
	negative.IsNegativeHits = true
	tests := []struct {
		name string
		req  *rlsv3.RateLimitRequest
		msg  string
	}{
		{"negative hits", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("api_key", "y"), negative}}, "descriptor 1: is_negative_hits: this service's decider applies no refunds"},
		{"nil descriptor", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{nil}}, "descriptor 0: no entries"},
		{"empty domain", &rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("api_key", "x")}}, "domain is empty"},
		{"override unit unknown", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: desc("api_key", "x").Entries, Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1},
		}}}, "limit override: not a unit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := h.store.calls.Load()
			_, err := h.client.ShouldRateLimit(context.Background(), tt.req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tt.msg) {
				t.Fatalf("ShouldRateLimit = %v; want InvalidArgument containing %q", err, tt.msg)
			}
			if h.store.calls.Load() != before {
				t.Error("a bad request reached the store")
			}
		})
	}
}

// TestGRPCErrors: the core's errors become gRPC status codes here, and
// nowhere else: a bad request InvalidArgument; a store the failure mode
// leaves to Envoy, or no config yet, Unavailable (Envoy's
// failure_mode_deny decides); a sidecar's call the store did not answer in
// time, or the caller's deadline, DeadlineExceeded; the caller gone,
// Canceled; anything else Internal.
func TestGRPCErrors(t *testing.T) {
	for _, tt := range []struct {
		err  error
		code codes.Code
	}{
		{limiter.Invalidf("domain is empty"), codes.InvalidArgument},
		{fmt.Errorf("%w: connection refused", limiter.ErrUnavailable), codes.Unavailable},
		{limiter.ErrNoConfig, codes.Unavailable},
		{limiter.ErrLate, codes.DeadlineExceeded},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
		{context.Canceled, codes.Canceled},
		{errors.New("surprise"), codes.Internal},
	} {
		got := grpcError(tt.err)
		if s := status.Convert(got); s.Code() != tt.code || s.Message() != tt.err.Error() {
			t.Errorf("grpcError(%v) = %v; want %v with the error's message", tt.err, got, tt.code)
		}
	}
	// Through the service: a store down under failure mode error.
	h := start(t, limiter.Options{})
	h.store.err = errors.New("connection refused")
	_, err := h.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("api_key", "x")}})
	if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "connection refused") {
		t.Errorf("a store refusing connections, failure mode error: %v; want Unavailable", err)
	}
}
