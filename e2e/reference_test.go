package e2e

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/internal/testkit/testpki"
	"github.com/sluicehq/sluice/internal/testkit/xdstest"
)

// TestReferenceEnvironment starts the built server with nothing but the
// environment a deployment of envoyproxy/ratelimit gives it — its config
// files under RUNTIME_ROOT, its gRPC port with mTLS, Redis over TCP, its
// log settings — and decides requests on Redis, answering /healthcheck
// as the reference does, and saying which settings came from where.
func TestReferenceEnvironment(t *testing.T) {
	rdb := redistest.Start(t)
	ca := testpki.New(t)
	cert, key := ca.Issue(t, "ratelimit", "ratelimit.envoy-gateway-system")
	envoyCert, envoyKey := ca.Issue(t, "envoy", "envoy.envoy-gateway-system")
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// A config the reference's current README documents, its newer fields included.
	if err := os.WriteFile(filepath.Join(dir, "limits.yaml"), []byte(`domain: gateway
descriptors:
  - key: path
    value: /files/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: tenant
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 100}
    metadata: {plan: free}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false", "RUNTIME_IGNOREDOTFILES=true",
		"USE_STATSD=false", "LOG_LEVEL=info", "LOG_FORMAT=json",
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "HOST=127.0.0.1", "PORT=0",
		"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=" + cert, "GRPC_SERVER_TLS_KEY=" + key, "GRPC_CLIENT_TLS_CACERT=" + ca.Path("ca.pem"),
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + rdb.Addr,
		"USE_PROMETHEUS=true", "PROMETHEUS_ADDR=:19001",
	}
	server := startEnv(t, "server", "ratelimit", env, nil)
	client := tlsClient(t, server.GRPC, ca, envoyCert, envoyKey)
	ctx := context.Background()
	// /files/* shares one counter of 2: the third file is over limit.
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp, err := client.ShouldRateLimit(ctx, descriptors("gateway", "path", "/files/"+string(rune('a'+i))))
		if err != nil || resp.GetOverallCode() != want {
			t.Fatalf("request %d: %v, %v; want %v\n%s", i+1, resp.GetOverallCode(), err, want, server.logTail())
		}
	}
	if keys, err := rdb.Client(t).Keys(ctx, "sluice:*").Result(); err != nil || len(keys) == 0 {
		t.Errorf("Redis keys %v, %v; want the decisions counted in Redis", keys, err)
	}
	resp, err := http.Get("http://" + server.HTTP + "/healthcheck")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthcheck = %d; want 200", resp.StatusCode)
	}
	// USE_PROMETHEUS: the reference's metric names, counted in its terms.
	mf := server.metrics(t)
	if got := sumMetric(mf, "ratelimit_service_rate_limit_total_hits", "domain", "gateway", "key1", "path_/files/*"); got != 3 {
		t.Errorf("ratelimit_service_rate_limit_total_hits{key1=path_/files/*} = %v; want 3", got)
	}
	if got := sumMetric(mf, "ratelimit_service_rate_limit_over_limit", "domain", "gateway"); got != 1 {
		t.Errorf("ratelimit_service_rate_limit_over_limit = %v; want 1", got)
	}
	logs := server.logTail()
	for _, want := range []string{"settings from envoyproxy/ratelimit's environment", "-redis-url from REDIS_SOCKET_TYPE+REDIS_URL", "-config from RUNTIME_ROOT+RUNTIME_SUBDIRECTORY"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log lacks %q:\n%s", want, logs)
		}
	}
}

// TestReferenceEnvironmentXDS starts the built server as Envoy Gateway
// starts the reference: its config over xDS with mTLS
// (CONFIG_TYPE=GRPC_XDS_SOTW and its settings), mTLS on the gRPC port,
// Redis; it serves at once, decides on the first snapshot it gets, and
// follows the next.
func TestReferenceEnvironmentXDS(t *testing.T) {
	rdb := redistest.Start(t)
	ca := testpki.New(t)
	cp := xdstest.Start(t, ca, "127.0.0.1:0")
	cp.NodeID = "envoy-ratelimit"
	cert, key := ca.Issue(t, "ratelimit", "ratelimit.envoy-gateway-system")
	envoyCert, envoyKey := ca.Issue(t, "envoy", "envoy.envoy-gateway-system")
	env := []string{
		"PATH=" + os.Getenv("PATH"), "LOG_FORMAT=json", "USE_STATSD=false",
		"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL=" + cp.Addr, "CONFIG_GRPC_XDS_NODE_ID=envoy-ratelimit",
		"CONFIG_GRPC_XDS_SERVER_USE_TLS=true", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT=" + ca.Path("ca.pem"),
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT=" + cert, "CONFIG_GRPC_XDS_CLIENT_TLS_KEY=" + key, "CONFIG_GRPC_XDS_SERVER_TLS_SAN=xds.envoy-gateway-system",
		"FORCE_START_WITHOUT_INITIAL_CONFIG=true",
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "HOST=127.0.0.1", "PORT=0",
		"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=" + cert, "GRPC_SERVER_TLS_KEY=" + key, "GRPC_CLIENT_TLS_CACERT=" + ca.Path("ca.pem"),
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + rdb.Addr,
	}
	server := startEnv(t, "server", "ratelimit-xds", env, nil)
	client := tlsClient(t, server.GRPC, ca, envoyCert, envoyKey)
	ctx := context.Background()
	limitOf := func() uint32 {
		resp, err := client.ShouldRateLimit(ctx, descriptors("gateway", "client", "c"))
		if err != nil {
			return 0
		}
		return resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	if resp, err := http.Get("http://" + server.HTTP + "/readyz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("/readyz before any config = %d; want 503", resp.StatusCode)
		}
	}
	// Generous deadlines: the first snapshot waits for an mTLS handshake
	// and the xDS client's retry, seconds on a loaded machine.
	cp.Push("1", xdstest.LimitConfig("gateway", 10))
	waitFor(t, 30*time.Second, "the first snapshot to decide", func() bool { return limitOf() == 10 })
	cp.Push("2", xdstest.LimitConfig("gateway", 20))
	waitFor(t, 30*time.Second, "the next snapshot to decide", func() bool { return limitOf() == 20 })
	if !strings.Contains(server.logTail(), "-config-xds-server from CONFIG_TYPE") {
		t.Errorf("the log does not say the xDS source came from the reference's settings:\n%s", server.logTail())
	}
}
