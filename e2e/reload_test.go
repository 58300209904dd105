package e2e

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/testkit/envoyrl"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// TestHotReloadUnderLoad: under a steady load on /demo, the limit is raised
// by saving the config file (write and rename, as editors do): requests
// sent once the server reports the new version are decided on it, flags
// of the old limit included. Then an invalid file is saved: it is
// rejected, /readyz says so, and the last good limits keep deciding. No
// request fails throughout.
func TestHotReloadUnderLoad(t *testing.T) {
	const tight = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unlimited: true}
  - key: generic_key
    value: demo
    rate_limit: {name: demo, unit: hour, requests_per_unit: 5}
`
	dir := t.TempDir()
	file := filepath.Join(dir, "edge.yaml")
	save := func(content string) {
		t.Helper()
		tmp := filepath.Join(dir, ".edge.yaml.tmp") // a dot file: the loader reads *.yaml only
		if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	save(tight)
	redis := redistest.Start(t)
	server := startServer(t, "server", "-config", dir, "-redis-url", redis.URL(), "-store-timeout", "1s")
	readyz := func() string {
		resp, err := http.Get("http://" + server.HTTP + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	req := traffic(t, 100, func(k int) envoyrl.Request {
		return envoyrl.Request{Path: "/demo", Header: client(k), Peer: balancer}
	})
	start := time.Now()
	stop := load{targets: []rlsv3.RateLimitServiceClient{server.client(t)}, callers: 16, duration: time.Minute, keys: 100, request: req, trace: true}.start()

	// Each phase lasts until the server has decided 50 more requests: at
	// most 16 of them were sent in the phase before. The first limit is 5
	// an hour: its bucket refills no token while the phase lasts, however
	// slow the machine (at 5 a minute, one came back every 12 s).
	decided := func() float64 { return server.metric(t, "sluice_tier_decisions_total") }
	phase := func(what string) {
		n := decided()
		waitFor(t, 10*time.Second, what, func() bool { return decided() >= n+50 })
	}
	phase("traffic on the first config")
	before := readyz()
	saved := time.Since(start)
	// Raised far above what the load offers: a billion an hour refills
	// 277,778 tokens a second (a million an hour, 278, which it outruns).
	save(strings.Replace(tight, "requests_per_unit: 5}", "requests_per_unit: 1000000000}", 1))
	waitFor(t, 10*time.Second, "the new config to be served", func() bool { return readyz() != before })
	raised := time.Since(start)
	phase("traffic on the raised limit")

	save("domain: edge\ndescriptors:\n  - key: generic_key\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	waitFor(t, 10*time.Second, "the invalid config to be rejected", func() bool { return strings.Contains(readyz(), "last reload rejected") })
	rejected := time.Since(start)
	t.Logf("/readyz: %s", strings.TrimSpace(readyz()))
	phase("traffic after the rejected file")
	res := stop()

	if res.errs > 0 {
		t.Fatalf("%d requests failed across the reloads; the first: %v", res.errs, res.firstErr)
	}
	var okBefore, overAfter, okAfter, overRejected, afterRejected int
	for _, e := range res.events {
		ok := e.resp.GetOverallCode() == rlsv3.RateLimitResponse_OK
		switch {
		case e.at+e.latency < saved: // answered on the first config
			if ok {
				okBefore++
			}
		case e.at > raised && e.at < rejected:
			if ok {
				okAfter++
			} else {
				overAfter++
			}
		case e.at > rejected:
			afterRejected++
			if !ok {
				overRejected++
			}
		}
	}
	t.Logf("admitted %d on 5/h; after raising it %d admitted, %d over; after the invalid file %d requests, %d over", okBefore, okAfter, overAfter, afterRejected, overRejected)
	if okBefore > 5 {
		t.Errorf("admitted %d on a limit of 5 an hour", okBefore)
	}
	if overAfter > 0 || okAfter == 0 {
		t.Errorf("after the limit was raised: %d admitted, %d over limit; want every request admitted", okAfter, overAfter)
	}
	if overRejected > 0 || afterRejected == 0 {
		t.Errorf("after an invalid file: %d of %d over limit; want the last good limit (a billion an hour) to admit them all", overRejected, afterRejected)
	}
}
