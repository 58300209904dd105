package loadgen

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// Template describes the descriptors of every request, with the key index
// substituted for each %d. Its text form is one or more descriptors separated
// by ';', each one or more key=value entries separated by ',':
//
//	remote_address=client-%d
//	generic_key=api;remote_address=%d,path=/login
//
// In keys and values, %d is the key index and %% a literal '%'; any other '%'
// is an error. A value may be empty and may contain '='; the key may not be
// empty. Spaces around entries and keys are ignored. ';' and ',' cannot
// appear inside keys or values.
//
// A Template is immutable and safe for concurrent use.
type Template struct {
	descriptors [][]templateEntry
}

type templateEntry struct {
	key, value pattern
}

// pattern is a string with the key index between consecutive parts:
// parts[0] + index + parts[1] + ... ; one part means no %d.
type pattern struct {
	parts []string
}

// ParseTemplate parses the text form described at [Template].
func ParseTemplate(text string) (*Template, error) {
	if strings.TrimSpace(text) == "" {
		return nil, errors.New("descriptor template is empty")
	}
	t := &Template{}
	for i, desc := range strings.Split(text, ";") {
		if strings.TrimSpace(desc) == "" {
			return nil, fmt.Errorf("descriptor template %q: descriptor %d is empty", text, i+1)
		}
		var entries []templateEntry
		for j, entry := range strings.Split(desc, ",") {
			entry = strings.TrimSpace(entry)
			where := fmt.Sprintf("descriptor template %q: descriptor %d entry %d", text, i+1, j+1)
			k, v, ok := strings.Cut(entry, "=")
			if !ok {
				return nil, fmt.Errorf("%s: %q is not key=value", where, entry)
			}
			k = strings.TrimSpace(k)
			if k == "" {
				return nil, fmt.Errorf("%s: %q has an empty key", where, entry)
			}
			kp, err := parsePattern(k)
			if err != nil {
				return nil, fmt.Errorf("%s: key: %w", where, err)
			}
			vp, err := parsePattern(v)
			if err != nil {
				return nil, fmt.Errorf("%s: value: %w", where, err)
			}
			entries = append(entries, templateEntry{key: kp, value: vp})
		}
		t.descriptors = append(t.descriptors, entries)
	}
	return t, nil
}

func parsePattern(s string) (pattern, error) {
	var parts []string
	var cur strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			cur.WriteByte(s[i])
			continue
		}
		if i+1 == len(s) {
			return pattern{}, fmt.Errorf("%q ends in a lone %%", s)
		}
		i++
		switch s[i] {
		case 'd':
			parts = append(parts, cur.String())
			cur.Reset()
		case '%':
			cur.WriteByte('%')
		default:
			return pattern{}, fmt.Errorf("%q: unknown verb %%%c (only %%d and %%%% are allowed)", s, s[i])
		}
	}
	return pattern{parts: append(parts, cur.String())}, nil
}

func (p pattern) render(buf []byte, index int) string {
	if len(p.parts) == 1 {
		return p.parts[0]
	}
	buf = buf[:0]
	for i, part := range p.parts {
		if i > 0 {
			buf = strconv.AppendInt(buf, int64(index), 10)
		}
		buf = append(buf, part...)
	}
	return string(buf)
}

// Request builds the request for one key index.
func (t *Template) Request(domain string, hitsAddend uint32, index int) *rlsv3.RateLimitRequest {
	var buf [64]byte
	descs := make([]*ratelimitv3.RateLimitDescriptor, len(t.descriptors))
	for i, entries := range t.descriptors {
		es := make([]*ratelimitv3.RateLimitDescriptor_Entry, len(entries))
		for j, e := range entries {
			es[j] = &ratelimitv3.RateLimitDescriptor_Entry{
				Key:   e.key.render(buf[:0], index),
				Value: e.value.render(buf[:0], index),
			}
		}
		descs[i] = &ratelimitv3.RateLimitDescriptor{Entries: es}
	}
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: descs, HitsAddend: hitsAddend}
}

// requestSet hands out the request for a key index: prebuilt for the first
// len(cached) indexes (shared, read-only: gRPC only marshals them), built on
// the fly beyond that.
type requestSet struct {
	cached   []*rlsv3.RateLimitRequest
	template *Template
	domain   string
	hits     uint32
}

func newRequestSet(t *Template, domain string, hits uint32, keys, cacheLimit int) *requestSet {
	rs := &requestSet{template: t, domain: domain, hits: hits}
	rs.cached = make([]*rlsv3.RateLimitRequest, min(keys, cacheLimit))
	for i := range rs.cached {
		rs.cached[i] = t.Request(domain, hits, i)
	}
	return rs
}

func (rs *requestSet) get(index int) *rlsv3.RateLimitRequest {
	if index < len(rs.cached) {
		return rs.cached[index]
	}
	return rs.template.Request(rs.domain, rs.hits, index)
}
