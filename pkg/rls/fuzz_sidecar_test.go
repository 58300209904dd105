package rls

import (
	"context"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/global"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/share"
)

// FuzzDemandReport: whatever a caller puts in a demand report's metadata,
// demandOf returns nothing or a report within share's bounds, one rate
// per descriptor and, if any, one held amount and one count of denied
// units per descriptor.
func FuzzDemandReport(f *testing.F) {
	f.Add("sidecar-a", "10000", "1000,5", "3,0", uint8(2), "7,0")
	f.Add("s", "9223372036854775807", "1e308", "1e10", uint8(1), "4294967297")
	f.Add("", "-1", "NaN,+Inf", "NaN,-1", uint8(2), "-1,+1")
	f.Add(strings.Repeat("x", 65), "1000", "0x1p-2", "", uint8(1), "0x10")
	f.Fuzz(func(t *testing.T, id, interval, rates, held string, n uint8, denied string) {
		md := metadata.Pairs(SidecarIDKey, id, IntervalKey, interval, DemandKey, rates, HeldKey, held, DeniedKey, denied)
		d := demandOf(metadata.NewIncomingContext(context.Background(), md), int(n))
		if d == nil {
			return
		}
		if len(d.Rates) != int(n) || d.Sidecar != id || d.Sidecar == "" || len(d.Sidecar) > share.MaxSidecarID ||
			d.Interval < share.MinInterval || d.Interval > share.MaxInterval {
			t.Fatalf("demandOf(%q, %q, %q, %d) = %+v: outside the bounds", id, interval, rates, n, d)
		}
		for _, r := range d.Rates {
			if !(r >= 0 && r <= share.MaxRate) {
				t.Fatalf("demandOf(%q, %q, %q, %d): rate %v outside [0, %v]", id, interval, rates, n, r, share.MaxRate)
			}
		}
		if d.Held != nil && len(d.Held) != int(n) {
			t.Fatalf("demandOf(held %q, %d): %d held", held, n, len(d.Held))
		}
		for _, h := range d.Held {
			if !(h >= 0 && h <= share.MaxRate) {
				t.Fatalf("demandOf(held %q, %d): %v outside [0, %v]", held, n, h, share.MaxRate)
			}
		}
		if d.Denied != nil && len(d.Denied) != int(n) {
			t.Fatalf("demandOf(denied %q, %d): %d counts", denied, n, len(d.Denied))
		}
		for _, u := range d.Denied {
			if u > limiter.MaxCost {
				t.Fatalf("demandOf(denied %q, %d): %d over %d", denied, n, u, limiter.MaxCost)
			}
		}
	})
}

// FuzzRecordMetadata drives a sidecar's record call, every piece of its
// metadata from the fuzzer (limit paths, name, interval, demand, ages, held
// and denied units), against
// a server that trusts the caller: never a panic or an error but
// InvalidArgument, one allowance per descriptor, each -1 or within the
// limit.
func FuzzRecordMetadata(f *testing.F) {
	f.Add("edge.remote_address", "", "s", "10000", "1000,5", uint64(3), "10.0.0.1", "2000000,0", "2,0", "5,1")
	f.Add("\x00\xff", "edge.api_key", strings.Repeat("i", 64), "1", "-0,1e9", uint64(1<<32), "", "-1,99999999999999999999", "1e300,NaN", "18446744073709551615,0")
	f.Add("", "", "", "", "", uint64(0), "x", "", "", "")
	cfg, err := config.Parse(map[string][]byte{"test.yaml": []byte(testConfig)})
	if err != nil {
		f.Fatal(err)
	}
	mem, _ := global.NewMemory(global.MemoryOptions{})
	tr, _ := share.New(share.Options{})
	core, err := limiter.New(limiter.Options{Config: func() *config.Config { return cfg }, Decider: limiter.Infallible{Store: mem}, Shares: tr})
	if err != nil {
		f.Fatal(err)
	}
	client := InProcess(NewService(core, trustAny(f)))
	f.Fuzz(func(t *testing.T, path1, path2, id, interval, rates string, hits uint64, value, ages, held, denied string) {
		req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: desc("remote_address", value).Entries, HitsAddend: wrapperspb.UInt64(hits)},
			{Entries: desc("api_key", value).Entries, HitsAddend: wrapperspb.UInt64(hits / 2)},
		}}
		ctx := metadata.NewOutgoingContext(context.Background(), metadata.MD{
			SidecarKey: {SidecarRecord}, LimitPathKey: {path1, path2},
			SidecarIDKey: {id}, IntervalKey: {interval}, DemandKey: {rates}, AgeKey: {ages},
			HeldKey: {held}, DeniedKey: {denied},
		})
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var hdr metadata.MD
		resp, err := client.ShouldRateLimit(ctx, req, grpc.Header(&hdr))
		if err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("record call: %v; want an answer or InvalidArgument", err)
			}
			return
		}
		if len(resp.GetStatuses()) != 2 {
			t.Fatalf("%d statuses for 2 descriptors", len(resp.GetStatuses()))
		}
		for _, list := range hdr.Get(AllowanceKey) {
			parts := strings.Split(list, ",")
			if len(parts) != 2 {
				t.Fatalf("%s %q: want one per descriptor", AllowanceKey, list)
			}
			for _, p := range parts {
				a, err := strconv.ParseFloat(p, 64)
				if err != nil || math.IsNaN(a) || (a != -1 && (a < 0 || a > 20)) {
					t.Fatalf("allowance %q: want -1 or within the limit", p)
				}
			}
		}
	})
}
