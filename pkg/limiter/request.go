package limiter

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"unicode/utf8"

	"github.com/sluicehq/sluice/pkg/config"
)

// Request is a rate-limit request as the core reads it: a view of an
// adapter's wire form (Envoy's protobuf, say) that the core reads in place,
// without copying it. Descriptors are numbered 0 to Len()-1 and their
// entries 0 to Entries(i)-1.
//
// A Request is read by the goroutine deciding it and need not be safe for
// concurrent use; the core keeps nothing of it past Decide.
type Request interface {
	Domain() string
	// Cost is the request's hits_addend; 0 means 1.
	Cost() uint32
	Len() int
	Entries(i int) int
	Entry(i, j int) (key, value string)
	// DescriptorCost is descriptor i's own hits_addend, which replaces the
	// request's when set; an explicit 0 checks without consuming.
	DescriptorCost(i int) (cost uint64, set bool)
	// Override is descriptor i's per-request limit (Envoy's `limit`), if
	// it has one.
	Override(i int) (Override, bool)
	// Refund reports whether descriptor i gives its hits back rather than
	// taking them (Envoy's is_negative_hits): see algorithm.GiveBack.
	Refund(i int) bool
}

// Override is a descriptor's per-request limit. Unit 0 is not a unit (the
// adapter could not map the wire's); Multiplier 0 was given as 0, which is
// refused (an unset multiplier is 1).
//
// A plain value, safe to copy and to read from many goroutines.
type Override struct {
	RequestsPerUnit uint32
	Unit            config.Unit
	Multiplier      uint32
}

// Limits on one request. Envoy sends a handful of descriptors of a few
// entries each; anything far beyond is a bug or an attack, and is refused
// before it costs a store call.
const (
	MaxDescriptors = 64
	MaxEntries     = 16
	MaxKeyLen      = 256
	// MaxValueLen is the longest descriptor value counted as it is. A
	// longer one is not refused (a client padding a header would then step
	// around its limit wherever the caller fails open): it is matched as it
	// is and counted by its digest (see EntryValue).
	MaxValueLen  = 1024
	MaxDomainLen = 256
	// MaxCost bounds hits_addend, so costs stay exact in the stores'
	// arithmetic (float64 in Lua).
	MaxCost = 1 << 32
)

// InvalidError is a request that cannot be decided: adapters answer it as
// a bad request (gRPC InvalidArgument, HTTP 400).
//
// A plain value, safe to share between goroutines once returned.
type InvalidError struct{ msg string }

func (e *InvalidError) Error() string { return e.msg }

// Invalidf is a bad request's error.
func Invalidf(format string, args ...any) error {
	return &InvalidError{fmt.Sprintf(format, args...)}
}

func validate(req Request) error {
	switch d := req.Domain(); {
	case d == "":
		return Invalidf("domain is empty")
	case len(d) > MaxDomainLen:
		return Invalidf("domain is %d bytes; at most %d", len(d), MaxDomainLen)
	}
	n := req.Len()
	if n > MaxDescriptors {
		return Invalidf("%d descriptors; at most %d", n, MaxDescriptors)
	}
	for i := range n {
		if err := validateDescriptor(req, i); err != nil {
			return Invalidf("descriptor %d: %v", i, err)
		}
	}
	return nil
}

func validateDescriptor(req Request, i int) error {
	switch n := req.Entries(i); {
	case n == 0:
		return fmt.Errorf("no entries")
	case n > MaxEntries:
		return fmt.Errorf("%d entries; at most %d", n, MaxEntries)
	}
	if c, set := req.DescriptorCost(i); set && c > MaxCost {
		return fmt.Errorf("hits_addend %d; at most %d", c, uint64(MaxCost))
	}
	for j := range req.Entries(i) {
		switch k, _ := req.Entry(i, j); {
		case k == "":
			return fmt.Errorf("entry %d: empty key", j)
		case len(k) > MaxKeyLen:
			return fmt.Errorf("entry %d: key is %d bytes; at most %d", j, len(k), MaxKeyLen)
		}
	}
	if o, ok := req.Override(i); ok {
		// The window rule of config files. requests_per_unit needs none: 0
		// blocks, as in a file, and up to 2^32−1 every algorithm counts
		// exactly (past an algorithm's own bounds, the sliding window
		// counts: see withOverride).
		if o.Unit == 0 {
			return fmt.Errorf("limit override: not a unit")
		}
		if err := config.CheckWindow(o.Unit, o.Multiplier); err != nil {
			return fmt.Errorf("limit override: %v", err)
		}
	}
	return nil
}

// EntryValue is the value a descriptor entry is counted by (its store key,
// a detailed metric's label, a trace in the simulator): the value itself
// when it is valid UTF-8 of at most MaxValueLen bytes; else a form led by a
// NUL byte, which no HTTP header value holds, that is valid UTF-8 and at
// most MaxValueLen bytes, so it can grow no key, label or log line:
//
//   - "\x00utf8:" and the value with each byte that is not UTF-8 written
//     \xHH and each backslash doubled, when that fits;
//   - else "\x00sha256:" and the hex SHA-256 of the value's bytes.
//
// Distinct values get distinct forms, and a form is its own form, so a
// client sending one directly is counted as the value it stands for: no
// more than it could do by sending that value.
//
// Matching uses the value itself, not this form (see plan), so that neither
// padding nor a stray byte moves a request to another limit.
func EntryValue(v string) string {
	if len(v) <= MaxValueLen && utf8.ValidString(v) {
		return v
	}
	if len(v) <= MaxValueLen {
		b := make([]byte, 0, len(utf8Prefix)+len(v)+16)
		b = append(b, utf8Prefix...)
		for i := 0; i < len(v); {
			r, size := utf8.DecodeRuneInString(v[i:])
			switch {
			case r == utf8.RuneError && size == 1:
				b = append(b, `\x`...)
				b = hex.AppendEncode(b, []byte{v[i]})
			case r == '\\':
				b = append(b, `\\`...)
			default:
				b = append(b, v[i:i+size]...)
			}
			i += size
		}
		if len(b) <= MaxValueLen {
			return string(b)
		}
	}
	sum := sha256.Sum256([]byte(v))
	return "\x00sha256:" + hex.EncodeToString(sum[:])
}

const utf8Prefix = "\x00utf8:"
