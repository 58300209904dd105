package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/sluicehq/sluice/pkg/httplimit"
)

// A service limits each client to 2 requests a minute and each API key to
// 100, with the descriptor config format of the sluice server.
func Example() {
	dir, _ := os.MkdirTemp("", "limits")
	defer os.RemoveAll(dir)
	os.WriteFile(filepath.Join(dir, "api.yaml"), []byte(`domain: api
descriptors:
  - key: client
    rate_limit: {name: per-client, unit: minute, requests_per_unit: 2}
  - key: api_key
    rate_limit: {name: per-key, unit: minute, requests_per_unit: 100}
`), 0o644)

	engine, err := httplimit.NewEngine(httplimit.EngineOptions{Config: dir}) // add Redis: to share the counts
	if err != nil {
		panic(err)
	}
	defer engine.Close()
	loadBalancer := netip.MustParsePrefix("10.0.0.0/8") // trusted to append X-Forwarded-For
	limit, err := httplimit.New(httplimit.Options{
		Limiter: engine,
		Domain:  "api",
		Descriptors: []httplimit.Descriptor{
			{{Key: "client", Value: httplimit.ClientIP(loadBalancer)}},
			{{Key: "api_key", Value: httplimit.Header("X-Api-Key")}},
		},
	})
	if err != nil {
		panic(err)
	}
	app := limit.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "hello")
	}))

	for range 3 {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "10.1.2.3:4567" // the load balancer
		r.Header.Set("X-Forwarded-For", "198.51.100.7")
		w := httptest.NewRecorder()
		app.ServeHTTP(w, r)
		fmt.Println(strings.TrimSpace(fmt.Sprint(w.Code, " ", w.Header().Get("RateLimit"), " ", w.Header().Get("Retry-After"))))
	}
	// Output:
	// 200 "per-client";r=1;t=30
	// 200 "per-client";r=0;t=60
	// 429 "per-client";r=0;t=30 30
}
