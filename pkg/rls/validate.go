package rls

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"unicode/utf8"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/pkg/config"
)

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

// invalid is a bad request, reported as InvalidArgument.
type invalid struct{ msg string }

func (e *invalid) Error() string { return e.msg }

func invalidf(format string, args ...any) error { return &invalid{fmt.Sprintf(format, args...)} }

func validate(req *rlsv3.RateLimitRequest) error {
	switch d := req.GetDomain(); {
	case d == "":
		return invalidf("domain is empty")
	case len(d) > MaxDomainLen:
		return invalidf("domain is %d bytes; at most %d", len(d), MaxDomainLen)
	}
	ds := req.GetDescriptors()
	if len(ds) > MaxDescriptors {
		return invalidf("%d descriptors; at most %d", len(ds), MaxDescriptors)
	}
	for i, d := range ds {
		if err := validateDescriptor(d); err != nil {
			return invalidf("descriptor %d: %v", i, err)
		}
	}
	return nil
}

func validateDescriptor(d *ratelimitv3.RateLimitDescriptor) error {
	es := d.GetEntries()
	switch {
	case len(es) == 0:
		return fmt.Errorf("no entries")
	case len(es) > MaxEntries:
		return fmt.Errorf("%d entries; at most %d", len(es), MaxEntries)
	case d.GetIsNegativeHits():
		return fmt.Errorf("is_negative_hits is not supported")
	case d.GetHitsAddend() != nil && d.GetHitsAddend().GetValue() > MaxCost:
		return fmt.Errorf("hits_addend %d; at most %d", d.GetHitsAddend().GetValue(), uint64(MaxCost))
	}
	for j, e := range es {
		switch {
		case e.GetKey() == "":
			return fmt.Errorf("entry %d: empty key", j)
		case len(e.GetKey()) > MaxKeyLen:
			return fmt.Errorf("entry %d: key is %d bytes; at most %d", j, len(e.GetKey()), MaxKeyLen)
		}
	}
	if o := d.GetLimit(); o != nil {
		// The window rule of config files. requests_per_unit needs none: 0
		// blocks, as in a file, and up to 2^32−1 every algorithm counts
		// exactly (a sliding log past its cap is decided by the sliding
		// window: see withOverride).
		unit, ok := overrideUnit(o.GetUnit())
		if !ok {
			return fmt.Errorf("limit override: unit %v is not a unit", o.GetUnit())
		}
		if err := config.CheckWindow(unit, overrideMultiplier(o)); err != nil {
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
