package rls

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

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
	// MaxValueLen is the longest descriptor value matched and counted as
	// it is. A longer one is not refused (a client padding a header would
	// then step around its limit wherever the caller fails open): it is
	// matched and counted by its digest (see EntryValue).
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

// EntryValue is the value a descriptor entry is matched and counted by
// (the simulator reads traces through it too):
// itself, or for one longer than MaxValueLen a fixed-length digest of it,
// led by a NUL byte that no HTTP header value holds, so it can neither be
// mistaken for a short value nor grow a key, a metric label or a log line.
func EntryValue(v string) string {
	if len(v) <= MaxValueLen {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	return "\x00sha256:" + hex.EncodeToString(sum[:])
}
