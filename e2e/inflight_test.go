package e2e

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// inflightConfig is an in-flight limit as envoy/ratelimit-config has it:
// 5 requests of a tenant at once, each named by its x-request-id, a unit
// held for at most 4 s.
const inflightConfig = `domain: inflight
descriptors:
  - key: tenant
    descriptors:
      - key: request_id
        rate_limit: {unit: second, unit_multiplier: 4, requests_per_unit: 5, algorithm: concurrency, holder: true}
`

const inflightTTL = 4 * time.Second

// TestInFlight drives an in-flight limit as Envoy does (+1 when a request
// starts, a refund of 1 with apply_on_stream_done when it ends, both
// naming the request by its id), on the memory store, on Redis, on a
// server in cached Redis mode, and through sync and async sidecars: 64 concurrent holders that give their
// units back never see a sixth admitted; the refund of a request refused
// at its start (Envoy sends it too) frees nothing; a holder that never
// gives its unit back frees it within the TTL; and its refund, coming
// after that, frees no one else's.
func TestInFlight(t *testing.T) {
	path := writeConfig(t, inflightConfig)
	for _, front := range []string{"memory", "redis", "cached", "sync", "async"} {
		t.Run(front, func(t *testing.T) {
			var args []string
			if front != "memory" {
				args = []string{"-redis-url", redistest.Start(t).URL()}
			}
			if front == "cached" {
				args = append(args, "-redis-mode", "cached")
			}
			server := startServer(t, "server", append([]string{"-config", path}, args...)...)
			client := server.client(t)
			if front == "sync" || front == "async" {
				client = startSidecar(t, "sidecar", "-config", path, "-upstream", server.GRPC, "-mode", front).client(t)
			}
			call := func(holder string, refund bool) *rlsv3.RateLimitResponse {
				t.Helper()
				resp, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "inflight",
					Descriptors: []*ratelimitv3.RateLimitDescriptor{{
						Entries:    []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "acme"}, {Key: "request_id", Value: holder}},
						HitsAddend: wrapperspb.UInt64(1), IsNegativeHits: refund,
					}}})
				if err != nil {
					t.Error(err)
					return &rlsv3.RateLimitResponse{}
				}
				return resp
			}
			// The dead holder takes its unit first and never gives it back.
			if resp := call("dead", false); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				t.Fatalf("the first holder: %v; want OK", resp)
			}
			// The load runs until the holders have taken 100 turns and
			// been refused, not for a set time (a loaded machine's second
			// saw 99), within 3 s: it must end before the dead holder's
			// unit expires.
			var (
				inFlight, most, admitted, refused atomic.Int64
				wg                                sync.WaitGroup
				stop                              = time.Now().Add(inflightTTL - time.Second)
			)
			taking := func() bool { return admitted.Load() < 100 || refused.Load() == 0 }
			for c := range 64 {
				wg.Go(func() {
					for n := 0; taking() && time.Now().Before(stop) && n < 10_000; n++ {
						holder := fmt.Sprintf("req-%d-%d", c, n)
						if call(holder, false).GetOverallCode() != rlsv3.RateLimitResponse_OK {
							refused.Add(1)
							call(holder, true) // Envoy's stream-end refund of a refused request
							continue
						}
						admitted.Add(1)
						now := inFlight.Add(1)
						for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
						}
						time.Sleep(time.Millisecond)
						inFlight.Add(-1) // before the refund: never more here than the server holds
						call(holder, true)
					}
				})
			}
			wg.Wait()
			t.Logf("%d admitted, %d refused, at most %d in flight at once", admitted.Load(), refused.Load(), most.Load())
			if most.Load() > 4 {
				t.Errorf("%d in flight at once beside the dead holder; want at most 4", most.Load())
			}
			if admitted.Load() < 100 || refused.Load() == 0 {
				t.Errorf("%d admitted, %d refused; want the holders to have taken turns", admitted.Load(), refused.Load())
			}
			// Every live holder gave its unit back: the dead one holds the last.
			if left := call("probe", true).GetStatuses()[0].GetLimitRemaining(); left != 4 {
				t.Errorf("after the load: %d left; want 4 (the dead holder's unit held)", left)
			}
			// Within the TTL of its take (at most 3 s of load ago), the dead
			// holder's unit comes back.
			waitFor(t, inflightTTL+time.Second, "the dead holder's unit freed by its TTL", func() bool {
				return call("probe", true).GetStatuses()[0].GetLimitRemaining() == 5
			})
			// A holder takes it; the dead holder's late refund frees nothing of it.
			call("live", false)
			if left := call("dead", true).GetStatuses()[0].GetLimitRemaining(); left != 4 {
				t.Errorf("the dead holder's late refund: %d left; want 4 (live still holding)", left)
			}
		})
	}
}
