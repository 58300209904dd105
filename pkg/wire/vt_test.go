package wire

import (
	"bytes"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// replies are the responses a server writes: a bare OK, a 429 with every
// header, body and metadata, and one too large for a plain allocation.
func replies(t *testing.T) map[string]*rlsv3.RateLimitResponse {
	t.Helper()
	meta, err := structpb.NewStruct(map[string]any{"limit": "per-client", "hits": 3.0, "nested": map[string]any{"ok": true}})
	if err != nil {
		t.Fatal(err)
	}
	status := func(code rlsv3.RateLimitResponse_Code) *rlsv3.RateLimitResponse_DescriptorStatus {
		return &rlsv3.RateLimitResponse_DescriptorStatus{
			Code: code,
			CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{Name: "per-client", RequestsPerUnit: 100,
				Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE, UnitMultiplier: wrapperspb.UInt32(5)},
			LimitRemaining:     7,
			DurationUntilReset: durationpb.New(1234567890),
		}
	}
	full := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT,
		Statuses:    []*rlsv3.RateLimitResponse_DescriptorStatus{status(rlsv3.RateLimitResponse_OK), status(rlsv3.RateLimitResponse_OVER_LIMIT)},
		ResponseHeadersToAdd: []*corev3.HeaderValue{
			{Key: "Retry-After", Value: "12"}, {Key: "RateLimit", Value: `"per-client";r=0;t=12`},
			{Key: "X-RateLimit-Reason", Value: "per-client"},
		},
		RequestHeadersToAdd: []*corev3.HeaderValue{{Key: "x-limited", Value: "1"}},
		RawBody:             []byte(`{"type":"about:blank","status":429}`),
		DynamicMetadata:     meta,
	}
	big := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for range 40 {
		big.Statuses = append(big.Statuses, status(rlsv3.RateLimitResponse_OK))
	}
	big.RawBody = []byte(strings.Repeat("b", 4096))
	return map[string]*rlsv3.RateLimitResponse{
		"bare OK": {OverallCode: rlsv3.RateLimitResponse_OK},
		"429":     full,
		"large":   big,
	}
}

// TestCodecMarshalsAsTheStandardEncoder: whichever encoder the build has
// (vtprotobuf's with -tags vtprotobuf), a message decodes to itself, and
// its bytes are the standard encoder's where the standard encoder's are
// fixed (a Struct's fields, a map, are written in no set order).
func TestCodecMarshalsAsTheStandardEncoder(t *testing.T) {
	msgs := map[string]proto.Message{"request": &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 2,
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}}
	for name, r := range replies(t) {
		msgs[name] = r
	}
	for name, m := range msgs {
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := (Codec{}).Marshal(m)
		if err != nil {
			t.Fatalf("%s: Marshal = %v", name, err)
		}
		b := got.Materialize()
		got.Free()
		back := m.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(b, back); err != nil || !proto.Equal(back, m) {
			t.Errorf("%s: decoded %v, %v; want %v", name, back, err, m)
		}
		if r, ok := m.(*rlsv3.RateLimitResponse); (!ok || r.DynamicMetadata == nil) && !bytes.Equal(b, want) {
			t.Errorf("%s: Marshal = %x; want %x", name, b, want)
		}
	}
}

// TestCodecMarshalsRawBytes: a reply whose header value holds bytes that
// are not UTF-8 (a descriptor value echoed into a header) is written as
// it is, by either encoder.
func TestCodecMarshalsRawBytes(t *testing.T) {
	const raw = "bot\xff\xfe"
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT,
		ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "X-RateLimit-Reason", Value: raw}}}
	out, err := (Codec{}).Marshal(resp)
	if err != nil {
		t.Fatalf("Marshal = %v", err)
	}
	var back rlsv3.RateLimitResponse
	if err := Unmarshal(out.Materialize(), &back); err != nil || back.GetResponseHeadersToAdd()[0].GetValue() != raw {
		t.Fatalf("decoded %v, %v; want the value byte for byte", &back, err)
	}
}
