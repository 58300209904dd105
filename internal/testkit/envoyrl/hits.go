package envoyrl

import (
	"fmt"
	"strconv"
	"strings"
)

// maxFormatHits is the most a hits_addend format may give; Envoy drops a
// descriptor whose format gives more, or no number.
const maxFormatHits = 1_000_000_000

// formatHits is the number a hits_addend format (one substitution, as
// Envoy's validation requires) gives for req: %DYNAMIC_METADATA(ns:key)%
// from req.Metadata, %REQ(header)% from its headers; ok false when it
// gives no number in [0, 1e9], and Envoy then drops the descriptor.
func formatHits(format string, req Request) (uint64, bool, error) {
	var v string
	var found bool
	switch {
	case strings.HasPrefix(format, "%DYNAMIC_METADATA(") && strings.HasSuffix(format, ")%"):
		v, found = req.Metadata[strings.TrimSuffix(strings.TrimPrefix(format, "%DYNAMIC_METADATA("), ")%")]
	case strings.HasPrefix(format, "%REQ(") && strings.HasSuffix(format, ")%"):
		v, found = req.header(strings.TrimSuffix(strings.TrimPrefix(format, "%REQ("), ")%"))
	default:
		return 0, false, fmt.Errorf("hits_addend format %q is not modelled", format)
	}
	if !found {
		return 0, false, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n > maxFormatHits {
		return 0, false, nil
	}
	return n, true, nil
}
