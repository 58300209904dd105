package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// testConfig admits 3 requests a client in any hour: a sliding log has no
// window end for a run to straddle (4 requests across a fixed minute's end
// were all admitted), so the fourth of a run is refused however slow the
// machine, short of an hour.
const testConfig = `domain: edge
descriptors:
  - key: client
    rate_limit: {name: per-client, unit: hour, requests_per_unit: 3, algorithm: sliding_log}
`

// inProcess is a run() in this process, on ports the kernel chose.
type inProcess struct {
	grpcAddr, httpAddr string
	client             rlsv3.RateLimitServiceClient
	conn               *grpc.ClientConn
	logs               *logSink
}

type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (l *logSink) add(s string) {
	l.mu.Lock()
	l.lines = append(l.lines, s)
	l.mu.Unlock()
}

func (l *logSink) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func writeConfig(t *testing.T, src string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "limits.yaml")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// startServer runs the server with args (plus loopback listeners) until
// the test ends, and checks that it shuts down cleanly.
func startServer(t *testing.T, args ...string) *inProcess {
	t.Helper()
	args = append([]string{"-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0"}, args...)
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, args, func(string) string { return "" }, pw)
		pw.Close()
	}()
	s := &inProcess{logs: &logSink{}}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			s.logs.add(line)
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == "sluice server listening" {
				s.grpcAddr, s.httpAddr = rec["grpc_addr"].(string), rec["http_addr"].(string)
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("server exited at start: %v\n%s", err, s.logs)
	case <-time.After(15 * time.Second):
		t.Fatalf("server did not start:\n%s", s.logs)
	}
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	s.conn = conn
	s.client = rlsv3.NewRateLimitServiceClient(conn)
	t.Cleanup(func() {
		conn.Close()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run returned %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("server did not shut down:\n%s", s.logs)
		}
	})
	return s
}

func request(client string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "client", Value: client}},
	}}}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestServeMemory(t *testing.T) {
	s := startServer(t, "-config", writeConfig(t, testConfig))
	ctx := context.Background()
	for i, want := range []rlsv3.RateLimitResponse_Code{1, 1, 1, 2} {
		resp, err := s.client.ShouldRateLimit(ctx, request("a"))
		if err != nil || resp.OverallCode != want {
			t.Fatalf("request %d: %v, %v; want %v", i, resp.GetOverallCode(), err, want)
		}
	}
	if _, err := s.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("empty request: %v; want InvalidArgument", err)
	}
	hc, err := healthpb.NewHealthClient(s.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
	if err != nil || hc.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health: %v, %v; want SERVING", hc, err)
	}
	base := "http://" + s.httpAddr
	if code, body := get(t, base+"/healthz"); code != 200 {
		t.Errorf("/healthz = %d %s", code, body)
	}
	if code, body := get(t, base+"/readyz"); code != 200 || !strings.Contains(body, "config ") {
		t.Errorf("/readyz = %d %s; want 200 naming the config version", code, body)
	}
	if code, body := get(t, base+"/healthcheck"); code != 200 || body != "OK" {
		t.Errorf("/healthcheck = %d %q; want 200 OK, as the reference answers", code, body)
	}
	if code, body := get(t, base+"/config"); code != 200 || !strings.Contains(body, "per-client") {
		t.Errorf("/config = %d %s", code, body)
	}
	if code, body := get(t, base+"/metrics"); code != 200 || !strings.Contains(body, `sluice_decisions_total{domain="edge",limit="per-client",result="over_limit"} 1`) {
		t.Errorf("/metrics = %d, without the over-limit decision:\n%s", code, body)
	}
	post := func(body string) (int, string) {
		resp, err := http.Post(base+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post(`{"domain":"edge","descriptors":[{"entries":[{"key":"client","value":"j"}]}]}`); code != 200 || !strings.Contains(body, `"overallCode":"OK"`) {
		t.Errorf("/json = %d %s", code, body)
	}
	if code, body := post(`{"domain":"edge","descriptors":[{"entries":[{"key":"client","value":"a"}]}]}`); code != 429 || !strings.Contains(body, "OVER_LIMIT") {
		t.Errorf("/json over limit = %d %s; want 429", code, body)
	}
	if code, _ := post(`{"domain":""}`); code != 400 {
		t.Errorf("/json bad request = %d; want 400", code)
	}
	if code, _ := post(`not json`); code != 400 {
		t.Errorf("/json garbage = %d; want 400", code)
	}
}

func TestFlags(t *testing.T) {
	cfg := writeConfig(t, testConfig)
	tests := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, nil, "-config is required"},
		{[]string{"-config", cfg, "-redis-url", "redis://x", "-redis-cluster", "a:1"}, nil, "at most one of"},
		{[]string{"-config", cfg, "-failure-mode", "sometimes"}, nil, "failure mode"},
		{[]string{"-config", cfg, "-local-share", "2"}, nil, "-local-share"},
		{[]string{"-config", cfg, "-redis-mode", "cached"}, nil, "needs a Redis"},
		{[]string{"-config", cfg, "-redis-mode", "lazy"}, nil, "want direct or cached"},
		{[]string{"-config", cfg, "-redis-state-format", "binary"}, nil, "want text or packed"},
		{[]string{"-config", cfg, "-redis-url", "redis://x", "-redis-mode", "cached", "-failure-mode", "allow"}, nil, "-failure-mode does not apply"},
		{[]string{"-config", cfg, "-redis-url", "redis://x", "-redis-mode", "cached", "-flush-interval", "0s"}, nil, "-flush-interval"},
		{[]string{"-config", cfg, "-log-format", "xml"}, nil, "-log-format"},
		{[]string{"-config", cfg, "-grpc-tls-cert", "x"}, nil, "go together"},
		{[]string{"-config", cfg}, map[string]string{"SLUICE_STORE_TIMEOUT": "soon"}, "SLUICE_STORE_TIMEOUT"},
		{nil, map[string]string{"SLUICE_CONFIG": filepath.Join(t.TempDir(), "missing")}, "config"},
		{[]string{"-config", writeConfig(t, "descriptors: []\n")}, nil, "limits.yaml:1"},
	}
	for _, tt := range tests {
		err := run(context.Background(), tt.args, func(k string) string { return tt.env[k] }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("run(%q, env %v) = %v; want an error containing %q", tt.args, tt.env, err, tt.want)
		}
	}
}

// TestRedisOutage kills Redis under each failure mode: every reply comes
// within the store timeout plus a margin, the mode holds, and once Redis
// is back the server decides on it again without a restart.
func TestRedisOutage(t *testing.T) {
	const timeout = 20 * time.Millisecond
	// The margin covers a shared 2-core machine under the race detector;
	// what matters is that a dead Redis never costs a dial or read timeout.
	const margin = 500 * time.Millisecond
	for _, mode := range []string{"allow", "deny", "error", "local"} {
		t.Run(mode, func(t *testing.T) {
			rdb := redistest.Start(t)
			s := startServer(t, "-config", writeConfig(t, testConfig), "-redis-url", rdb.URL(),
				"-failure-mode", mode, "-store-timeout", timeout.String(), "-breaker-cooldown", "200ms", "-local-share", "0.34")
			ctx := context.Background()
			if resp, err := s.client.ShouldRateLimit(ctx, request("before")); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
				t.Fatalf("with Redis up: %v, %v", resp, err)
			}
			rdb.Kill()
			for i := range 20 {
				start := time.Now()
				resp, err := s.client.ShouldRateLimit(ctx, request("during"))
				if d := time.Since(start); d > timeout+margin {
					t.Errorf("request %d with Redis down took %v; want at most %v", i, d, timeout+margin)
				}
				switch mode {
				case "allow":
					if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
						t.Fatalf("allow, request %d: %v, %v; want OK", i, resp, err)
					}
				case "deny":
					if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
						t.Fatalf("deny, request %d: %v, %v; want OVER_LIMIT", i, resp, err)
					}
				case "error":
					if status.Code(err) != codes.Unavailable {
						t.Fatalf("error, request %d: %v; want UNAVAILABLE", i, err)
					}
				case "local":
					// A share of 0.34 of 3 an hour is 1 in this process.
					want := rlsv3.RateLimitResponse_OVER_LIMIT
					if i == 0 {
						want = rlsv3.RateLimitResponse_OK
					}
					if err != nil || resp.OverallCode != want {
						t.Fatalf("local, request %d: %v, %v; want %v", i, resp.GetOverallCode(), err, want)
					}
				}
			}
			code, body := get(t, "http://"+s.httpAddr+"/readyz")
			if (mode == "error") != (code == http.StatusServiceUnavailable) {
				t.Errorf("/readyz with Redis down in mode %s = %d %s", mode, code, body)
			}
			code, body = get(t, "http://"+s.httpAddr+"/healthcheck")
			if (mode == "error") != (code == http.StatusInternalServerError) {
				t.Errorf("/healthcheck with Redis down in mode %s = %d %s; want 500 only in mode error", mode, code, body)
			}
			rdb.Restart(t)
			// Recovered when the store decides again: a fresh client's
			// fourth request is over limit by Redis's count, in every mode.
			deadline := time.Now().Add(10 * time.Second)
			for n := 0; ; n++ {
				if time.Now().After(deadline) {
					t.Fatalf("no recovery after Redis restarted:\n%s", s.logs)
				}
				c := "after-" + string(rune('a'+n%26)) + string(rune('a'+n/26))
				var last *rlsv3.RateLimitResponse
				var err error
				for range 4 {
					last, err = s.client.ShouldRateLimit(ctx, request(c))
				}
				if err == nil && last.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT && !strings.Contains(headersOf(last), "store unavailable") &&
					rdb.Client(t).Exists(ctx, "x").Err() == nil && recoveredInLogs(s.logs.String()) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			// Each transition is logged once: the outage, then the recovery.
			// A store this close to its timeout (20 ms, on a loaded machine)
			// may flap once more while it warms up (new connections, scripts
			// loaded again); each flap is again one line each way, never one
			// per request.
			if seq := transitions(s.logs.String()); !alternates(seq) {
				t.Errorf("store transitions logged %q; want unavailable, recovered, alternating, once each:\n%s", seq, s.logs)
			}
		})
	}
}

func recoveredInLogs(logs string) bool { return strings.Contains(logs, "rate limit store recovered") }

// transitions lists the store transitions in logs: "down" and "up".
func transitions(logs string) []string {
	var seq []string
	for _, line := range strings.Split(logs, "\n") {
		switch {
		case strings.Contains(line, `"msg":"rate limit store unavailable`):
			seq = append(seq, "down")
		case strings.Contains(line, `"msg":"rate limit store recovered"`):
			seq = append(seq, "up")
		}
	}
	return seq
}

// alternates reports whether seq is down, up, down, up, ..., ending up.
func alternates(seq []string) bool {
	if len(seq) == 0 || len(seq)%2 != 0 {
		return false
	}
	for i, s := range seq {
		if s != []string{"down", "up"}[i%2] {
			return false
		}
	}
	return true
}

func headersOf(resp *rlsv3.RateLimitResponse) string {
	var b strings.Builder
	for _, h := range resp.GetResponseHeadersToAdd() {
		b.WriteString(h.GetKey() + ": " + h.GetValue() + "\n")
	}
	return b.String()
}
