package rls

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// wantReply is the core's answer a as Envoy's response, field for field:
// the codes; per status, the limit that applied as current_limit, and
// when a limit applied, what is left and the time to reset; the headers
// as HeaderValues, in order; the body as raw_body.
func wantReply(a *limiter.Answer) *rlsv3.RateLimitResponse {
	code := func(c limiter.Code) rlsv3.RateLimitResponse_Code {
		if c == limiter.OverLimit {
			return rlsv3.RateLimitResponse_OVER_LIMIT
		}
		return rlsv3.RateLimitResponse_OK
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: code(a.Overall), RawBody: a.Body}
	for _, st := range a.Statuses {
		ds := &rlsv3.RateLimitResponse_DescriptorStatus{Code: code(st.Code)}
		if st.Limit != nil {
			ds.CurrentLimit = newCurrentLimit(st.Limit)
		}
		if st.Limited {
			ds.LimitRemaining, ds.DurationUntilReset = st.Remaining, durationpb.New(st.ResetAfter)
		}
		resp.Statuses = append(resp.Statuses, ds)
	}
	for _, h := range a.Headers {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: h.Key, Value: h.Value})
	}
	return resp
}

// TestAnswerOnTheWire: Envoy's request reaches the core as it was sent,
// and the response over gRPC is the core's answer to it, written field for
// field: for a request of an unmatched descriptor, a limit, a
// unit_multiplier and Envoy's override, admitted and then refused with a
// 429's headers and body (legacy headers on: eight of them).
func TestAnswerOnTheWire(t *testing.T) {
	over := &ratelimitv3.RateLimitDescriptor{Entries: desc("api_key", "k").Entries,
		Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_HOUR}}
	req := &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 1, Descriptors: []*ratelimitv3.RateLimitDescriptor{
		desc("nothing", "here"), desc("remote_address", "a"), desc("window", "w"), over,
	}}
	// Two servers in the same state: one answers over gRPC, the other's
	// core is asked directly.
	grpcSide := start(t, limiter.Options{LegacyHeaders: true})
	core := start(t, limiter.Options{LegacyHeaders: true}).svc.Core()
	for i, want := range []string{"OK:OK,OK,OK,OK", "OK:OK,OK,OK,OK", "OVER_LIMIT:OK,OK,OVER_LIMIT,OVER_LIMIT"} {
		resp := grpcSide.call(t, req)
		a, err := core.Decide(context.Background(), Request(req), limiter.DecideOptions{Content: true})
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(resp, wantReply(a)) {
			t.Fatalf("request %d over gRPC:\n%v\nwant the core's answer:\n%v", i+1, resp, wantReply(a))
		}
		if got := codesOf(resp); got != want {
			t.Fatalf("request %d: %s; want %s", i+1, got, want)
		}
	}
}

// TestReply: every form the core's answer takes is written as Envoy's
// response: statuses past the reply's own space, limits and none, headers
// past its space, a body or none; a configured limit's current_limit is
// built once per config and shared, an override's afresh.
func TestReply(t *testing.T) {
	cfg := mustConfig(t, testConfig)
	perClient := cfg.Match("edge", []config.Entry{{Key: "remote_address", Value: "x"}})
	window := cfg.Match("edge", []config.Entry{{Key: "window", Value: "x"}})
	overridden := &config.Limit{Path: "edge.override", RateLimit: config.RateLimit{Unit: config.UnitYear, UnitMultiplier: 100, RequestsPerUnit: 5}}
	limited := func(l *config.Limit, code limiter.Code) limiter.Status {
		return limiter.Status{Limit: l, Code: code, Limited: true, Remaining: 7, ResetAfter: 1500 * time.Millisecond}
	}
	headers := func(n int) []limiter.Header {
		var hs []limiter.Header
		for i := range n {
			hs = append(hs, limiter.Header{Key: fmt.Sprint("H", i), Value: fmt.Sprint(i)})
		}
		return hs
	}
	for _, tt := range []struct {
		name string
		a    limiter.Answer
	}{
		{"nothing applied", limiter.Answer{Overall: limiter.OK, Statuses: []limiter.Status{{Code: limiter.OK}}}},
		{"no descriptors", limiter.Answer{Overall: limiter.OK}},
		{"two limits, two headers", limiter.Answer{Overall: limiter.OK, Headers: headers(2),
			Statuses: []limiter.Status{limited(perClient, limiter.OK), limited(window, limiter.OK)}}},
		{"codes and times only", limiter.Answer{Overall: limiter.OverLimit,
			Statuses: []limiter.Status{{Code: limiter.OverLimit, Limited: true, RetryAfter: time.Second}}}},
		{"three statuses, five headers, a body", limiter.Answer{Overall: limiter.OverLimit, Headers: headers(5), Body: []byte(`{"status":429}`),
			Statuses: []limiter.Status{limited(perClient, limiter.OverLimit), {Code: limiter.OK}, limited(window, limiter.OK)}}},
		{"an override, eight headers", limiter.Answer{Overall: limiter.OverLimit, Headers: headers(8),
			Statuses: []limiter.Status{{Limit: overridden, Overridden: true, Code: limiter.OverLimit, Limited: true, ResetAfter: config.MaxWindow}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.a.Config = cfg
			if got, want := NewService(nil).reply(&tt.a), wantReply(&tt.a); !proto.Equal(got, want) {
				t.Errorf("reply =\n%v\nwant\n%v", got, want)
			}
		})
	}
	s := NewService(nil)
	shared := limiter.Answer{Config: cfg, Statuses: []limiter.Status{limited(perClient, limiter.OK), {Limit: overridden, Overridden: true}}}
	first, second := s.reply(&shared), s.reply(&shared)
	if first.Statuses[0].CurrentLimit != second.Statuses[0].CurrentLimit {
		t.Error("a configured limit's current_limit built for every reply; want it shared")
	}
	if first.Statuses[1].CurrentLimit == second.Statuses[1].CurrentLimit {
		t.Error("an override's current_limit shared between replies; want it afresh")
	}
	if got := first.Statuses[1].CurrentLimit; got.GetUnit() != rlsv3.RateLimitResponse_RateLimit_YEAR || got.GetUnitMultiplier().GetValue() != 100 || got.GetName() != "" {
		t.Errorf("the override's current_limit = %v; want 5 per 100 years, unnamed", got)
	}
}

// TestRequestView: Envoy's request as the core reads it, in place:
// hits_addend unset, set or an explicit 0; an override's unit mapped (one
// Envoy's enum has and ours lacks is not a unit, which the core refuses),
// its multiplier 1 when unset; and back: a descriptor from this view is
// Envoy's own, one from another adapter's is built.
func TestRequestView(t *testing.T) {
	override := func(u typev3.RateLimitUnit, mult *wrapperspb.UInt32Value) *ratelimitv3.RateLimitDescriptor {
		d := desc("k", "v")
		d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 9, Unit: u, UnitMultiplier: mult}
		return d
	}
	counted := desc("k", "v", "k2", "v2")
	counted.HitsAddend = wrapperspb.UInt64(7)
	checked := desc("k", "v")
	checked.HitsAddend = wrapperspb.UInt64(0)
	req := &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 3, Descriptors: []*ratelimitv3.RateLimitDescriptor{
		desc("k", "v"), counted, checked,
		override(typev3.RateLimitUnit_SECOND, nil), override(typev3.RateLimitUnit_MINUTE, wrapperspb.UInt32(0)),
		override(typev3.RateLimitUnit_HOUR, wrapperspb.UInt32(5)), override(typev3.RateLimitUnit_DAY, nil),
		override(typev3.RateLimitUnit_MONTH, nil), override(typev3.RateLimitUnit_YEAR, nil), override(typev3.RateLimitUnit_UNKNOWN, nil),
	}}
	v := Request(req)
	if v.Domain() != "edge" || v.Cost() != 3 || v.Len() != 10 || v.Entries(1) != 2 {
		t.Fatalf("view: domain %q, cost %d, %d descriptors, %d entries in the second", v.Domain(), v.Cost(), v.Len(), v.Entries(1))
	}
	if k, val := v.Entry(1, 1); k != "k2" || val != "v2" {
		t.Errorf("Entry(1, 1) = %q, %q", k, val)
	}
	for i, want := range []struct {
		cost uint64
		set  bool
	}{{0, false}, {7, true}, {0, true}} {
		if c, set := v.DescriptorCost(i); c != want.cost || set != want.set {
			t.Errorf("DescriptorCost(%d) = %d, %v; want %d, %v", i, c, set, want.cost, want.set)
		}
	}
	if _, ok := v.Override(0); ok {
		t.Error("Override(0) of a descriptor without one")
	}
	for i, want := range []limiter.Override{
		{RequestsPerUnit: 9, Unit: config.UnitSecond, Multiplier: 1},
		{RequestsPerUnit: 9, Unit: config.UnitMinute, Multiplier: 0},
		{RequestsPerUnit: 9, Unit: config.UnitHour, Multiplier: 5},
		{RequestsPerUnit: 9, Unit: config.UnitDay, Multiplier: 1},
		{RequestsPerUnit: 9, Unit: config.UnitMonth, Multiplier: 1},
		{RequestsPerUnit: 9, Unit: config.UnitYear, Multiplier: 1},
		{RequestsPerUnit: 9, Unit: 0, Multiplier: 1},
	} {
		if got, ok := v.Override(3 + i); !ok || got != want {
			t.Errorf("Override(%d) = %+v, %v; want %+v", 3+i, got, ok, want)
		}
	}
	if Descriptor(v, 5) != req.Descriptors[5] {
		t.Error("Descriptor of this view: not Envoy's own")
	}
	// Another adapter's request: built, the override mapped back.
	built := Descriptor(otherRequest{v}, 5)
	if !proto.Equal(built, req.Descriptors[5]) {
		t.Errorf("Descriptor built = %v; want %v", built, req.Descriptors[5])
	}
	if built := Descriptor(otherRequest{v}, 3); !proto.Equal(built, req.Descriptors[3]) {
		t.Errorf("Descriptor built = %v; want %v (multiplier 1 unset)", built, req.Descriptors[3])
	}
	// Its own cost, set or zero, travels with it; unset stays unset.
	for i := range 3 {
		if built := Descriptor(otherRequest{v}, i); !proto.Equal(built.GetHitsAddend(), req.Descriptors[i].GetHitsAddend()) {
			t.Errorf("Descriptor(%d) built: hits_addend %v; want %v", i, built.GetHitsAddend(), req.Descriptors[i].GetHitsAddend())
		}
	}
	if built := Descriptor(otherRequest{v}, 1); built.GetLimit() != nil || len(built.GetEntries()) != 2 {
		t.Errorf("Descriptor built = %v; want two entries, no override", built)
	}
}

// otherRequest is a limiter.Request that is not this package's view.
type otherRequest struct{ limiter.Request }
