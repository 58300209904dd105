package rls

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/testkit/corecfg"
	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/limiter"
)

const valuesConfig = corecfg.Values

func agent(v string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user_agent", v)}}
}

// TestValuesNotUTF8CrossTheWire: a value holding bytes that are not UTF-8
// (Envoy forwards header bytes as they arrive) passes the server's codec
// and reaches the core as sent, counted on its own bytes (the finding: it
// was answered Internal, which Envoy admits). How the core matches and
// counts such values: limiter's TestValuesNotUTF8AreDecided.
func TestValuesNotUTF8CrossTheWire(t *testing.T) {
	cfg := mustConfig(t, valuesConfig)
	h := start(t, limiter.Options{Config: func() *config.Config { return cfg }})
	for i, want := range []string{"OK:OK", "OK:OK", "OVER_LIMIT:OVER_LIMIT"} {
		if got := codesOf(h.call(t, agent("curl\xff"))); got != want {
			t.Fatalf("request %d with a 0xFF byte: %s; want %s", i+1, got, want)
		}
	}
	if got := codesOf(h.call(t, agent("curl\xfe"))); got != "OK:OK" {
		t.Errorf("curl\\xfe shares the count of curl\\xff: %s", got)
	}
}

// TestJSONValuesNotUTF8: /json decides a body whose strings hold raw
// bytes as the gRPC path does, on the same count.
func TestJSONValuesNotUTF8(t *testing.T) {
	cfg := mustConfig(t, valuesConfig)
	h := start(t, limiter.Options{Config: func() *config.Config { return cfg }})
	srv := httptest.NewServer(JSONHandler(h.svc))
	t.Cleanup(srv.Close)
	body := []byte("{\"domain\":\"edge\",\"descriptors\":[{\"entries\":[{\"key\":\"user_agent\",\"value\":\"wget\xff\"}]}]}")
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
		resp, err := http.Post(srv.URL, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("/json request %d: %d; want %d", i+1, resp.StatusCode, want)
		}
	}
	// Counted on the same key as the gRPC path.
	if got := codesOf(h.call(t, agent("wget\xff"))); got != "OVER_LIMIT:OVER_LIMIT" {
		t.Errorf("gRPC after /json used the limit: %s; want OVER_LIMIT", got)
	}
}
