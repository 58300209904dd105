package wire

import (
	"fmt"
	"math"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// field appends field num holding a length-delimited v to b.
func field(b []byte, num protowire.Number, v []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
}

// varint appends field num holding the varint v to b.
func varint(b []byte, num protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
}

func entry(key, value string) []byte {
	return field(field(nil, 1, []byte(key)), 2, []byte(value))
}

func marshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRequestDecodedAsProtobufDoes holds the codec's own decoder of the
// request Envoy sends to the standard decoder (with its tolerance of
// strings that are not UTF-8, Unmarshal): the same message, or the same
// refusal, for the shapes it decodes and for those it leaves to the
// standard decoder.
func TestRequestDecodedAsProtobufDoes(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		own  bool // decoded by decodeRequest
	}{
		{"empty", nil, true},
		{"domain only", marshal(t, &rlsv3.RateLimitRequest{Domain: "edge"}), true},
		{"one descriptor", marshal(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}},
		}}}), true},
		{"several descriptors and entries, hits_addend", marshal(t, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 7, Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "a", Value: "1"}, {Key: "b", Value: "2"}, {Key: "c", Value: "3"}}},
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "d", Value: "4"}}},
			{},
		}}), true},
		{"raw bytes in every string", field(field(nil, 1, []byte("e\xffdge")), 2, field(nil, 1, entry("k\x80", "v\xfe\xff"))), true},
		{"empty entry, empty key and value", field(field(nil, 2, field(nil, 1, nil)), 2, field(nil, 1, entry("", ""))), true},
		{"hits_addend past uint32, truncated as protobuf does", varint(nil, 3, math.MaxUint32+5), true},
		{"hits_addend in ten bytes", append(protowire.AppendTag(nil, 3, protowire.VarintType), 0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00), true},
		{"fields out of order", field(varint(field(nil, 2, field(nil, 1, entry("k", "v"))), 3, 2), 1, []byte("edge")), true},
		{"value before key", field(nil, 2, field(nil, 1, field(field(nil, 2, []byte("v")), 1, []byte("k")))), true},

		{"override", marshal(t, &rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}},
			Limit:   &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_SECOND},
		}}}), false},
		{"a sidecar's records: descriptors with their own hits_addend, one a refund", marshal(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}, HitsAddend: wrapperspb.UInt64(3)},
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "w"}, {Key: "j", Value: "x"}}, HitsAddend: wrapperspb.UInt64(1 << 40), IsNegativeHits: true},
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "y"}}},
		}}), true},
		{"hits_addend of 0, an empty wrapper", field(nil, 2, field(field(nil, 1, entry("k", "v")), 3, nil)), true},
		{"is_negative_hits as 2", field(nil, 2, varint(field(nil, 1, entry("k", "v")), 4, 2)), true},
		{"fields of a descriptor out of order", field(nil, 2, field(varint(field(nil, 3, varint(nil, 1, 5)), 4, 1), 1, entry("k", "v"))), true},
		{"unknown field of the request", envoyRequest("plain"), false},
		{"unknown field of an entry", field(nil, 2, field(nil, 1, varint(entry("k", "v"), 3, 1))), false},
		{"an unknown field of the wrapper", field(nil, 2, field(nil, 3, varint(varint(nil, 1, 5), 2, 1))), false},
		{"the wrapper's value twice", field(nil, 2, field(nil, 3, varint(varint(nil, 1, 5), 1, 6))), false},
		{"hits_addend of a descriptor twice", field(nil, 2, field(field(nil, 3, varint(nil, 1, 5)), 3, varint(nil, 1, 6))), false},
		{"is_negative_hits twice", field(nil, 2, varint(varint(nil, 4, 1), 4, 0)), false},
		{"domain twice: the last stands", field(field(nil, 1, []byte("a")), 1, []byte("b")), false},
		{"hits_addend twice", varint(varint(nil, 3, 1), 3, 2), false},
		{"key twice", field(nil, 2, field(nil, 1, field(entry("k", "v"), 1, []byte("k2")))), false},
		{"domain as a varint", varint(nil, 1, 5), false},
		{"hits_addend as bytes", field(nil, 3, []byte{1}), false},

		{"truncated length", []byte{0x0a, 0x05, 'e'}, false},
		{"truncated descriptor", field(nil, 2, []byte{0x0a, 0x09, 0x0a}), false},
		{"truncated varint", []byte{0x18, 0x80}, false},
		{"field number 0", []byte{0x02, 0x00}, false},
		{"a group", []byte{0x13, 0x14}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var own rlsv3.RateLimitRequest
			if got := decodeRequest(tt.in, &own); got != tt.own {
				t.Fatalf("decodeRequest took it = %v, want %v", got, tt.own)
			}
			var want rlsv3.RateLimitRequest
			wantErr := Unmarshal(tt.in, &want)
			// Through the codec, into a message that held another request.
			got := &rlsv3.RateLimitRequest{Domain: "stale", HitsAddend: 9, Descriptors: []*ratelimitv3.RateLimitDescriptor{{}}}
			err := Codec{}.Unmarshal(mem.BufferSlice{mem.SliceBuffer(tt.in)}, got)
			if (err != nil) != (wantErr != nil) {
				t.Fatalf("Codec.Unmarshal = %v, want error %v", err, wantErr)
			}
			if err == nil && !proto.Equal(got, &want) {
				t.Fatalf("Codec.Unmarshal = %v, want %v", got, &want)
			}
			if tt.own && !proto.Equal(&own, &want) {
				t.Fatalf("decodeRequest = %v, want %v", &own, &want)
			}
		})
	}
}

// TestRequestDecodedInPieces: a message gRPC holds in more than one
// buffer is decoded all the same.
func TestRequestDecodedInPieces(t *testing.T) {
	in := marshal(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}},
	}}})
	var got rlsv3.RateLimitRequest
	if err := (Codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(in[:3]), mem.SliceBuffer(in[3:])}, &got); err != nil {
		t.Fatal(err)
	}
	if got.GetDescriptors()[0].GetEntries()[0].GetValue() != "v" || got.GetDomain() != "edge" {
		t.Fatalf("got %v", &got)
	}
}

// TestRequestStringsOwnTheirBytes: the decoded strings are copies, not
// views of the buffer gRPC reuses for the next message.
func TestRequestStringsOwnTheirBytes(t *testing.T) {
	in := field(field(nil, 1, []byte("edge")), 2, field(nil, 1, entry("key", "value")))
	var r rlsv3.RateLimitRequest
	if !decodeRequest(in, &r) {
		t.Fatal("not decoded")
	}
	for i := range in {
		in[i] = 'x'
	}
	if e := r.Descriptors[0].Entries[0]; r.Domain != "edge" || e.Key != "key" || e.Value != "value" {
		t.Fatalf("strings changed with the buffer: %v", &r)
	}
}

// FuzzDecodeRequest: whatever decodeRequest takes, the standard decoder
// (with the codec's tolerance of raw bytes in strings) takes too, as the
// same message; what it leaves, it leaves untouched.
func FuzzDecodeRequest(f *testing.F) {
	f.Add(envoyRequest("x\xff"))
	f.Add(field(field(varint(nil, 3, 2), 1, []byte("edge")), 2, field(field(nil, 1, entry("a", "1")), 1, entry("b", "2"))))
	f.Add(field(nil, 2, field(nil, 1, nil)))
	f.Add(field(nil, 2, varint(field(field(nil, 1, entry("k", "v")), 3, varint(nil, 1, 5)), 4, 1)))
	f.Fuzz(func(t *testing.T, b []byte) {
		var own rlsv3.RateLimitRequest
		took := decodeRequest(b, &own)
		var want rlsv3.RateLimitRequest
		err := Unmarshal(b, &want)
		switch {
		case took && err != nil:
			t.Fatalf("decodeRequest took what the standard decoder refuses (%v): %v", err, &own)
		case took && !proto.Equal(&own, &want):
			t.Fatalf("decodeRequest = %v, want %v", &own, &want)
		case !took && !proto.Equal(&own, &rlsv3.RateLimitRequest{}):
			t.Fatalf("decodeRequest left %v behind, reporting false", &own)
		}
	})
}

// BenchmarkUnmarshalRequest decodes, through the codec and through
// protobuf, the request Envoy sends most (one descriptor of one entry)
// and a sidecar's records (64 descriptors of one entry, each with its
// hits_addend).
func BenchmarkUnmarshalRequest(b *testing.B) {
	records := &rlsv3.RateLimitRequest{Domain: "edge"}
	for i := range 64 {
		records.Descriptors = append(records.Descriptors, &ratelimitv3.RateLimitDescriptor{
			Entries:    []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: fmt.Sprint("10.0.0.", i)}},
			HitsAddend: wrapperspb.UInt64(uint64(1 + i)),
		})
	}
	for _, tc := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
	}{
		{"envoy", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}},
		}}}},
		{"records", records},
	} {
		in := marshal(b, tc.req)
		data := mem.BufferSlice{mem.SliceBuffer(in)}
		b.Run(tc.name+"/codec", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := (Codec{}).Unmarshal(data, new(rlsv3.RateLimitRequest)); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tc.name+"/protobuf", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := proto.Unmarshal(in, new(rlsv3.RateLimitRequest)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
