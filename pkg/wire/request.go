package wire

import (
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The request Envoy sends: its fields, the descriptor's, the entry's and
// the hits_addend wrapper's, by number (envoy/service/ratelimit/v3/
// rls.proto, envoy/extensions/common/ratelimit/v3/ratelimit.proto and
// google/protobuf/wrappers.proto).
const (
	requestDomain            protowire.Number = 1
	requestDescriptors       protowire.Number = 2
	requestHitsAddend        protowire.Number = 3
	descriptorEntries        protowire.Number = 1
	descriptorHitsAddend     protowire.Number = 3
	descriptorIsNegativeHits protowire.Number = 4
	entryKey                 protowire.Number = 1
	entryValue               protowire.Number = 2
	wrapperValue             protowire.Number = 1
)

// decodeRequest decodes b into r as proto.Unmarshal does, strings taken
// as the bytes they hold (Codec's tolerance), and reports true; or reports
// false, r untouched, for anything else than what Envoy's filter and
// sluice's sidecars send: a domain, a hits_addend, and descriptors of
// entries, each with its own hits_addend and is_negative_hits, every field
// that is not a list at most once. Anything else (an override, an unknown
// field, a malformed one) is left to the standard decoder.
//
// b is walked twice: once to check its shape and count what it holds
// (shapeOf), once to fill r from as few allocations as the counts allow.
func decodeRequest(b []byte, r *rlsv3.RateLimitRequest) bool {
	sh, ok := shapeOf(b)
	if !ok {
		return false
	}
	r.Reset()
	sp := newSpace(sh)
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
		sp.descriptor(v)
	}
	if sh.descriptors > 0 {
		r.Descriptors = sp.dps
	}
	return true
}

// shape is what a request holds: its descriptors, their entries, and the
// descriptors with a hits_addend of their own.
type shape struct{ descriptors, entries, addends int }

// space is the room a request's descriptors are decoded into: descs and
// dps hold them all (next of them filled); entries, eps and addends are
// what is left for the descriptors still to fill.
type space struct {
	dps     []*ratelimitv3.RateLimitDescriptor
	descs   []ratelimitv3.RateLimitDescriptor
	entries []ratelimitv3.RateLimitDescriptor_Entry
	eps     []*ratelimitv3.RateLimitDescriptor_Entry
	addends []wrapperspb.UInt64Value
	next    int // descriptors filled
}

// smallRequest holds the descriptors and entries of the request Envoy
// sends most, one descriptor of one or two entries, in one allocation.
type smallRequest struct {
	desc    [1]ratelimitv3.RateLimitDescriptor
	descs   [1]*ratelimitv3.RateLimitDescriptor
	entry   [2]ratelimitv3.RateLimitDescriptor_Entry
	entries [2]*ratelimitv3.RateLimitDescriptor_Entry
}

func newSpace(sh shape) space {
	var sp space
	if sh.descriptors <= 1 && sh.entries <= 2 {
		s := new(smallRequest)
		sp.descs, sp.dps, sp.entries, sp.eps = s.desc[:sh.descriptors], s.descs[:sh.descriptors], s.entry[:sh.entries], s.entries[:sh.entries]
	} else {
		sp.descs, sp.dps = make([]ratelimitv3.RateLimitDescriptor, sh.descriptors), make([]*ratelimitv3.RateLimitDescriptor, sh.descriptors)
		sp.entries, sp.eps = make([]ratelimitv3.RateLimitDescriptor_Entry, sh.entries), make([]*ratelimitv3.RateLimitDescriptor_Entry, sh.entries)
	}
	if sh.addends > 0 {
		sp.addends = make([]wrapperspb.UInt64Value, sh.addends)
	}
	return sp
}

// descriptor fills the next descriptor from b, a descriptor shapeOf took.
func (sp *space) descriptor(b []byte) {
	d := &sp.descs[sp.next]
	sp.dps[sp.next] = d
	sp.next++
	e := 0
	for len(b) > 0 {
		num, _, k := protowire.ConsumeTag(b)
		b = b[k:]
		if num == descriptorIsNegativeHits {
			v, k := protowire.ConsumeVarint(b)
			b = b[k:]
			d.IsNegativeHits = v != 0 // as protobuf decodes a bool
			continue
		}
		v, k := protowire.ConsumeBytes(b)
		b = b[k:]
		if num == descriptorHitsAddend {
			w := &sp.addends[0]
			sp.addends = sp.addends[1:]
			if len(v) > 0 {
				_, _, k := protowire.ConsumeTag(v)
				w.Value, _ = protowire.ConsumeVarint(v[k:])
			}
			d.HitsAddend = w
			continue
		}
		entry := &sp.entries[e]
		sp.eps[e] = entry
		e++
		for len(v) > 0 {
			num, _, k := protowire.ConsumeTag(v)
			s, kk := protowire.ConsumeBytes(v[k:])
			v = v[k+kk:]
			if num == entryKey {
				entry.Key = string(s)
			} else {
				entry.Value = string(s)
			}
		}
	}
	if e > 0 {
		d.Entries = sp.eps[:e:e]
	}
	sp.entries, sp.eps = sp.entries[e:], sp.eps[e:]
}

// shapeOf checks that b is a request decodeRequest decodes and counts
// what it holds. (Loops written out: a walk that calls a function for
// each field took a fifth longer to decode Envoy's usual request.)
func shapeOf(b []byte) (shape, bool) {
	var sh shape
	var seen uint8 // bit num: field num met
	for len(b) > 0 {
		num, typ, k := protowire.ConsumeTag(b)
		if k < 0 {
			return sh, false
		}
		b = b[k:]
		switch {
		case (num == requestDomain && typ == protowire.BytesType || num == requestHitsAddend && typ == protowire.VarintType) && seen&(1<<num) == 0:
			seen |= 1 << num
			if k = protowire.ConsumeFieldValue(num, typ, b); k < 0 {
				return sh, false
			}
		case num == requestDescriptors && typ == protowire.BytesType:
			var v []byte
			if v, k = protowire.ConsumeBytes(b); k < 0 || !descriptorShape(v, &sh) {
				return sh, false
			}
			sh.descriptors++
		default:
			return sh, false
		}
		b = b[k:]
	}
	return sh, true
}

// descriptorShape checks descriptor b and adds what it holds to sh.
func descriptorShape(b []byte, sh *shape) bool {
	var seen uint8
	for len(b) > 0 {
		num, typ, k := protowire.ConsumeTag(b)
		if k < 0 {
			return false
		}
		b = b[k:]
		switch {
		case num == descriptorEntries && typ == protowire.BytesType:
			k = message(b, entryKey, entryValue, protowire.BytesType)
			sh.entries++
		case num == descriptorHitsAddend && typ == protowire.BytesType && seen&(1<<num) == 0:
			seen |= 1 << num
			k = message(b, wrapperValue, wrapperValue, protowire.VarintType)
			sh.addends++
		case num == descriptorIsNegativeHits && typ == protowire.VarintType && seen&(1<<num) == 0:
			seen |= 1 << num
			_, k = protowire.ConsumeVarint(b)
		default:
			return false
		}
		if k < 0 {
			return false
		}
		b = b[k:]
	}
	return true
}

// message is the length of the message field at the start of b when it
// holds fields a and c alone, of wire type typ (onlyFields); -1 otherwise.
func message(b []byte, a, c protowire.Number, typ protowire.Type) int {
	v, k := protowire.ConsumeBytes(b)
	if k < 0 || !onlyFields(v, a, c, typ) {
		return -1
	}
	return k
}

// onlyFields reports whether message b holds fields a and b alone, of
// wire type typ, each at most once.
func onlyFields(m []byte, a, b protowire.Number, typ protowire.Type) bool {
	var seen uint8
	for len(m) > 0 {
		num, t, k := protowire.ConsumeTag(m)
		if k < 0 || (num != a && num != b) || t != typ || seen&(1<<num) != 0 {
			return false
		}
		seen |= 1 << num
		n := protowire.ConsumeFieldValue(num, t, m[k:])
		if n < 0 {
			return false
		}
		m = m[k+n:]
	}
	return true
}
