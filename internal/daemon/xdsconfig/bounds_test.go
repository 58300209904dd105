package xdsconfig

import (
	"context"
	"crypto/tls"
	"slices"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/testkit/testpki"
	"github.com/sluicehq/sluice/internal/testkit/xdstest"
	"github.com/sluicehq/sluice/pkg/server"
)

// maxPushMemory is issue 21's bound on what a hostile push may cost.
const maxPushMemory = 400 << 20

// xdsServer is a rate-limit service fed by a test control plane over mTLS.
func xdsServer(t *testing.T, o Options) (*xdstest.ControlPlane, *server.Server) {
	t.Helper()
	ca := testpki.New(t)
	cp := xdstest.Start(t, ca, "127.0.0.1:0")
	o.Server, o.NodeID, o.TLS = cp.Addr, cp.NodeID, clientTLS(t, ca)
	src, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := newServer(server.Options{ConfigSource: src, ConfigSourceName: src.Name()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return cp, srv
}

// clientTLS is what the test control plane asks of its clients.
func clientTLS(t *testing.T, ca *testpki.CA) *tls.Config {
	t.Helper()
	cert, key := ca.Issue(t, "ratelimit", "ratelimit.envoy-gateway-system")
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{pair}, ServerName: "xds.envoy-gateway-system"}
}

// poll waits for cond, failing after limit.
func poll(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// decisions asks srv for gateway's client limit from callers goroutines
// until stop is called, which returns every decision's latency and the
// limits answered.
func decisions(t *testing.T, srv *server.Server, callers int) (stop func() (lat []time.Duration, limits map[uint32]int)) {
	var (
		mu     sync.Mutex
		wg     sync.WaitGroup
		lat    []time.Duration
		limits = map[uint32]int{}
		done   = make(chan struct{})
	)
	req := &rlsv3.RateLimitRequest{Domain: "gateway", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "client", Value: "c"}},
	}}}
	for range callers {
		wg.Go(func() {
			var mine []time.Duration
			got := map[uint32]int{}
			for {
				select {
				case <-done:
					mu.Lock()
					lat = append(lat, mine...)
					for k, v := range got {
						limits[k] += v
					}
					mu.Unlock()
					return
				default:
				}
				start := time.Now()
				resp, err := srv.Service.ShouldRateLimit(context.Background(), req)
				mine = append(mine, time.Since(start))
				if err != nil {
					got[0]++
					continue
				}
				got[resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()]++
			}
		})
	}
	return func() ([]time.Duration, map[uint32]int) {
		close(done)
		wg.Wait()
		return lat, limits
	}
}

func percentile(lat []time.Duration, p float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// TestDeepPushBounded is issue 21's finding 5: descriptors nested 9,000
// deep (about 60 KB of protobuf) cost 1.6 GB and 8.8 s at each re-send
// before being NACKed. Now the push is refused on the protobuf: under
// 400 MB of peak memory while the last good config keeps deciding. The
// decisions' p99 during the pushes is logged, not asserted.
func TestDeepPushBounded(t *testing.T) {
	cp, srv := xdsServer(t, Options{BackoffMin: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond})
	cp.Push("1", xdstest.LimitConfig("gateway-limits", 10))
	poll(t, 10*time.Second, "the first snapshot served", func() bool { return srv.Config().Current() != nil })

	mem := xdstest.MeasureMemory(t)
	stop := decisions(t, srv, 4)
	start := time.Now()
	cp.Push("2", xdstest.DeepConfig("deep", 9000))
	poll(t, 3*time.Minute, "the deep push NACKed three times", func() bool { return len(cp.Nacks()) >= 3 })
	took := time.Since(start)
	mem.Within(t, "a 9000-deep push NACKed 3 times", maxPushMemory)
	lat, limits := stop()
	t.Logf("3 NACKs in %v; %d decisions meanwhile: p50 %v, p99 %v, max %v",
		took.Round(time.Millisecond), len(lat), percentile(lat, 0.5), percentile(lat, 0.99), slices.Max(lat))
	if limits[10] == 0 || len(limits) != 1 {
		t.Errorf("limits answered during the push: %v; want only the last good one, 10", limits)
	}
	if nack := cp.Nacks()[0]; !containsAll(nack, "deep", "64") {
		t.Errorf("NACK %q does not name the resource and the bound", nack)
	}
}

// newServer is a service on the in-memory store fed by o's source.
func newServer(o server.Options) (*server.Server, error) {
	p, err := server.NewParts(o)
	if err != nil {
		return nil, err
	}
	return server.New(p, nil)
}
