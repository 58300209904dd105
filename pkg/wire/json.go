package wire

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// UnmarshalJSON decodes a message in protobuf's JSON form, as
// protojson.Unmarshal does, except that a body holding bytes that are not
// valid UTF-8 inside its strings is decoded with those bytes kept as they
// are, the way Codec keeps them on the gRPC path (a client posting a
// header's bytes to /json gets the same decision as Envoy would).
//
// JSON cannot escape a byte, so each one is first written as a marker
// made of a NUL and a random nonce drawn for this call, which no request
// can know or forge, and turned back into its byte once decoded.
func UnmarshalJSON(b []byte, m proto.Message) error {
	err := protojson.Unmarshal(b, m)
	if err == nil || utf8.Valid(b) {
		return err
	}
	var nonce [16]byte
	rand.Read(nonce[:])
	marker := `\u0000` + hex.EncodeToString(nonce[:])
	var escaped []byte
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			escaped = append(escaped, marker...)
			escaped = hex.AppendEncode(escaped, b[i:i+1])
		} else {
			escaped = append(escaped, b[i:i+size]...)
		}
		i += size
	}
	proto.Reset(m)
	if protojson.Unmarshal(escaped, m) != nil {
		proto.Reset(m)
		return err
	}
	restore(m.ProtoReflect(), "\x00"+marker[len(`\u0000`):])
	return nil
}

// restore turns the markers in m's strings back into the bytes they stand
// for: marker then two hex digits.
func restore(m protoreflect.Message, marker string) {
	unmark := func(s string) string {
		if !strings.Contains(s, marker) {
			return s
		}
		var out []byte
		for {
			before, after, found := strings.Cut(s, marker)
			out = append(out, before...)
			if !found || len(after) < 2 {
				return string(append(out, after...))
			}
			c, err := hex.DecodeString(after[:2])
			if err != nil {
				out = append(out, marker...)
				s = after
				continue
			}
			out = append(out, c...)
			s = after[2:]
		}
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
		case fd.Kind() == protoreflect.StringKind && fd.IsList():
			list := v.List()
			for i := range list.Len() {
				list.Set(i, protoreflect.ValueOfString(unmark(list.Get(i).String())))
			}
		case fd.Kind() == protoreflect.StringKind:
			m.Set(fd, protoreflect.ValueOfString(unmark(v.String())))
		case fd.Kind() == protoreflect.MessageKind && fd.IsList():
			list := v.List()
			for i := range list.Len() {
				restore(list.Get(i).Message(), marker)
			}
		case fd.Kind() == protoreflect.MessageKind:
			restore(v.Message(), marker)
		}
		return true
	})
}
