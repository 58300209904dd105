package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/testkit/envoyrl"
)

// routeProxy is the rate limit filter (domain ai) in front of the routes
// of envoy/<file>, a RouteConfiguration.
func routeProxy(t *testing.T, file string) *envoyrl.Proxy {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "envoy", file))
	if err != nil {
		t.Fatal(err)
	}
	rc := &routev3.RouteConfiguration{}
	if err := envoyrl.ParseYAML(data, rc); err != nil {
		t.Fatal(err)
	}
	return envoyrl.RouteProxy(rc, &ratelimitfilterv3.RateLimit{Domain: "ai"})
}

// TestEnvoyRoutes sends a server on envoy/ratelimit-config what Envoy's
// filter sends for the LLM routes of envoy/, when a request starts and
// when its stream ends: the reservation settled at the end leaves what was
// used charged; the token budget's check costs nothing and its charge
// counts at the end; the in-flight route holds 20 streams of a tenant at
// once, and the stream-end refund of a request refused at its start (Envoy
// sends it too) frees nothing.
func TestEnvoyRoutes(t *testing.T) {
	server := startServer(t, "server", "-config", edgeConfig)
	client := server.client(t)
	send := func(what string, r *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
		t.Helper()
		if r == nil {
			t.Fatalf("%s: Envoy would send nothing", what)
		}
		resp, err := client.ShouldRateLimit(context.Background(), r)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return resp
	}
	req := func(tenant, id string, md map[string]string) envoyrl.Request {
		return envoyrl.Request{Method: "POST", Path: "/v1/chat/completions", Host: "llm",
			Header: http.Header{"X-Tenant-Id": {tenant}, "X-Request-Id": {id}}, Metadata: md}
	}
	left := func(resp *rlsv3.RateLimitResponse) uint32 { return resp.GetStatuses()[0].GetLimitRemaining() }

	t.Run("reservation", func(t *testing.T) {
		p := routeProxy(t, "reservation-route.yaml")
		r := req("tenant-r", "a", map[string]string{"example.llm:unused_tokens": "2800"})
		start, _, err := p.RateLimitRequest(r)
		if err != nil {
			t.Fatal(err)
		}
		// A token bucket of 100,000 a minute: what refills between the
		// calls (1,667 a second) counts too, so the figures have room for
		// 0.6 s of it, short of the 2,800 a lost refund would leave.
		if resp := send("the reservation", start); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || left(resp) < 96_000 || left(resp) > 97_000 {
			t.Fatalf("reserving 4,000 of 100,000: %v, %d left; want OK, 96,000", resp.GetOverallCode(), left(resp))
		}
		done, _, err := p.StreamDoneRequest(r)
		if err != nil {
			t.Fatal(err)
		}
		if resp := send("the settlement", done); left(resp) < 98_800 || left(resp) > 99_800 {
			t.Fatalf("after the refund of 2,800 unused: %d left; want 98,800 (1,200 used)", left(resp))
		}
		// No metadata: Envoy drops the descriptor and sends nothing.
		if done, _, err := p.StreamDoneRequest(req("tenant-r", "b", nil)); done != nil || err != nil {
			t.Errorf("a stream end without the metadata: Envoy would send %v (%v); want nothing", done, err)
		}
	})

	t.Run("token budget", func(t *testing.T) {
		p := routeProxy(t, "token-budget-route.yaml")
		r := req("tenant-b", "a", map[string]string{"example.llm:total_tokens": "1500"})
		check, _, _ := p.RateLimitRequest(r)
		if resp := send("the check", check); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || left(resp) != 100_000 {
			t.Fatalf("the check: %v, %d left; want OK costing nothing", resp.GetOverallCode(), left(resp))
		}
		done, _, _ := p.StreamDoneRequest(r)
		if resp := send("the charge", done); left(resp) != 98_500 {
			t.Fatalf("after the charge of 1,500: %d left; want 98,500", left(resp))
		}
	})

	t.Run("in flight", func(t *testing.T) {
		p := routeProxy(t, "inflight-route.yaml")
		for i := range 20 {
			start, _, _ := p.RateLimitRequest(req("tenant-s", fmt.Sprint("s", i), nil))
			if resp := send("a stream", start); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				t.Fatalf("stream %d of 20: %v", i, resp.GetOverallCode())
			}
		}
		refused := req("tenant-s", "s20", nil)
		start, _, _ := p.RateLimitRequest(refused)
		if resp := send("the 21st", start); resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("the 21st stream: %v; want OVER_LIMIT", resp.GetOverallCode())
		}
		done, _, _ := p.StreamDoneRequest(refused)
		if resp := send("the refused stream's end", done); left(resp) != 0 {
			t.Fatalf("the refused stream's end: %d left; want 0 (it held nothing)", left(resp))
		}
		done, _, _ = p.StreamDoneRequest(req("tenant-s", "s3", nil))
		if resp := send("a stream's end", done); left(resp) != 1 {
			t.Fatalf("a stream's end: %d left; want 1", left(resp))
		}
		start, _, _ = p.RateLimitRequest(req("tenant-s", "s21", nil))
		if resp := send("the next", start); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("the next stream after one ended: %v; want OK", resp.GetOverallCode())
		}
	})
}
