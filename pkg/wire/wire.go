// Package wire carries Envoy's rate limit messages as Envoy sends them.
//
// Envoy copies header bytes into descriptor values as they arrive (HTTP
// allows obs-text, bytes 0x80–0xFF), and its C++ serializer writes them
// into proto3 string fields unchecked. Go's protobuf runtime refuses such
// a message outright, and an error is what Envoy fails open on: one byte
// like 0xFF in a header would step around every limit. Codec and
// UnmarshalJSON accept those strings, byte for byte, so the request is
// decided like any other; everything else about a message is checked as
// strictly as the standard codecs do.
//
// The tolerant path runs only when the standard one refuses a message, so
// a well-formed message costs nothing extra. Strings are tolerated in any
// message, which also lets a sluice sidecar forward such a request
// upstream. Codec encodes a message with the code vtprotobuf generates for
// it when the build has that code: go-control-plane's Envoy messages carry
// it under the build tag vtprotobuf, which sluice's builds set (see
// Marshal). It decodes the RateLimitRequest Envoy and sluice's sidecars
// send (a domain, a hits_addend, descriptors of entries with their own
// hits_addend and is_negative_hits) with a decoder of its own, in about
// half the time of protobuf's reflective one, and leaves every other
// shape of that message (an override, an unknown field), and every other
// message, to protobuf (see Unmarshal).
// It depends on the protobuf and gRPC runtimes and on go-control-plane's
// rate limit messages.
package wire

import (
	"fmt"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the standard codec Codec delegates to
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Codec is gRPC's protobuf codec, tolerant of strings that are not valid
// UTF-8. Use it on servers with grpc.ForceServerCodecV2 and on calls with
// grpc.ForceCodecV2. The zero value is ready; it is safe for concurrent
// use.
type Codec struct{}

var _ encoding.CodecV2 = Codec{}

// Name is the content subtype it serves: "proto", as the standard codec.
func (Codec) Name() string { return "proto" }

// standard is gRPC's own protobuf codec, looked up once: a lookup is a map
// read under no lock, 1 % of a server's CPU when made per message. The
// package registering it is initialized before this one.
var standard = encoding.GetCodecV2("proto")

// Marshal encodes v as the standard codec does, writing strings that are
// not valid UTF-8 as the bytes they hold. A message built with vtprotobuf's
// generated code (-tags vtprotobuf) is encoded by it: the same bytes, in a
// quarter of the time of protobuf's reflective encoder, strings written
// as they are.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(vtMessage); ok {
		return marshalVT(m)
	}
	out, err := standard.Marshal(v)
	if err == nil {
		return out, nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return nil, err
	}
	b, laxErr := marshalLax(nil, m.ProtoReflect())
	if laxErr != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

// Unmarshal decodes data into v as the standard codec does, accepting
// strings that are not valid UTF-8 as the bytes they hold. A message that
// is malformed otherwise is refused with the standard codec's error.
//
// A RateLimitRequest of the shape Envoy's filter and sluice's sidecars
// send, in one buffer, is decoded by decodeRequest: the same message
// protobuf would decode, with fewer allocations
// (TestRequestDecodedAsProtobufDoes, FuzzDecodeRequest).
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*rlsv3.RateLimitRequest); ok && len(data) == 1 && decodeRequest(data[0].ReadOnlyData(), r) {
		return nil
	}
	err := standard.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return err
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	proto.Reset(m)
	if laxErr := unmarshalLax(buf.ReadOnlyData(), m.ProtoReflect()); laxErr != nil {
		proto.Reset(m)
		return err
	}
	return nil
}

// Unmarshal decodes b into m, accepting strings that are not valid UTF-8.
func Unmarshal(b []byte, m proto.Message) error {
	err := proto.Unmarshal(b, m)
	if err == nil {
		return nil
	}
	proto.Reset(m)
	if laxErr := unmarshalLax(b, m.ProtoReflect()); laxErr != nil {
		proto.Reset(m)
		return err
	}
	return nil
}

// Marshal encodes m, writing strings that are not valid UTF-8 as they are.
func Marshal(m proto.Message) ([]byte, error) {
	b, err := proto.Marshal(m)
	if err == nil {
		return b, nil
	}
	if b, laxErr := marshalLax(nil, m.ProtoReflect()); laxErr == nil {
		return b, nil
	}
	return nil, err
}

// vtMessage is a message with vtprotobuf's generated encoder.
type vtMessage interface {
	SizeVT() int
	MarshalToSizedBufferVTStrict(dst []byte) (int, error)
}

// marshalVT encodes m into a buffer of its size: from gRPC's pool when
// the size is one gRPC pools, as its own codec does.
func marshalVT(m vtMessage) (mem.BufferSlice, error) {
	size := m.SizeVT()
	if mem.IsBelowBufferPoolingThreshold(size) {
		b := make([]byte, size)
		n, err := m.MarshalToSizedBufferVTStrict(b)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b[size-n:])}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	n, err := m.MarshalToSizedBufferVTStrict(*buf)
	if err != nil {
		pool.Put(buf)
		return nil, err
	}
	if n != size { // written from the end: the encoding is the tail
		copy(*buf, (*buf)[size-n:])
		*buf = (*buf)[:n]
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// strict decodes and encodes everything but the strings and messages the
// tolerant walks handle themselves: one field at a time, merged.
var (
	strictIn  = proto.UnmarshalOptions{Merge: true}
	strictOut = proto.MarshalOptions{Deterministic: true}
)

// unmarshalLax decodes b into m field by field: string fields take their
// bytes as they are, message fields recurse, and every other field (and
// unknown ones) goes through the standard decoder, merged into m.
func unmarshalLax(b []byte, m protoreflect.Message) error {
	fields := m.Descriptor().Fields()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		vn := protowire.ConsumeFieldValue(num, typ, b[n:])
		if vn < 0 {
			return protowire.ParseError(vn)
		}
		field, value := b[:n+vn], b[n:n+vn]
		b = b[n+vn:]
		fd := fields.ByNumber(num)
		if fd == nil || typ != protowire.BytesType || fd.IsMap() {
			if err := strictIn.Unmarshal(field, m.Interface()); err != nil {
				return err
			}
			continue
		}
		payload, _ := protowire.ConsumeBytes(value)
		switch fd.Kind() {
		case protoreflect.StringKind:
			v := protoreflect.ValueOfString(string(payload))
			if fd.IsList() {
				m.Mutable(fd).List().Append(v)
			} else {
				m.Set(fd, v)
			}
		case protoreflect.MessageKind:
			if fd.IsList() {
				list := m.Mutable(fd).List()
				elem := list.NewElement()
				if err := unmarshalLax(payload, elem.Message()); err != nil {
					return err
				}
				list.Append(elem)
			} else if err := unmarshalLax(payload, m.Mutable(fd).Message()); err != nil {
				return err
			}
		default:
			if err := strictIn.Unmarshal(field, m.Interface()); err != nil {
				return err
			}
		}
	}
	return nil
}

// marshalLax appends m's encoding to b field by field: string fields as
// their bytes, message fields recursively, every other field through the
// standard encoder; then m's unknown fields.
func marshalLax(b []byte, m protoreflect.Message) ([]byte, error) {
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap() || (fd.Kind() != protoreflect.StringKind && fd.Kind() != protoreflect.MessageKind):
			one := m.New()
			one.Set(fd, v)
			var out []byte
			if out, err = strictOut.Marshal(one.Interface()); err != nil {
				return false
			}
			b = append(b, out...)
		case fd.IsList():
			list := v.List()
			for i := range list.Len() {
				if b, err = appendLax(b, fd, list.Get(i)); err != nil {
					return false
				}
			}
		default:
			b, err = appendLax(b, fd, v)
		}
		return err == nil
	})
	if err != nil {
		return nil, err
	}
	return append(b, m.GetUnknown()...), nil
}

// appendLax appends one string or message value of fd.
func appendLax(b []byte, fd protoreflect.FieldDescriptor, v protoreflect.Value) ([]byte, error) {
	b = protowire.AppendTag(b, fd.Number(), protowire.BytesType)
	if fd.Kind() == protoreflect.StringKind {
		return protowire.AppendString(b, v.String()), nil
	}
	inner, err := marshalLax(nil, v.Message())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", fd.FullName(), err)
	}
	return protowire.AppendBytes(b, inner), nil
}
