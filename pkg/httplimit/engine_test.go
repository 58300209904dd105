package httplimit

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/pkg/breaker"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/wire"
)

// engineLimits are the limits of the engines, which decide on the real
// clock: 3 requests a client in any hour. A sliding log has no window end
// for the requests of a test to straddle (across a fixed minute's end, all
// 6 of TestEngineInMemory's could be admitted); the fake-clock tests keep
// limits.
const engineLimits = `domain: api
descriptors:
  - key: client
    rate_limit: {name: per-client, unit: hour, requests_per_unit: 3, algorithm: sliding_log}
`

func configFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "limits.yaml")
	if err := os.WriteFile(path, []byte(engineLimits), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func newEngine(t *testing.T, opts EngineOptions) *Engine {
	t.Helper()
	e, err := NewEngine(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func perKey(t *testing.T, l Limiter) *Middleware {
	t.Helper()
	m, err := New(Options{Limiter: l, Domain: "api", Descriptors: []Descriptor{{{Key: "client", Value: Header("X-Client")}}}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// admitted sends n requests for client through each middleware in turn and
// counts the 200s.
func admitted(t *testing.T, n int, client string, ms ...*Middleware) int {
	t.Helper()
	ok := 0
	for i := range n {
		if serve(t, ms[i%len(ms)], get("/", "X-Client", client)).Code == http.StatusOK {
			ok++
		}
	}
	return ok
}

func TestEngineInMemory(t *testing.T) {
	m := perKey(t, newEngine(t, EngineOptions{Config: configFile(t)}))
	if n := admitted(t, 6, "a", m); n != 3 {
		t.Errorf("admitted %d of 6 on 3 an hour", n)
	}
	if n := admitted(t, 6, "a\xff", m); n != 3 {
		t.Errorf("a header with a 0xFF byte: admitted %d of 6 on 3 an hour", n)
	}
	if _, err := NewEngine(EngineOptions{}); err == nil {
		t.Error("NewEngine without a config: no error")
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"), 0o644)
	if _, err := NewEngine(EngineOptions{Config: bad}); err == nil {
		t.Error("NewEngine on an invalid config: no error")
	}
}

// TestEngineSharedRedis: two instances of a service, each with its own
// Engine on one real Redis, admit the limit between them.
func TestEngineSharedRedis(t *testing.T) {
	srv := redistest.Start(t)
	cfg := configFile(t)
	reg := prometheus.NewRegistry()
	// Clients configured as EngineOptions.Redis advises.
	client := func() *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialerRetries: 1})
		t.Cleanup(func() { c.Close() })
		return c
	}
	// The breaker's settings reach it, as the server's flags do.
	if _, err := NewEngine(EngineOptions{Config: cfg, Redis: client(), Breaker: breaker.Options{FailureRatio: 2}}); err == nil || !strings.Contains(err.Error(), "failure ratio") {
		t.Errorf("NewEngine with a failure ratio of 2: err %v, want the breaker's refusal", err)
	}
	a := perKey(t, newEngine(t, EngineOptions{Config: cfg, Redis: client(), Timeout: 1e9, Registerer: reg}))
	b := perKey(t, newEngine(t, EngineOptions{Config: cfg, Redis: client(), Timeout: 1e9}))
	if n := admitted(t, 10, "shared", a, b); n != 3 {
		t.Errorf("two instances on one Redis admitted %d of 10 on 3 an hour; want 3", n)
	}
	// Redis gone: the default failure mode answers an error, and the
	// middleware serves (fail open).
	srv.Kill()
	if n := admitted(t, 4, "during-outage", a); n != 4 {
		t.Errorf("with Redis down: %d of 4 served; want all (fail open)", n)
	}
	// The store metrics follow the outage.
	if got := gathered(t, reg, "sluice_store_errors_total"); got < 1 {
		t.Errorf("sluice_store_errors_total = %v after failed store calls; want ≥ 1", got)
	}
}

// gathered is the value of the unlabelled metric name in reg.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			m := f.GetMetric()[0]
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

// TestRemote: the same answers from a sluice server over gRPC.
func TestRemote(t *testing.T) {
	e := newEngine(t, EngineOptions{Config: configFile(t)})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.ForceServerCodecV2(wire.Codec{}))
	rlsv3.RegisterRateLimitServiceServer(gs, e.srv.Service) // as cmd/server serves its rls.Service
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	m := perKey(t, Remote(rlsv3.NewRateLimitServiceClient(conn)))
	if n := admitted(t, 5, "r", m); n != 3 {
		t.Errorf("through a remote server: %d of 5 admitted; want 3", n)
	}
	// A header holding bytes that are not UTF-8 is limited too, on its own
	// count (it used to fail the call, and the middleware failed open).
	if n := admitted(t, 5, "r\xff", m); n != 3 {
		t.Errorf("a header with a 0xFF byte through a remote server: %d of 5 admitted; want 3", n)
	}
	rec := serve(t, m, get("/", "X-Client", "r"))
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get(limiter.HeaderReason) != "per-client" || rec.Body.Len() == 0 {
		t.Errorf("429 through a remote server: %d, reason %q, body %q", rec.Code, rec.Header().Get(limiter.HeaderReason), rec.Body)
	}
}
