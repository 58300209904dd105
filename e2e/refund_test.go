package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// TestRefunds drives a server as Envoy sends refunds (is_negative_hits),
// on the memory store and on Redis, every algorithm, a limit of 10 an
// hour: charge, refund, charge again, with the exact remaining after each
// step; a refund is never refused, gives back no more than was consumed,
// and applies even in a request whose charge is refused; and the
// reservation pattern (reserve 4,000 LLM tokens, use 1,200, refund 2,800)
// leaves exactly what was used charged. Through sync and async sidecars
// the refunds reach the server.
func TestRefunds(t *testing.T) {
	algorithms := []string{"token_bucket", "gcra", "fixed_window", "sliding_window", "sliding_log"}
	var cfg strings.Builder
	cfg.WriteString("domain: refunds\ndescriptors:\n")
	for _, a := range algorithms {
		fmt.Fprintf(&cfg, "  - key: %s\n    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: %s}\n", a, a)
		fmt.Fprintf(&cfg, "  - key: tokens_%s\n    rate_limit: {unit: hour, requests_per_unit: 10000, algorithm: %s}\n", a, a)
	}
	path := writeConfig(t, cfg.String())
	for _, store := range []struct {
		name string
		args func(t *testing.T) []string
	}{
		{"memory", func(*testing.T) []string { return nil }},
		{"redis", func(t *testing.T) []string { return []string{"-redis-url", redistest.Start(t).URL()} }},
	} {
		t.Run(store.name, func(t *testing.T) {
			server := startServer(t, "server", append([]string{"-config", path}, store.args(t)...)...)
			client := server.client(t)
			ctx := context.Background()
			type d struct {
				key    string
				hits   uint64
				refund bool
			}
			call := func(ds ...d) *rlsv3.RateLimitResponse {
				t.Helper()
				req := &rlsv3.RateLimitRequest{Domain: "refunds"}
				for _, x := range ds {
					req.Descriptors = append(req.Descriptors, &ratelimitv3.RateLimitDescriptor{
						Entries:    []*ratelimitv3.RateLimitDescriptor_Entry{{Key: x.key, Value: "tenant"}},
						HitsAddend: wrapperspb.UInt64(x.hits), IsNegativeHits: x.refund,
					})
				}
				resp, err := client.ShouldRateLimit(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				return resp
			}
			for _, a := range algorithms {
				t.Run(a, func(t *testing.T) {
					step := func(what string, want rlsv3.RateLimitResponse_Code, left uint32, ds ...d) {
						t.Helper()
						resp := call(ds...)
						st := resp.GetStatuses()[len(ds)-1]
						if resp.GetOverallCode() != want || st.GetLimitRemaining() != left {
							t.Fatalf("%s: %v, %d remaining; want %v, %d", what, resp.GetOverallCode(), st.GetLimitRemaining(), want, left)
						}
					}
					ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
					step("a refund on a key with nothing consumed", ok, 10, d{a, 4, true})
					step("10 charged", ok, 0, d{a, 10, false})
					step("the 11th", over, 0, d{a, 1, false})
					step("4 refunded", ok, 4, d{a, 4, true})
					step("3 charged again", ok, 1, d{a, 3, false})
					step("a refund of 2^32", ok, 10, d{a, 1 << 32, true})
					step("10 charged", ok, 0, d{a, 10, false})
					// A charge refused beside a refund of 2 on the same key:
					// the refund applies, the charge takes nothing.
					resp := call(d{a, 2, true}, d{a, 5, false})
					if resp.GetOverallCode() != over || resp.GetStatuses()[0].GetCode() != ok {
						t.Fatalf("a refund beside a refused charge: %v, statuses %v; want OVER_LIMIT, the refund OK", resp.GetOverallCode(), resp.GetStatuses())
					}
					step("after it: the refund's 2", ok, 1, d{a, 1, false})

					// The reservation: 4,000 reserved, 1,200 used, 2,800 back.
					tokens := "tokens_" + a
					step("4,000 reserved", ok, 6000, d{tokens, 4000, false})
					step("2,800 refunded at the stream's end", ok, 8800, d{tokens, 2800, true})
				})
			}
		})
	}
	// Through a sidecar, sync and async, and a server in cached Redis
	// mode: the local bucket gets the units back, and the refund reaches
	// the global state with the next flush.
	for _, mode := range []string{"sync", "async", "cached"} {
		t.Run("tier "+mode, func(t *testing.T) {
			var server, tier *proc
			if mode == "cached" {
				url := redistest.Start(t).URL()
				// The reader keeps no flags: the refunds land through the
				// cached server, which clears only its own.
				server = startServer(t, "direct", "-config", path, "-redis-url", url, "-cache-size", "0")
				tier = startServer(t, "cached", "-config", path, "-redis-url", url, "-redis-mode", "cached")
			} else {
				server = startServer(t, "upstream", "-config", path)
				tier = startSidecar(t, "sidecar", "-config", path, "-upstream", server.GRPC, "-mode", mode)
			}
			front, direct := tier.client(t), server.client(t)
			ctx := context.Background()
			req := func(hits uint64, refund bool) *rlsv3.RateLimitRequest {
				return &rlsv3.RateLimitRequest{Domain: "refunds", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
					Entries:    []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "gcra", Value: "through-" + mode}},
					HitsAddend: wrapperspb.UInt64(hits), IsNegativeHits: refund,
				}}}
			}
			left := func() uint32 {
				resp, err := direct.ShouldRateLimit(ctx, req(0, false))
				if err != nil {
					t.Fatal(err)
				}
				return resp.GetStatuses()[0].GetLimitRemaining()
			}
			for _, step := range []struct {
				what   string
				hits   uint64
				refund bool
				global uint32
			}{
				{"10 charged", 10, false, 0},
				{"4 refunded", 4, true, 4},
				{"3 charged again", 3, false, 1},
			} {
				resp, err := front.ShouldRateLimit(ctx, req(step.hits, step.refund))
				if err != nil {
					t.Fatalf("%s: %v", step.what, err)
				}
				if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
					t.Fatalf("%s at the sidecar: %v (%v); want OK", step.what, resp.GetOverallCode(), resp.GetStatuses())
				}
				waitFor(t, 10*time.Second, step.what+" reaching the server", func() bool { return left() == step.global })
			}
			// A request mixing a refund and a charge is refused, clearly.
			mixed := req(1, true)
			mixed.Descriptors = append(mixed.Descriptors, req(1, false).Descriptors[0])
			if _, err := front.ShouldRateLimit(ctx, mixed); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "is_negative_hits") {
				t.Errorf("a refund mixed with a charge at a sidecar: %v; want InvalidArgument naming is_negative_hits", err)
			}
		})
	}
}
