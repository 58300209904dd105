package config

import (
	"strconv"
	"unicode/utf8"
)

// Bounds on a config, wherever it comes from: a file, a directory of them,
// or an xDS push (whose RateLimitConfig resources are held to the same
// bounds as files, checked on the protobuf before it is converted). Each is
// applied where the input enters, before it is expanded: a hostile config
// costs at most what these allow, and the last good config keeps serving.
const (
	// MaxNodes bounds the YAML nodes visited in a config, all its files
	// together, aliases and merge keys expanded ("billion laughs"), and
	// so the nodes an xDS response may become. A limit costs about 9
	// nodes and keeps about 400 bytes of heap: the bound keeps a config
	// under about 50 MiB however its files alias one another.
	MaxNodes = 1 << 20
	// MaxDepth bounds the nesting of descriptors, of merge keys and of
	// metadata.
	MaxDepth = 64
	// MaxScalarBytes bounds every string of a config: keys, values,
	// names, domains, metadata. A request's values are counted as they
	// are up to 1 KiB (limiter.MaxValueLen); 4 KiB leaves room for
	// patterns and metadata.
	MaxScalarBytes = 4 << 10
	// MaxNameBytes bounds a file's or an xDS resource's name: a
	// filesystem's NAME_MAX. Errors and limits carry it.
	MaxNameBytes = 255
	// MaxZoneBytes bounds a calendar's zone name; the longest IANA names
	// are about 30 bytes.
	MaxZoneBytes = 64
	// MaxFiles bounds the config files read from a directory, and the
	// RateLimitConfig resources of an xDS response: one domain each.
	MaxFiles = 1024
	// MaxQuotedBytes bounds what an error or a log line quotes of a
	// config string (see Quote and Clip).
	MaxQuotedBytes = 128
	// maxErrors bounds the errors one Parse reports; the rest are counted.
	maxErrors = 10
)

// The default size bounds (SizeBounds). yaml.v3 holds a file's whole node
// tree, up to about 150 bytes of heap per byte of a file of short flow
// items ([a,a,...]): 1 MiB costs at most ~150 MiB at its peak, where 2 MiB
// cost 360 MiB. A file of descriptors costs about 45 bytes per byte.
const (
	DefaultMaxFileBytes  = 1 << 20
	DefaultMaxTotalBytes = 8 << 20
)

// SizeBounds bound the bytes of config read at once, before any of it is
// parsed. A file (or an xDS resource) larger than MaxFileBytes is refused,
// and so is a directory (or an xDS response) whose files add up to more
// than MaxTotalBytes. The zero value means the defaults.
//
// A plain value, safe to copy and to read from many goroutines.
type SizeBounds struct {
	MaxFileBytes  int64 // 0 means DefaultMaxFileBytes
	MaxTotalBytes int64 // 0 means DefaultMaxTotalBytes
}

// WithDefaults returns b with its zero fields set to the defaults.
func (b SizeBounds) WithDefaults() SizeBounds {
	if b.MaxFileBytes <= 0 {
		b.MaxFileBytes = DefaultMaxFileBytes
	}
	if b.MaxTotalBytes <= 0 {
		b.MaxTotalBytes = DefaultMaxTotalBytes
	}
	return b
}

// Quote is s as %q quotes it, for an error, a log line or a page: cut to
// its first MaxQuotedBytes (at a rune boundary) with its length said, so
// that a config string never floods them.
func Quote(s string) string {
	head, tail := cut(s)
	return strconv.Quote(head) + tail
}

// Clip is Quote without the quotes, for text that needs none (a number)
// or that its writer escapes (a structured log's values).
func Clip(s string) string {
	head, tail := cut(s)
	return head + tail
}

// cut splits s into what Quote shows of it and what says how long it was.
func cut(s string) (head, tail string) {
	if len(s) <= MaxQuotedBytes {
		return s, ""
	}
	n := MaxQuotedBytes
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n], "… (" + strconv.Itoa(len(s)) + " bytes)"
}
