package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/pkg/peerauth"
	"github.com/sluicehq/sluice/pkg/rls"
)

// TestInsiderCannotStarveSidecars: an attacker holding valid sidecar
// credentials sends demand reports as fast as it can, each claiming the
// most a report may carry (1e9 a second, a 1 ms interval, 2^32 units
// denied) and recording nothing, while two honest async sidecars flood
// one key with equal demand. Each honest sidecar still admits at least
// half its demand-proportional share of what the limit admits over the
// run (half of the exact maximum each): a peer's claim weighs at most the
// limit's rate (share.MaxShareWeight).
func TestInsiderCannotStarveSidecars(t *testing.T) {
	const rate, run = 100, 3 * time.Second
	cfg := writeConfig(t, fmt.Sprintf(`domain: edge
descriptors:
  - key: client
    rate_limit: {unit: second, requests_per_unit: %d}
`, rate))
	auth := newSidecarTokens(t, 3) // sidecar-2's token is the attacker's
	server := startServer(t, "server", append([]string{"-config", cfg}, auth.server...)...)
	var honest []*proc
	for i := range 2 {
		honest = append(honest, startSidecar(t, fmt.Sprintf("sidecar-%d", i),
			append([]string{"-config", cfg, "-upstream", server.GRPC, "-mode", "async", "-upstream-timeout", "1s"}, auth.sidecar(i)...)...))
	}
	tok, err := os.ReadFile(auth.files[2])
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(tok))
	req := func(hits uint64) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries:    []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "client", Value: "tenant"}},
			HitsAddend: wrapperspb.UInt64(hits),
		}}}
	}

	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	var wg sync.WaitGroup
	var claims atomic.Int64
	wg.Go(func() {
		attacker := server.client(t)
		actx := metadata.AppendToOutgoingContext(ctx, peerauth.TokenKey, "Bearer "+token,
			rls.SidecarKey, rls.SidecarRecord, rls.SidecarIDKey, "insider", rls.IntervalKey, "1000",
			rls.DemandKey, "1e9", rls.DeniedKey, "4294967296", rls.HeldKey, "0")
		for ctx.Err() == nil {
			var md metadata.MD
			if _, err := attacker.ShouldRateLimit(actx, req(0), grpc.Header(&md)); err == nil && len(md.Get(rls.RefusedKey)) == 0 {
				claims.Add(1)
			}
			time.Sleep(time.Millisecond)
		}
	})
	admitted := make([]atomic.Int64, len(honest))
	start := time.Now()
	for i, p := range honest {
		client := p.client(t)
		for range 4 { // a closed-loop flood: far more than the limit's rate
			wg.Go(func() {
				for ctx.Err() == nil {
					resp, err := client.ShouldRateLimit(ctx, req(1))
					if err == nil && resp.OverallCode == rlsv3.RateLimitResponse_OK {
						admitted[i].Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	if claims.Load() == 0 {
		t.Fatal("the attacker's token was never honoured: the test tested nothing")
	}
	// The most any limiter admits over the run: the burst and the refill.
	exact := float64(rate) + rate*elapsed.Seconds()
	for i, p := range honest {
		got := float64(admitted[i].Load())
		t.Logf("sidecar-%d admitted %.0f of an exact maximum of %.0f for both (%d honoured claims by the attacker)", i, got, exact, claims.Load())
		if got < 0.5*exact/2 {
			t.Errorf("sidecar-%d admitted %.0f; want at least half its share, %.0f", i, got, 0.5*exact/2)
		}
		for _, tier := range []string{"fallback", "shed"} {
			if n := p.metric(t, "sluice_tier_decisions_total", "tier", tier); n != 0 {
				t.Errorf("sidecar-%d decided %v requests by %s: the upstream was taken as away", i, n, tier)
			}
		}
	}
}
