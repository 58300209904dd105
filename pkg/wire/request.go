package wire

import (
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
)

// The request Envoy sends: its fields, and the descriptor's and the
// entry's, by number (envoy/service/ratelimit/v3/rls.proto and
// envoy/extensions/common/ratelimit/v3/ratelimit.proto).
const (
	requestDomain      protowire.Number = 1
	requestDescriptors protowire.Number = 2
	requestHitsAddend  protowire.Number = 3
	descriptorEntries  protowire.Number = 1
	entryKey           protowire.Number = 1
	entryValue         protowire.Number = 2
)

// decodeRequest decodes b into r as proto.Unmarshal does, strings taken as the bytes they hold (Codec's
// tolerance), and reports true; or reports false, r untouched, for
// anything else than what Envoy's filter sends: a domain, descriptors of
// entries alone, a request-wide hits_addend, each field of one at most
// once. Anything else (an override, a descriptor's own hits_addend,
// is_negative_hits, an unknown field, a malformed one) is left to the
// standard decoder.
//
// b is walked twice: once to check its shape and count what it holds,
// once to fill r from as few allocations as the counts allow.
func decodeRequest(b []byte, r *rlsv3.RateLimitRequest) bool {
	n, m, ok := countRequest(b)
	if !ok {
		return false
	}
	r.Reset()
	descs, dps, entries, eps := requestSpace(n, m)
	di := 0
	for len(b) > 0 {
		num, _, k := protowire.ConsumeTag(b)
		b = b[k:]
		if num == requestHitsAddend {
			v, k := protowire.ConsumeVarint(b)
			b = b[k:]
			r.HitsAddend = uint32(v) // as protobuf decodes a uint32
			continue
		}
		v, k := protowire.ConsumeBytes(b)
		b = b[k:]
		if num == requestDomain {
			r.Domain = string(v)
			continue
		}
		d := &descs[di]
		dps[di] = d
		di++
		e := 0
		for ; len(v) > 0; e++ {
			_, _, k := protowire.ConsumeTag(v)
			ev, kk := protowire.ConsumeBytes(v[k:])
			v = v[k+kk:]
			entry := &entries[e]
			eps[e] = entry
			for len(ev) > 0 {
				num, _, k := protowire.ConsumeTag(ev)
				s, kk := protowire.ConsumeBytes(ev[k:])
				ev = ev[k+kk:]
				if num == entryKey {
					entry.Key = string(s)
				} else {
					entry.Value = string(s)
				}
			}
		}
		if e > 0 {
			d.Entries = eps[:e:e]
		}
		entries, eps = entries[e:], eps[e:]
	}
	if len(dps) > 0 {
		r.Descriptors = dps
	}
	return true
}

// smallRequest holds the descriptors and entries of the request Envoy
// sends most, one descriptor of one or two entries, in one allocation.
type smallRequest struct {
	desc    [1]ratelimitv3.RateLimitDescriptor
	descs   [1]*ratelimitv3.RateLimitDescriptor
	entry   [2]ratelimitv3.RateLimitDescriptor_Entry
	entries [2]*ratelimitv3.RateLimitDescriptor_Entry
}

// requestSpace is room for n descriptors of m entries in all.
func requestSpace(n, m int) ([]ratelimitv3.RateLimitDescriptor, []*ratelimitv3.RateLimitDescriptor, []ratelimitv3.RateLimitDescriptor_Entry, []*ratelimitv3.RateLimitDescriptor_Entry) {
	if n <= 1 && m <= 2 {
		s := new(smallRequest)
		return s.desc[:n], s.descs[:n], s.entry[:m], s.entries[:m]
	}
	return make([]ratelimitv3.RateLimitDescriptor, n), make([]*ratelimitv3.RateLimitDescriptor, n),
		make([]ratelimitv3.RateLimitDescriptor_Entry, m), make([]*ratelimitv3.RateLimitDescriptor_Entry, m)
}

// countRequest checks that b is a request decodeRequest decodes and
// counts its descriptors and their entries.
func countRequest(b []byte) (descriptors, entries int, ok bool) {
	var seen uint8 // bit num: field num met
	for len(b) > 0 {
		num, typ, k := protowire.ConsumeTag(b)
		if k < 0 {
			return 0, 0, false
		}
		b = b[k:]
		switch {
		case num == requestHitsAddend && typ == protowire.VarintType && seen&(1<<num) == 0:
			seen |= 1 << num
			if k = protowire.ConsumeFieldValue(num, typ, b); k < 0 {
				return 0, 0, false
			}
		case num == requestDomain && typ == protowire.BytesType && seen&(1<<num) == 0:
			seen |= 1 << num
			if k = protowire.ConsumeFieldValue(num, typ, b); k < 0 {
				return 0, 0, false
			}
		case num == requestDescriptors && typ == protowire.BytesType:
			var v []byte
			if v, k = protowire.ConsumeBytes(b); k < 0 {
				return 0, 0, false
			}
			n, ok := countEntries(v)
			if !ok {
				return 0, 0, false
			}
			descriptors, entries = descriptors+1, entries+n
		default:
			return 0, 0, false
		}
		b = b[k:]
	}
	return descriptors, entries, true
}

// countEntries checks that b is a descriptor of entries alone, each of a
// key and a value at most once, and counts them.
func countEntries(b []byte) (int, bool) {
	n := 0
	for len(b) > 0 {
		num, typ, k := protowire.ConsumeTag(b)
		if k < 0 || num != descriptorEntries || typ != protowire.BytesType {
			return 0, false
		}
		v, kk := protowire.ConsumeBytes(b[k:])
		if kk < 0 {
			return 0, false
		}
		b = b[k+kk:]
		var seen uint8
		for len(v) > 0 {
			num, typ, k := protowire.ConsumeTag(v)
			if k < 0 || (num != entryKey && num != entryValue) || typ != protowire.BytesType || seen&(1<<num) != 0 {
				return 0, false
			}
			seen |= 1 << num
			l := protowire.ConsumeFieldValue(num, typ, v[k:])
			if l < 0 {
				return 0, false
			}
			v = v[k+l:]
		}
		n++
	}
	return n, true
}
