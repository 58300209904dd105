package xdsconfig

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/pkg/config"
)

// document is rc as the YAML tree of the file the reference would read:
// the same fields under the same names, so that xDS and files follow one
// set of rules (config.ParseDocuments). It builds the tree, not its text:
// text indents each line by its depth, so a deep push became hundreds of
// MB of it (issue 21), and parsing the text back costs more than the tree.
// check has bounded rc; the nodes built are those walk counted, field
// names shared (the config walk only reads them). The tree is built when
// config.ParseDocuments reads it, one resource's at a time.
func document(r resourceConfig) config.Document {
	tree := func() *yaml.Node {
		b := builder{names: map[string]*yaml.Node{}}
		return b.mapping(
			b.field("domain", b.str(r.rc.GetDomain())),
			b.descriptors(r.rc.GetDescriptors()),
		)
	}
	return config.Document{Name: r.file, Tree: tree, Data: r.data}
}

type builder struct {
	names map[string]*yaml.Node
}

func (b *builder) str(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
}

func (b *builder) boolean() *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "true"}
}

// field is a key and its value; nil when value is nil (not set).
func (b *builder) field(name string, value *yaml.Node) []*yaml.Node {
	if value == nil {
		return nil
	}
	k := b.names[name]
	if k == nil {
		k = b.str(name)
		b.names[name] = k
	}
	return []*yaml.Node{k, value}
}

func (b *builder) mapping(fields ...[]*yaml.Node) *yaml.Node {
	n := 0
	for _, f := range fields {
		n += len(f)
	}
	m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: make([]*yaml.Node, 0, n)}
	for _, f := range fields {
		m.Content = append(m.Content, f...)
	}
	return m
}

// descriptors is the descriptors field of a list, nil for an empty one.
func (b *builder) descriptors(ds []*rlsconf.RateLimitDescriptor) []*yaml.Node {
	if len(ds) == 0 {
		return nil
	}
	seq := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Content: make([]*yaml.Node, 0, len(ds))}
	for _, d := range ds {
		var value, shadow, detailed, quota, metadata *yaml.Node
		if d.GetValue() != "" {
			value = b.str(d.GetValue())
		}
		if d.GetShadowMode() {
			shadow = b.boolean()
		}
		if d.GetDetailedMetric() {
			detailed = b.boolean()
		}
		if d.GetQuotaMode() {
			quota = b.boolean()
		}
		if m := d.GetMetadata(); m != nil {
			metadata = b.structure(m)
		}
		var limit *yaml.Node
		if p := d.GetRateLimit(); p != nil {
			limit = b.policy(p)
		}
		seq.Content = append(seq.Content, b.mapping(
			b.field("key", b.str(d.GetKey())),
			b.field("value", value),
			b.field("shadow_mode", shadow),
			b.field("detailed_metric", detailed),
			b.field("quota_mode", quota),
			b.field("rate_limit", limit),
			b.field("metadata", metadata),
			b.descriptors(d.GetDescriptors()),
		))
	}
	return b.field("descriptors", seq)
}

func (b *builder) policy(p *rlsconf.RateLimitPolicy) *yaml.Node {
	var unlimited, unit, rpu, name, replaces *yaml.Node
	if p.GetUnlimited() {
		unlimited = b.boolean()
	} else {
		unit = b.str(strings.ToLower(p.GetUnit().String()))
		rpu = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatUint(uint64(p.GetRequestsPerUnit()), 10)}
	}
	if p.GetName() != "" {
		name = b.str(p.GetName())
	}
	if rs := p.GetReplaces(); len(rs) > 0 {
		replaces = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Content: make([]*yaml.Node, 0, len(rs))}
		for _, r := range rs {
			replaces.Content = append(replaces.Content, b.mapping(b.field("name", b.str(r.GetName()))))
		}
	}
	return b.mapping(
		b.field("unlimited", unlimited),
		b.field("unit", unit),
		b.field("requests_per_unit", rpu),
		b.field("name", name),
		b.field("replaces", replaces),
	)
}

// structure is a descriptor's metadata as the YAML mapping a file would
// hold, its keys in order so that one push always converts alike.
func (b *builder) structure(m *structpb.Struct) *yaml.Node {
	keys := slices.Sorted(maps.Keys(m.GetFields()))
	n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: make([]*yaml.Node, 0, 2*len(keys))}
	for _, k := range keys {
		n.Content = append(n.Content, b.str(k), b.value(m.GetFields()[k]))
	}
	return n
}

func (b *builder) value(v *structpb.Value) *yaml.Node {
	switch x := v.GetKind().(type) {
	case *structpb.Value_StructValue:
		return b.structure(x.StructValue)
	case *structpb.Value_ListValue:
		seq := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Content: make([]*yaml.Node, 0, len(x.ListValue.GetValues()))}
		for _, e := range x.ListValue.GetValues() {
			seq.Content = append(seq.Content, b.value(e))
		}
		return seq
	case *structpb.Value_StringValue:
		return b.str(x.StringValue)
	case *structpb.Value_BoolValue:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(x.BoolValue)}
	case *structpb.Value_NumberValue:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: strconv.FormatFloat(x.NumberValue, 'g', -1, 64)}
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
}
