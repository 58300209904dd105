package rls

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// TestJSONHandler: /json takes a RateLimitRequest in protobuf JSON by POST
// and answers the RateLimitResponse, 429 when over limit; a request it
// cannot read, or the core finds bad, is 400, one the core could not
// decide 503, any other method 405.
func TestJSONHandler(t *testing.T) {
	h := start(t, limiter.Options{})
	srv := httptest.NewServer(JSONHandler(h.svc))
	t.Cleanup(srv.Close)
	client := `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"j"}]}]}`
	for _, tt := range []struct {
		name, method, body string
		storeErr           error
		status             int
		overall            rlsv3.RateLimitResponse_Code // for a response
	}{
		{"admitted", http.MethodPost, client, nil, http.StatusOK, rlsv3.RateLimitResponse_OK},
		{"admitted", http.MethodPost, client, nil, http.StatusOK, rlsv3.RateLimitResponse_OK},
		{"admitted", http.MethodPost, client, nil, http.StatusOK, rlsv3.RateLimitResponse_OK},
		{"over limit", http.MethodPost, client, nil, http.StatusTooManyRequests, rlsv3.RateLimitResponse_OVER_LIMIT},
		{"not JSON", http.MethodPost, `{"domain":`, nil, http.StatusBadRequest, 0},
		{"not a request", http.MethodPost, `{"domain":7}`, nil, http.StatusBadRequest, 0},
		{"a bad request", http.MethodPost, `{"domain":"","descriptors":[]}`, nil, http.StatusBadRequest, 0},
		{"store down, failure mode error", http.MethodPost, `{"domain":"edge","descriptors":[{"entries":[{"key":"api_key","value":"j"}]}]}`,
			errors.New("connection refused"), http.StatusServiceUnavailable, 0},
		{"GET", http.MethodGet, "", nil, http.StatusMethodNotAllowed, 0},
	} {
		h.store.err = tt.storeErr
		req, err := http.NewRequest(tt.method, srv.URL, strings.NewReader(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.status {
			t.Fatalf("%s: status %d (%s); want %d", tt.name, resp.StatusCode, body, tt.status)
		}
		if tt.method != http.MethodPost && resp.Header.Get("Allow") != http.MethodPost {
			t.Errorf("%s: Allow %q; want POST", tt.name, resp.Header.Get("Allow"))
		}
		if tt.overall == 0 {
			continue
		}
		var got rlsv3.RateLimitResponse
		if err := protojson.Unmarshal(body, &got); err != nil || got.OverallCode != tt.overall || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: %s (%v), Content-Type %q; want a RateLimitResponse %v in JSON", tt.name, body, err, resp.Header.Get("Content-Type"), tt.overall)
		}
	}
}
