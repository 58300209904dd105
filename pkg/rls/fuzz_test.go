package rls

import (
	"context"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/pkg/cache"
	"github.com/sluicehq/sluice/pkg/config"
)

// FuzzShouldRateLimit drives the request path with random domains,
// entries, hits and overrides: it must never panic, and every answer is
// either InvalidArgument or a response with one status per descriptor and
// an overall code of OK or OVER_LIMIT.
func FuzzShouldRateLimit(f *testing.F) {
	f.Add("edge", "remote_address", "1.2.3.4", "", "", uint32(1), uint64(0), false, uint32(0), int32(0), uint8(1))
	f.Add("edge", "tenant", "acme", "path", "/reports/x", uint32(0), uint64(3), true, uint32(0), int32(0), uint8(2))
	f.Add("edge", "api_key", "k", "", "", uint32(7), uint64(0), false, uint32(5), int32(2), uint8(3))
	f.Add("", "", "", "", "", uint32(0), uint64(0), false, uint32(0), int32(9), uint8(0))
	f.Add("edge", "banned", "x", "plan", "vip", uint32(1<<31), uint64(1<<40), true, uint32(1), int32(6), uint8(70))
	f.Add("edge", "plan", "free", "window", "w", uint32(2), uint64(0), true, uint32(0), int32(0), uint8(5))

	cfg, err := config.Parse(map[string][]byte{"test.yaml": []byte(testConfig)})
	if err != nil {
		f.Fatal(err)
	}
	store := newClockStore(f)
	d, err := NewStoreDecider(StoreOptions{Store: store})
	if err != nil {
		f.Fatal(err)
	}
	flags, _ := cache.New(1000)
	svc, err := New(Options{Config: func() *config.Config { return cfg }, Decider: d, Cache: flags})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, domain, k1, v1, k2, v2 string, hits uint32, dhits uint64, setHits bool, rpu uint32, unit int32, n uint8) {
		req := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits}
		for i := 0; i < int(n%80); i++ {
			dsc := &ratelimitv3.RateLimitDescriptor{}
			if i%3 != 2 {
				dsc.Entries = append(dsc.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: k1, Value: v1})
			}
			if i%2 == 1 {
				dsc.Entries = append(dsc.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: k2, Value: v2})
			}
			if setHits && i%2 == 0 {
				dsc.HitsAddend = wrapperspb.UInt64(dhits)
			}
			if rpu > 0 && i%4 == 1 {
				dsc.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: typev3.RateLimitUnit(unit)}
			}
			req.Descriptors = append(req.Descriptors, dsc)
		}
		store.now.Add(int64(n) * 1000)
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("ShouldRateLimit = %v; want InvalidArgument or a response", err)
			}
			return
		}
		if len(resp.Statuses) != len(req.Descriptors) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(req.Descriptors))
		}
		if c := resp.OverallCode; c != rlsv3.RateLimitResponse_OK && c != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("overall code %v", c)
		}
		if (resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT) != (len(resp.RawBody) > 0) {
			t.Fatalf("overall %v with a body of %d bytes", resp.OverallCode, len(resp.RawBody))
		}
	})
}
