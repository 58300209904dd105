package rls

import (
	"context"
	"fmt"
	"sync"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestReusedDecisionsUnderHostileLoad: four callers at once send requests
// admitted and refused, with non-UTF-8 values, huge hits_addend and many
// descriptors, while every decision is handed back for reuse (Done): each
// answer is refused as invalid or has one status per descriptor, its
// overall code agreeing with them and its headers with its verdict: no
// answer carries another's.
func TestReusedDecisionsUnderHostileLoad(t *testing.T) {
	svc := benchService(t, "{name: per-client, unit: minute, requests_per_unit: 3}")
	entry := func(v string) *ratelimitv3.RateLimitDescriptor {
		return &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: v}}}
	}
	request := func(caller, i int) *rlsv3.RateLimitRequest {
		req := &rlsv3.RateLimitRequest{Domain: "edge"}
		switch i % 5 {
		case 0: // admitted, then refused: 16 keys a caller, 3 a minute each
			req.Descriptors = append(req.Descriptors, entry(fmt.Sprintf("10.%d.0.%d", caller, i%16)))
		case 1:
			req.Descriptors = append(req.Descriptors, entry("\xff\xfe"+string(rune(i))))
		case 2:
			d := entry(fmt.Sprintf("huge-%d", i))
			d.HitsAddend = wrapperspb.UInt64(1 << 63)
			req.Descriptors = append(req.Descriptors, d)
		case 3:
			for j := range 20 {
				req.Descriptors = append(req.Descriptors, entry(fmt.Sprintf("many-%d-%d-%d", caller, i, j)))
			}
		case 4: // matches no limit
			req.Descriptors = append(req.Descriptors, &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "other", Value: "x"}}})
		}
		return req
	}
	var wg sync.WaitGroup
	for caller := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				req := request(caller, i)
				resp, err := svc.ShouldRateLimit(context.Background(), req)
				if err != nil {
					if status.Code(err) != codes.InvalidArgument {
						t.Errorf("request %d: %v; want an answer or InvalidArgument", i, err)
					}
					continue
				}
				if len(resp.GetStatuses()) != len(req.GetDescriptors()) {
					t.Errorf("request %d: %d statuses for %d descriptors", i, len(resp.GetStatuses()), len(req.GetDescriptors()))
					return
				}
				over := false
				for _, st := range resp.GetStatuses() {
					over = over || st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT
				}
				if over != (resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT) {
					t.Errorf("request %d: overall %v, statuses %v", i, resp.GetOverallCode(), resp.GetStatuses())
				}
				if i%5 == 4 && len(resp.GetResponseHeadersToAdd()) != 0 {
					t.Errorf("request %d matched no limit, yet carries headers %v", i, resp.GetResponseHeadersToAdd())
				}
				if over != (len(resp.GetResponseHeadersToAdd()) == 5) {
					t.Errorf("request %d: overall %v with %d headers", i, resp.GetOverallCode(), len(resp.GetResponseHeadersToAdd()))
				}
			}
		})
	}
	wg.Wait()
}
