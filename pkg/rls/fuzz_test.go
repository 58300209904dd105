package rls

import (
	"context"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/cache"
	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/global"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/wire"
)

// fuzzConfig has every algorithm (a concurrency limit named by its
// holder too), the largest sliding log a file may have,
// wildcards, nesting, shadow mode, a block, replaces and detailed metrics.
const fuzzConfig = testConfig + `  - key: log
    rate_limit: {unit: hour, requests_per_unit: 10000, algorithm: sliding_log}
  - key: gcra
    detailed_metric: true
    rate_limit: {unit: second, requests_per_unit: 3, burst: 9, algorithm: gcra}
  - key: agent
    value: "*sqlmap*"
    rate_limit: {unit: minute, requests_per_unit: 0, name: scanners}
  - key: agent
    rate_limit: {unit: year, unit_multiplier: 100, requests_per_unit: 4294967295, algorithm: sliding_window}
  - key: inflight
    descriptors:
      - key: id
        rate_limit: {unit: minute, requests_per_unit: 3, algorithm: concurrency, holder: true}
`

// fuzzInput is one request the fuzzers build: entries whose bytes may be
// anything (Envoy forwards header bytes unchecked), costs and overrides at
// every extreme, and the sidecar's record marker.
type fuzzInput struct {
	domain, k1, v1, k2, v2 string
	hits                   uint32
	dhits                  uint64
	setHits                bool
	rpu                    uint32
	unit                   int32
	mult                   uint32
	record                 bool
	n                      uint8
}

func addSeeds(f *testing.F) {
	long := strings.Repeat("x", 2000)
	for _, in := range []fuzzInput{
		{"edge", "remote_address", "1.2.3.4", "", "", 1, 0, false, 0, 0, 0, false, 1},
		{"edge", "tenant", "acme", "path", "/reports/x", 0, 3, true, 0, 0, 0, false, 2},
		{"edge", "api_key", "k\xff", "", "", 7, 0, false, 5, 2, 0, false, 3},
		{"", "", "", "", "", 0, 0, false, 0, 9, 0, false, 0},
		{"edge", "banned", "x", "plan", "vip", 1 << 31, 1 << 40, true, 1, 6, 1 << 31, true, 70},
		{"edge", "log", "a", "", "", 0, 1<<32 - 1, true, 1<<32 - 1, 2, 0, false, 64},
		{"edge", "log", "b", "", "", 0, 10000, true, 0, 0, 0, true, 64},
		{"edge", "agent", "sqlmap" + long, "", "", 1, 0, false, 0, 0, 0, false, 3},
		{"edge", "gcra", long + "\xc3", "", "", 1, 1 << 32, true, 0, 0, 0, true, 4},
		{"edge", "window", "w", "", "", 1, 0, false, 5, 6, 293, false, 1},
		{"edge", "agent", "z", "", "", 0, 0, false, 7, 6, 100, true, 2},
		{"edge", "gcra", "r\xff", "log", "l", 0, 1 << 32, true, 0, 0, 0, false, 130},
		{"edge", "inflight", "t", "id", "r\x00" + long, 0, 1 << 32, true, 0, 0, 0, false, 131},
		{"edge", "inflight", "t", "id", "r", 2, 0, false, 3, 2, 0, true, 8},
		{"edge", "inflight", "t\xff", "id", "\xff\xfe", 0, 1 << 32, true, 0, 0, 0, false, 200},
	} {
		f.Add(in.domain, in.k1, in.v1, in.k2, in.v2, in.hits, in.dhits, in.setHits, in.rpu, in.unit, in.mult, in.record, in.n)
	}
}

// request builds the request, then sends it through the codec as Envoy's
// bytes reach the server.
func (in fuzzInput) request(t *testing.T) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: in.domain, HitsAddend: in.hits}
	for i := 0; i < int(in.n%80); i++ {
		dsc := &ratelimitv3.RateLimitDescriptor{}
		if i%3 != 2 {
			dsc.Entries = append(dsc.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: in.k1, Value: in.v1})
		}
		if i%2 == 1 {
			dsc.Entries = append(dsc.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: in.k2, Value: in.v2 + string(rune('a'+i%7))})
		}
		if in.setHits && i%2 == 0 {
			dsc.HitsAddend = wrapperspb.UInt64(in.dhits)
		}
		// Refunds (is_negative_hits) when n's top bit is set: the saved
		// corpus's inputs keep their meaning.
		dsc.IsNegativeHits = in.n >= 128 && i%3 == 0
		if in.unit != 0 && i%4 == 1 {
			dsc.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: in.rpu, Unit: typev3.RateLimitUnit(in.unit)}
			if in.mult != 0 {
				dsc.Limit.UnitMultiplier = wrapperspb.UInt32(in.mult)
			}
		}
		req.Descriptors = append(req.Descriptors, dsc)
	}
	b, err := wire.Marshal(req)
	if err != nil {
		t.Fatalf("encoding the request: %v", err)
	}
	var got rlsv3.RateLimitRequest
	if err := wire.Unmarshal(b, &got); err != nil {
		t.Fatalf("the server's codec refused Envoy's bytes: %v", err)
	}
	return &got
}

// check sends in to svc and holds the answer to the request path's rules:
// InvalidArgument or an answer, within a second, with one status per
// descriptor and an overall code Envoy accepts.
func (in fuzzInput) check(t *testing.T, svc *Service) {
	req := in.request(t)
	ctx := context.Background()
	if in.record {
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(SidecarKey, SidecarRecord))
	}
	start := time.Now()
	resp, err := svc.ShouldRateLimit(ctx, req)
	if took := time.Since(start); took > time.Second {
		t.Fatalf("a decision took %v", took)
	}
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
	if !in.record && (resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT) != (len(resp.RawBody) > 0) {
		t.Fatalf("overall %v with a body of %d bytes", resp.OverallCode, len(resp.RawBody))
	}
	for i, st := range resp.Statuses {
		if req.Descriptors[i].GetIsNegativeHits() && st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("a refund (descriptor %d) answered OVER_LIMIT", i)
		}
		// Within 2^53 µs: a limit's own debt stays within two windows, but
		// overrides may change a key's limit between requests.
		if d := st.GetDurationUntilReset(); d != nil && (d.AsDuration() < 0 || d.AsDuration() > algorithm.MaxDuration*time.Microsecond) {
			t.Fatalf("duration_until_reset %v", d.AsDuration())
		}
	}
	if _, err := wire.Marshal(resp); err != nil {
		t.Fatalf("the reply does not encode: %v", err)
	}
}

// FuzzShouldRateLimit drives the request path on the in-memory store.
func FuzzShouldRateLimit(f *testing.F) {
	addSeeds(f)
	cfg, err := config.Parse(map[string][]byte{"test.yaml": []byte(fuzzConfig)})
	if err != nil {
		f.Fatal(err)
	}
	store := newClockStore(f)
	fallback, _ := global.NewMemory(global.MemoryOptions{})
	d, err := limiter.NewStoreDecider(limiter.StoreOptions{Store: store, Fallback: fallback})
	if err != nil {
		f.Fatal(err)
	}
	flags, _ := cache.New(1000)
	core, err := limiter.New(limiter.Options{Config: func() *config.Config { return cfg }, Decider: d, Cache: flags, Now: func() time.Time { return time.UnixMicro(store.now.Load()) }, Refunds: true})
	svc := NewService(core, trustAny(f)) // the record path too
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, domain, k1, v1, k2, v2 string, hits uint32, dhits uint64, setHits bool, rpu uint32, unit int32, mult uint32, record bool, n uint8) {
		store.now.Add(int64(n) * 1000)
		fuzzInput{domain, k1, v1, k2, v2, hits, dhits, setHits, rpu, unit, mult, record, n}.check(t, svc)
	})
}

// FuzzShouldRateLimitRedis drives the request path on a real redis-server,
// which must never run a script for 500 ms or more (its SLOWLOG says): a
// request that makes a script loop over what it carries (a huge cost, a
// log's runs) blocks Redis far longer; 50 ms, once the bound, was within
// what a Redis preempted on two busy cores shows for a plain script.
func FuzzShouldRateLimitRedis(f *testing.F) {
	addSeeds(f)
	cfg, err := config.Parse(map[string][]byte{"test.yaml": []byte(fuzzConfig)})
	if err != nil {
		f.Fatal(err)
	}
	srv := redistest.Start(f)
	client := srv.Client(f)
	ctx := context.Background()
	if err := client.ConfigSet(ctx, "slowlog-log-slower-than", "500000").Err(); err != nil {
		f.Fatal(err)
	}
	client.SlowLogReset(ctx)
	store, err := global.NewRedis(global.RedisOptions{Client: client, Timeout: 5 * time.Second})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { store.Close() })
	fallback, _ := global.NewMemory(global.MemoryOptions{})
	d, err := limiter.NewStoreDecider(limiter.StoreOptions{Store: store, Fallback: fallback, MaxWait: 5 * time.Second})
	if err != nil {
		f.Fatal(err)
	}
	flags, _ := cache.New(1000)
	core, err := limiter.New(limiter.Options{Config: func() *config.Config { return cfg }, Decider: d, Cache: flags, KeyPrefix: redistest.Prefix(f), Refunds: true})
	svc := NewService(core, trustAny(f)) // the record path too
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, domain, k1, v1, k2, v2 string, hits uint32, dhits uint64, setHits bool, rpu uint32, unit int32, mult uint32, record bool, n uint8) {
		fuzzInput{domain, k1, v1, k2, v2, hits, dhits, setHits, rpu, unit, mult, record, n}.check(t, svc)
		if slow, err := client.SlowLogGet(ctx, 10).Result(); err != nil || len(slow) > 0 {
			t.Fatalf("Redis SLOWLOG (≥ 500 ms): %v, %v", slow, err)
		}
	})
}
