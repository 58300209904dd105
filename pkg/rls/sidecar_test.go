package rls

import (
	"context"
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

	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/global"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/share"
)

// TestSidecarRecord: hits a sidecar already admitted are recorded in full,
// even past the limit, and the debt holds back later requests.
func TestSidecarRecord(t *testing.T) {
	h := start(t, limiter.Options{}, trustAny(t))
	ctx := metadata.AppendToOutgoingContext(context.Background(), SidecarKey, SidecarRecord)
	req := &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 5, Descriptors: []*ratelimitv3.RateLimitDescriptor{
		desc("remote_address", "debtor"), desc("nothing", "x"),
	}}
	var md metadata.MD
	resp, err := h.client.ShouldRateLimit(ctx, req, grpc.Header(&md))
	if err != nil {
		t.Fatal(err)
	}
	if codesOf(resp) != "OVER_LIMIT:OVER_LIMIT,OK" {
		t.Fatalf("recording 5 hits on a limit of 3: %s; want OVER_LIMIT (recorded, used up)", codesOf(resp))
	}
	if len(resp.ResponseHeadersToAdd) != 0 || resp.RawBody != nil || resp.Statuses[0].CurrentLimit != nil {
		t.Errorf("recorded hits answered with headers %v, body %q, current limit %v; a sidecar needs codes and times only",
			resp.ResponseHeadersToAdd, resp.RawBody, resp.Statuses[0].CurrentLimit)
	}
	if got := md.Get(RetryAfterKey); len(got) != 1 || got[0] != "45000000,0" {
		t.Fatalf("%s = %q; want per-descriptor retry µs 45000000,0", RetryAfterKey, got)
	}
	// The 5 were all recorded: the window is used up for Envoy's requests.
	plain := h.call(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: req.Descriptors[:1]})
	if codesOf(plain) != "OVER_LIMIT:OVER_LIMIT" {
		t.Fatalf("after the recorded hits: %s; want OVER_LIMIT", codesOf(plain))
	}
	// Envoy's own calls carry no metadata and get none back.
	md = nil
	if _, err := h.client.ShouldRateLimit(context.Background(), req, grpc.Header(&md)); err != nil || len(md.Get(RetryAfterKey)) != 0 {
		t.Fatalf("plain call: %v, metadata %v; want none", err, md)
	}
}

// TestSidecarAllowance: a sidecar's demand report with its recorded hits
// is answered per descriptor with an allowance on a tight key, none (-1)
// elsewhere; a report that does not parse records the hits all the same,
// without allowances.
func TestSidecarAllowance(t *testing.T) {
	tr, err := share.New(share.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, limiter.Options{Shares: tr}, trustAny(t))
	req := &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 2, Descriptors: []*ratelimitv3.RateLimitDescriptor{
		desc("remote_address", "tight"), desc("nothing", "x"),
	}}
	call := func(kv ...string) []string {
		t.Helper()
		ctx := metadata.AppendToOutgoingContext(context.Background(), append([]string{SidecarKey, SidecarRecord}, kv...)...)
		var md metadata.MD
		if _, err := h.client.ShouldRateLimit(ctx, req, grpc.Header(&md)); err != nil {
			t.Fatal(err)
		}
		return md.Get(AllowanceKey)
	}
	report := []string{SidecarIDKey, "sidecar-a", IntervalKey, "10000", DemandKey, "1000,5"}
	// The limit of 3 has 1 left after the 2 hits; the sidecar asks for
	// 1,000 a second: tight, and alone on the key it gets all that is left.
	if got := call(report...); len(got) != 1 || got[0] != "1,-1" {
		t.Fatalf("%s = %q; want 1,-1", AllowanceKey, got)
	}
	for _, bad := range [][]string{
		{SidecarIDKey, "sidecar-a", IntervalKey, "10000", DemandKey, "1000"},       // one rate for two descriptors
		{SidecarIDKey, "sidecar-a", IntervalKey, "0", DemandKey, "1000,5"},         // no interval
		{SidecarIDKey, "sidecar-a", IntervalKey, "10000", DemandKey, "1000,x"},     // not a number
		{IntervalKey, "10000", DemandKey, "1000,5"},                                // no name
		{SidecarIDKey, "sidecar-a", IntervalKey, "10000", DemandKey, "1000,5,1,1"}, // too many
	} {
		if got := call(bad...); len(got) != 0 {
			t.Errorf("report %q: allowances %q; want none", bad, got)
		}
	}
	// Every record counted, with a report or without: 2 + 5 × 2 hits.
	plain := h.call(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: req.Descriptors[:1]})
	if codesOf(plain) != "OVER_LIMIT:OVER_LIMIT" {
		t.Errorf("after the records: %s; want OVER_LIMIT", codesOf(plain))
	}
}

// TestSidecarDemandHostile: demand reports a hostile caller could send —
// huge, negative, NaN and infinite rates, an id too long, an interval past any bound, a report thousands of
// figures long — never panic, never refuse the record, and give either
// no allowance or one within the pool.
func TestSidecarDemandHostile(t *testing.T) {
	tr, err := share.New(share.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, limiter.Options{Shares: tr}, trustAny(t))
	req := &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 1, Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("remote_address", "hostile")}}
	for _, md := range [][]string{
		{SidecarIDKey, "s", IntervalKey, "10000", DemandKey, "1e308"},
		{SidecarIDKey, "s", IntervalKey, "10000", DemandKey, "-5"},
		{SidecarIDKey, "s", IntervalKey, "10000", DemandKey, "NaN"},
		{SidecarIDKey, "s", IntervalKey, "10000", DemandKey, "+Inf"},
		{SidecarIDKey, strings.Repeat("x", 500), IntervalKey, "10000", DemandKey, "5"}, // gRPC carries printable ASCII only here
		{SidecarIDKey, "s", IntervalKey, "9223372036854775807", DemandKey, "5"},
		{SidecarIDKey, "s", IntervalKey, "-1", DemandKey, "5"},
		{SidecarIDKey, "s", IntervalKey, "10000", DemandKey, strings.Repeat("1,", 5000) + "1"},
	} {
		ctx := metadata.AppendToOutgoingContext(context.Background(), append([]string{SidecarKey, SidecarRecord}, md...)...)
		var hdr metadata.MD
		if _, err := h.client.ShouldRateLimit(ctx, req, grpc.Header(&hdr)); err != nil {
			t.Fatalf("report %q: %v; the hits must be recorded", md, err)
		}
		for _, v := range hdr.Get(AllowanceKey) {
			a, err := strconv.ParseFloat(v, 64)
			if err != nil || !(a == -1 || (a >= 0 && a <= 3)) {
				t.Errorf("report %q: allowance %q; want none (-1) or within the limit of 3", md, v)
			}
		}
	}
}

// TestSidecarRecordAged: hits recorded with their age land in the window
// that held them: a fixed window that closed with room takes them, and
// only what it could not have admitted is carried into the current one. A
// record without ages, or with ages that do not parse, is charged now.
func TestSidecarRecordAged(t *testing.T) {
	for _, c := range []struct {
		name, ages string
		left       uint32
	}{
		{"aged into the closed window", "2000000", 1}, // 2 + 3 over 3: 2 carried
		{"no ages: charged now", "", 0},
		{"ages that do not parse: charged now", "x", 0},
		{"an age past any window: charged now", "9999999999999999999", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := start(t, limiter.Options{}, trustAny(t))
			minute := int64(60_000_000)
			h.store.now.Store(1_780_000_020*1_000_000 - 1_780_000_020*1_000_000%minute + 1_000_000) // a second into a minute
			req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("remote_address", "aged")}}
			h.call(t, req)
			h.call(t, req) // 2 of 3 in this minute
			h.store.now.Add(minute)
			kv := []string{SidecarKey, SidecarRecord}
			if c.ages != "" {
				kv = append(kv, AgeKey, c.ages)
			}
			ctx := metadata.AppendToOutgoingContext(context.Background(), kv...)
			rec := &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 3, Descriptors: req.Descriptors}
			if _, err := h.client.ShouldRateLimit(ctx, rec); err != nil {
				t.Fatal(err)
			}
			check := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
				Entries: req.Descriptors[0].Entries, HitsAddend: wrapperspb.UInt64(0),
			}}}
			if got := h.call(t, check).Statuses[0].LimitRemaining; got != c.left {
				t.Errorf("after recording 3 hits admitted 2 s ago, a second into the next minute: %d left; want %d", got, c.left)
			}
		})
	}
}

// lateStore answers nothing until its caller gives up.
type lateStore struct{}

func (lateStore) Decide(ctx context.Context, _ []algorithm.Item, _ []algorithm.Result) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestSidecarSync: a sidecar's ordinary decision (SidecarSync, which needs
// no credentials) is answered with codes and times only, the retry time
// per descriptor in RetryAfterKey; one the store did not answer in time is
// DeadlineExceeded (limiter.ErrLate): the sidecar decides it itself.
func TestSidecarSync(t *testing.T) {
	h := start(t, limiter.Options{})
	ctx := metadata.AppendToOutgoingContext(context.Background(), SidecarKey, SidecarSync)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("remote_address", "s"), desc("nothing", "x")}}
	for range 3 {
		if _, err := h.client.ShouldRateLimit(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	var md metadata.MD
	resp, err := h.client.ShouldRateLimit(ctx, req, grpc.Header(&md))
	if err != nil || codesOf(resp) != "OVER_LIMIT:OVER_LIMIT,OK" {
		t.Fatalf("fourth sync call: %v, %v; want OVER_LIMIT", resp, err)
	}
	if len(resp.ResponseHeadersToAdd) != 0 || resp.RawBody != nil || resp.Statuses[0].CurrentLimit != nil {
		t.Errorf("a sync call answered with headers %v, body %q, current limit %v; want codes and times only",
			resp.ResponseHeadersToAdd, resp.RawBody, resp.Statuses[0].CurrentLimit)
	}
	if got := md.Get(RetryAfterKey); len(got) != 1 || got[0] != "45000000,0" || len(md.Get(RefusedKey)) != 0 {
		t.Errorf("metadata %v; want %s 45000000,0 and no refusal", md, RetryAfterKey)
	}

	fallback, err := global.NewMemory(global.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := limiter.NewStoreDecider(limiter.StoreOptions{Store: lateStore{}, Fallback: fallback, MaxWait: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	late := start(t, limiter.Options{Decider: d})
	if _, err := late.client.ShouldRateLimit(ctx, req); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("a sync call the store did not answer in time: %v; want DeadlineExceeded", err)
	}
}
