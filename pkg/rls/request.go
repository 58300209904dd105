package rls

import (
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// view is Envoy's request as the core reads it (limiter.Request), in
// place. A struct of one pointer is stored in an interface as the pointer
// itself, so passing a view to the core allocates nothing.
type view struct{ r *rlsv3.RateLimitRequest }

// Request is Envoy's request as the core reads it, in place.
func Request(req *rlsv3.RateLimitRequest) limiter.Request { return view{req} }

func (v view) desc(i int) *ratelimitv3.RateLimitDescriptor { return v.r.GetDescriptors()[i] }

func (v view) Domain() string    { return v.r.GetDomain() }
func (v view) Cost() uint32      { return v.r.GetHitsAddend() }
func (v view) Len() int          { return len(v.r.GetDescriptors()) }
func (v view) Entries(i int) int { return len(v.desc(i).GetEntries()) }

func (v view) Entry(i, j int) (key, value string) {
	e := v.desc(i).GetEntries()[j]
	return e.GetKey(), e.GetValue()
}

// Refund is Envoy's is_negative_hits on descriptor i.
func (v view) Refund(i int) bool { return v.desc(i).GetIsNegativeHits() }

func (v view) DescriptorCost(i int) (uint64, bool) {
	h := v.desc(i).GetHitsAddend()
	return h.GetValue(), h != nil
}

func (v view) Override(i int) (limiter.Override, bool) {
	o := v.desc(i).GetLimit()
	if o == nil {
		return limiter.Override{}, false
	}
	unit, _ := overrideUnit(o.GetUnit()) // 0 when not a unit: the core refuses it
	mult := uint32(1)
	if m := o.GetUnitMultiplier(); m != nil {
		mult = m.GetValue()
	}
	return limiter.Override{RequestsPerUnit: o.GetRequestsPerUnit(), Unit: unit, Multiplier: mult}, true
}

// Descriptor is descriptor i of a request the core decides, as Envoy's
// message: the original when the request came from this package's view,
// else one built from the core's view (a sidecar forwards descriptors
// upstream).
func Descriptor(req limiter.Request, i int) *ratelimitv3.RateLimitDescriptor {
	if v, ok := req.(view); ok {
		return v.desc(i)
	}
	d := &ratelimitv3.RateLimitDescriptor{Entries: make([]*ratelimitv3.RateLimitDescriptor_Entry, req.Entries(i))}
	for j := range d.Entries {
		k, val := req.Entry(i, j)
		d.Entries[j] = &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: val}
	}
	if o, ok := req.Override(i); ok {
		d.Limit = OverrideProto(o)
	}
	if c, ok := req.DescriptorCost(i); ok {
		d.HitsAddend = wrapperspb.UInt64(c)
	}
	return d
}

// OverrideProto is a core override as Envoy's message says it.
func OverrideProto(o limiter.Override) *ratelimitv3.RateLimitDescriptor_RateLimitOverride {
	p := &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: o.RequestsPerUnit}
	for u := range typev3.RateLimitUnit_name {
		if cu, ok := overrideUnit(typev3.RateLimitUnit(u)); ok && cu == o.Unit {
			p.Unit = typev3.RateLimitUnit(u)
		}
	}
	if o.Multiplier != 1 {
		p.UnitMultiplier = wrapperspb.UInt32(o.Multiplier)
	}
	return p
}

// overrideUnit maps the unit of an Envoy limit override to ours
// (envoy.type.v3.RateLimitUnit has no week).
func overrideUnit(u typev3.RateLimitUnit) (config.Unit, bool) {
	switch u {
	case typev3.RateLimitUnit_SECOND:
		return config.UnitSecond, true
	case typev3.RateLimitUnit_MINUTE:
		return config.UnitMinute, true
	case typev3.RateLimitUnit_HOUR:
		return config.UnitHour, true
	case typev3.RateLimitUnit_DAY:
		return config.UnitDay, true
	case typev3.RateLimitUnit_MONTH:
		return config.UnitMonth, true
	case typev3.RateLimitUnit_YEAR:
		return config.UnitYear, true
	}
	return 0, false
}
