package main

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// TestTokenBudget: a budget of 1,000 tokens a second charged after the
// fact, as Envoy's apply_on_stream_done action sends it (the request-time
// check with hits_addend 0, the stream-end charge with the tokens used),
// over a real gRPC listener and real Redis, for every algorithm: with
// count_refused, the charge of 5,000 that does not fit still counts, so
// the budget is spent and refused, with a Retry-After, until the debt is
// repaid; then it admits again.
func TestTokenBudget(t *testing.T) {
	rdb := redistest.Start(t)
	for _, alg := range []string{"token_bucket", "gcra", "sliding_window", "fixed_window", "sliding_log"} {
		t.Run(alg, func(t *testing.T) {
			cfg := writeConfig(t, fmt.Sprintf(`domain: ai
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 1000, algorithm: %s, count_refused: true}
`, alg))
			s := startServer(t, "-config", cfg, "-redis-url", rdb.URL(), "-store-timeout", "1s")
			ctx := context.Background()
			var tenant string
			call := func(tokens uint64) *rlsv3.RateLimitResponse {
				t.Helper()
				resp, err := s.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "ai", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
					Entries:    []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: tenant}},
					HitsAddend: wrapperspb.UInt64(tokens),
				}}})
				if err != nil {
					t.Fatal(err)
				}
				return resp
			}
			ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
			steps := []struct {
				tokens uint64
				want   rlsv3.RateLimitResponse_Code
			}{{0, ok}, {300, ok}, {5000, over}, {0, over}, {10, over}, {0, over}} // the last for its Retry-After
			// The answers hold for calls within one second: a window's end,
			// or a second's refill, repays the debt of a budget of 1,000 a
			// second (a fixed window's end between the charge and the next
			// check admits that check). Each attempt starts as a second
			// begins, with a tenant of its own; one whose calls did not fit
			// in that second (a loaded machine) is not judged.
			var last *rlsv3.RateLimitResponse
			for attempt := 1; ; attempt++ {
				tenant = fmt.Sprint("t-", alg, "-", attempt)
				second := time.Now().Truncate(time.Second).Add(time.Second)
				time.Sleep(time.Until(second))
				var got []rlsv3.RateLimitResponse_Code
				for _, step := range steps {
					last = call(step.tokens)
					got = append(got, last.GetOverallCode())
				}
				if !time.Now().Truncate(time.Second).Equal(second) {
					if attempt == 3 {
						t.Fatalf("three attempts, and the %d calls never fitted in a second", len(steps))
					}
					continue
				}
				for i, step := range steps {
					if got[i] != step.want {
						t.Fatalf("step %d (%d tokens): %v; want %v", i+1, step.tokens, got[i], step.want)
					}
				}
				break
			}
			retry, err := strconv.Atoi(headersMap(last)["Retry-After"])
			if err != nil || retry < 1 || retry > 3 {
				t.Fatalf("Retry-After %d (%v); want the debt's repayment, 1 to 3 s", retry, err)
			}
			// Refused until the debt is repaid, admitted after.
			deadline := time.Now().Add(time.Duration(retry)*time.Second + time.Second)
			for call(0).GetOverallCode() != ok {
				if time.Now().After(deadline) {
					t.Fatalf("still refused %d s after a Retry-After of %d s", retry+1, retry)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

func headersMap(resp *rlsv3.RateLimitResponse) map[string]string {
	m := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		m[h.GetKey()] = h.GetValue()
	}
	return m
}

// TestChargeWithoutCountRefused is the hole count_refused closes: a
// charge that does not fit counts nothing, so the next check passes with
// the budget untouched.
func TestChargeWithoutCountRefused(t *testing.T) {
	cfg := writeConfig(t, `domain: ai
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 1000}
`)
	s := startServer(t, "-config", cfg)
	ctx := context.Background()
	for i, step := range []struct {
		tokens uint64
		want   rlsv3.RateLimitResponse_Code
	}{{0, rlsv3.RateLimitResponse_OK}, {5000, rlsv3.RateLimitResponse_OVER_LIMIT}, {0, rlsv3.RateLimitResponse_OK}} {
		resp, err := s.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "ai", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries:    []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "t"}},
			HitsAddend: wrapperspb.UInt64(step.tokens),
		}}})
		if err != nil || resp.GetOverallCode() != step.want {
			t.Fatalf("step %d (%d tokens): %v, %v; want %v", i+1, step.tokens, resp.GetOverallCode(), err, step.want)
		}
	}
}
