package wire

import (
	"bytes"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// envoyRequest is what Envoy's C++ serializer writes for a request whose
// header value holds raw bytes, built field by field with protowire so the
// test does not depend on the code under test to produce it:
// RateLimitRequest{domain: "edge", hits_addend: 3, descriptors: [{entries:
// [{key: "user_agent", value: value}], hits_addend: 2}]}, plus an unknown
// field 99 a newer Envoy might send.
func envoyRequest(value string) []byte {
	var entry []byte
	entry = protowire.AppendTag(entry, 1, protowire.BytesType)
	entry = protowire.AppendString(entry, "user_agent")
	entry = protowire.AppendTag(entry, 2, protowire.BytesType)
	entry = protowire.AppendString(entry, value)
	var hits []byte
	hits = protowire.AppendTag(hits, 1, protowire.VarintType)
	hits = protowire.AppendVarint(hits, 2)
	var desc []byte
	desc = protowire.AppendTag(desc, 1, protowire.BytesType)
	desc = protowire.AppendBytes(desc, entry)
	desc = protowire.AppendTag(desc, 3, protowire.BytesType)
	desc = protowire.AppendBytes(desc, hits)
	var req []byte
	req = protowire.AppendTag(req, 1, protowire.BytesType)
	req = protowire.AppendString(req, "edge")
	req = protowire.AppendTag(req, 2, protowire.BytesType)
	req = protowire.AppendBytes(req, desc)
	req = protowire.AppendTag(req, 3, protowire.VarintType)
	req = protowire.AppendVarint(req, 3)
	req = protowire.AppendTag(req, 99, protowire.VarintType)
	return protowire.AppendVarint(req, 7)
}

func TestCodecAcceptsRawBytes(t *testing.T) {
	const raw = "sqlmap\xff\xfe/1.7 \xc3"
	var std rlsv3.RateLimitRequest
	if err := proto.Unmarshal(envoyRequest(raw), &std); err == nil {
		t.Fatal("the standard decoder accepted invalid UTF-8; this test no longer shows anything")
	}
	var req rlsv3.RateLimitRequest
	if err := (Codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(envoyRequest(raw))}, &req); err != nil {
		t.Fatalf("Unmarshal = %v", err)
	}
	d := req.GetDescriptors()
	if req.GetDomain() != "edge" || req.GetHitsAddend() != 3 || len(d) != 1 || d[0].GetHitsAddend().GetValue() != 2 ||
		d[0].GetEntries()[0].GetKey() != "user_agent" || d[0].GetEntries()[0].GetValue() != raw {
		t.Fatalf("decoded %v; want every field, the value byte for byte", &req)
	}
	if len(req.ProtoReflect().GetUnknown()) == 0 {
		t.Error("the unknown field was dropped")
	}
	// And back: the encoding carries the same bytes.
	out, err := (Codec{}).Marshal(&req)
	if err != nil {
		t.Fatalf("Marshal = %v", err)
	}
	var again rlsv3.RateLimitRequest
	if err := Unmarshal(out.Materialize(), &again); err != nil || !proto.Equal(&req, &again) {
		t.Fatalf("round trip: %v, %v; want %v", &again, err, &req)
	}
}

func TestCodecValidMessagesUnchanged(t *testing.T) {
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries:    []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "ü"}},
		Limit:      &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_HOUR},
		HitsAddend: wrapperspb.UInt64(0),
	}}}
	want, _ := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	got, err := (Codec{}).Marshal(req)
	if err != nil || !bytes.Equal(got.Materialize(), want) {
		t.Fatalf("Marshal = %x, %v; want %x", got.Materialize(), err, want)
	}
	// The tolerant encoder writes the same message the standard one does.
	lax, err := marshalLax(nil, req.ProtoReflect())
	var back rlsv3.RateLimitRequest
	if err != nil || proto.Unmarshal(lax, &back) != nil || !proto.Equal(&back, req) {
		t.Fatalf("marshalLax: %v, %v; want %v", &back, err, req)
	}
}

func TestCodecRefusesMalformed(t *testing.T) {
	good := envoyRequest("x")
	for name, b := range map[string][]byte{
		"truncated":  good[:len(good)-4],
		"bad tag":    {0x00},
		"bad length": {0x0a, 0xff, 0x01},
	} {
		var req rlsv3.RateLimitRequest
		if err := (Codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &req); err == nil {
			t.Errorf("%s: accepted %v", name, &req)
		}
	}
}

func TestUnmarshalJSON(t *testing.T) {
	body := []byte("{\"domain\":\"edge\",\"descriptors\":[{\"entries\":[{\"key\":\"user_agent\",\"value\":\"a\xff\\u0000b\xfe\"}]}]}")
	var req rlsv3.RateLimitRequest
	if err := UnmarshalJSON(body, &req); err != nil {
		t.Fatalf("UnmarshalJSON = %v", err)
	}
	if got := req.GetDescriptors()[0].GetEntries()[0].GetValue(); got != "a\xff\x00b\xfe" {
		t.Fatalf("value = %q; want the raw bytes kept", got)
	}
	for _, bad := range []string{"{\"domain\":\xff}", "{\"domain\":\"edge\"", "{\"nope\":\"\xff\"}"} {
		if err := UnmarshalJSON([]byte(bad), &req); err == nil {
			t.Errorf("UnmarshalJSON(%q) accepted it", bad)
		}
	}
}

// FuzzUnmarshal: the tolerant decoder never panics, and what it accepts
// it encodes back to a message that decodes to the same thing.
func FuzzUnmarshal(f *testing.F) {
	f.Add(envoyRequest("x\xff"))
	f.Add(envoyRequest("plain"))
	f.Add([]byte{0x12, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		var req rlsv3.RateLimitRequest
		if Unmarshal(b, &req) != nil {
			return
		}
		out, err := Marshal(&req)
		if err != nil {
			t.Fatalf("Marshal of a decoded message = %v", err)
		}
		var again rlsv3.RateLimitRequest
		if err := Unmarshal(out, &again); err != nil || !proto.Equal(&req, &again) {
			t.Fatalf("round trip: %v, %v; want %v", &again, err, &req)
		}
	})
}
