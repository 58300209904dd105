package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/testkit/envoyrl"
)

// edgeConfig is the descriptor config the bootstraps go with.
var edgeConfig = filepath.Join("..", "envoy", "ratelimit-config")

// envoy is the rate limit filter of envoy/front-proxy-direct.yaml: what the
// tests send is what Envoy would send for each HTTP request.
func envoy(t *testing.T) *envoyrl.Proxy {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "envoy", "front-proxy-direct.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := envoyrl.ParseBootstrap(data)
	if err != nil {
		t.Fatal(err)
	}
	p, err := envoyrl.NewProxy(b)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// traffic is the RateLimitRequest Envoy sends for each of n HTTP requests,
// built by req(k): the request function of a load on n keys.
func traffic(t *testing.T, n int, req func(k int) envoyrl.Request) func(int) *rlsv3.RateLimitRequest {
	t.Helper()
	p := envoy(t)
	out := make([]*rlsv3.RateLimitRequest, n)
	for k := range out {
		r, route, err := p.RateLimitRequest(req(k))
		if err != nil || r == nil {
			t.Fatalf("request %d (route %q): Envoy would send %v (%v); want a rate limit request", k, route, r, err)
		}
		out[k] = r
	}
	return func(k int) *rlsv3.RateLimitRequest { return out[k] }
}

// client is an HTTP client as the load balancer in front of Envoy reports
// it: X-Forwarded-For names it, the TCP peer is the balancer.
func client(k int) http.Header {
	return http.Header{"X-Forwarded-For": {fmt.Sprintf("198.51.%d.%d", 100+k/250, 1+k%250)}}
}

// withHeader is h with one more header.
func withHeader(h http.Header, key, value string) http.Header {
	h.Set(key, value)
	return h
}

const balancer = "10.0.0.1" // the TCP peer of every request: the load balancer
