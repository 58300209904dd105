package main

import (
	"context"
	"fmt"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// envoyBytes is the RateLimitRequest Envoy's C++ serializer writes for
// domain "edge" and one descriptor {client: value}, with value's bytes
// copied unchecked (as it copies a header's), built with protowire so the
// test does not depend on sluice's own encoder.
func envoyBytes(value string) []byte {
	var entry, desc, req []byte
	entry = protowire.AppendTag(entry, 1, protowire.BytesType)
	entry = protowire.AppendString(entry, "client")
	entry = protowire.AppendTag(entry, 2, protowire.BytesType)
	entry = protowire.AppendString(entry, value)
	desc = protowire.AppendTag(desc, 1, protowire.BytesType)
	desc = protowire.AppendBytes(desc, entry)
	req = protowire.AppendTag(req, 1, protowire.BytesType)
	req = protowire.AppendString(req, "edge")
	req = protowire.AppendTag(req, 2, protowire.BytesType)
	return protowire.AppendBytes(req, desc)
}

// rawCodec sends a request's bytes as they are and decodes the reply with
// the standard protobuf runtime.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }
func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.([]byte))}, nil
}
func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return proto.Unmarshal(data.Materialize(), v.(proto.Message))
}

// TestEnvoyBytesAreDecided: a request whose descriptor value holds a byte
// that is not UTF-8, sent as Envoy sends it, is decided and limited on its
// own count (the finding: it was answered Internal, which Envoy admits).
func TestEnvoyBytesAreDecided(t *testing.T) {
	s := startServer(t, "-config", writeConfig(t, testConfig))
	call := func(value string) (string, error) {
		var resp rlsv3.RateLimitResponse
		err := s.conn.Invoke(context.Background(), rlsv3.RateLimitService_ShouldRateLimit_FullMethodName,
			envoyBytes(value), &resp, grpc.ForceCodecV2(rawCodec{}))
		return resp.GetOverallCode().String(), err
	}
	for i, want := range []string{"OK", "OK", "OK", "OVER_LIMIT"} {
		got, err := call("10.0.0.1\xff")
		if err != nil || got != want {
			t.Fatalf("request %d: %s, %v; want %s", i+1, got, err, want)
		}
	}
	if got, err := call("10.0.0.1\xfe"); err != nil || got != "OK" {
		t.Fatalf("another value: %s, %v; want OK on its own count", got, err)
	}
	for i := range 4 {
		if got, err := call(fmt.Sprintf("%d\xff", i)); err != nil || got != "OK" {
			t.Fatalf("value %d: %s, %v", i, got, err)
		}
	}
}
