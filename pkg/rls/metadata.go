package rls

import (
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// dynamicMetadata is the response's dynamic_metadata as the reference's
// RESPONSE_DYNAMIC_METADATA setting writes it, for Envoy to hand on to
// other filters and access logs: the domain, each descriptor (its entries
// as "key=value", its limit override and hits_addend when set), the
// request's hits_addend when set, and the metadata of the limits of the
// descriptors that passed, merged (config: a descriptor's metadata), the
// first writer of a value winning and mappings merged key by key.
func dynamicMetadata(req *rlsv3.RateLimitRequest, a *limiter.Answer) *structpb.Struct {
	fields := map[string]*structpb.Value{"domain": structpb.NewStringValue(req.GetDomain())}
	descs := make([]*structpb.Value, 0, len(req.GetDescriptors()))
	for _, d := range req.GetDescriptors() {
		descs = append(descs, structpb.NewStructValue(descriptorStruct(d)))
	}
	fields["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: descs})
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	passed := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for _, st := range a.Statuses {
		if st.Code == limiter.OK && st.Limit != nil && st.Limit.Metadata != nil {
			// Validated when the config was parsed: JSON-like values only.
			if m, err := structpb.NewStruct(st.Limit.Metadata); err == nil {
				mergeStruct(passed, m)
			}
		}
	}
	if len(passed.Fields) > 0 {
		fields["metadata"] = structpb.NewStructValue(passed)
	}
	return &structpb.Struct{Fields: fields}
}

func descriptorStruct(d *ratelimitv3.RateLimitDescriptor) *structpb.Struct {
	entries := make([]*structpb.Value, 0, len(d.GetEntries()))
	for _, e := range d.GetEntries() {
		entries = append(entries, structpb.NewStringValue(e.GetKey()+"="+e.GetValue()))
	}
	fields := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
	if l := d.GetLimit(); l != nil {
		fields["limit"] = structpb.NewStringValue(l.String())
	}
	if h := d.GetHitsAddend(); h != nil {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
	}
	return &structpb.Struct{Fields: fields}
}

// mergeStruct adds src's fields to dst: a field dst lacks is added, two
// mappings are merged, anything else keeps dst's value.
func mergeStruct(dst, src *structpb.Struct) {
	for k, v := range src.Fields {
		cur, ok := dst.Fields[k]
		switch {
		case !ok:
			dst.Fields[k] = v
		case cur.GetStructValue() != nil && v.GetStructValue() != nil:
			mergeStruct(cur.GetStructValue(), v.GetStructValue())
		}
	}
}
