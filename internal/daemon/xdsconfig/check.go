package xdsconfig

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicehq/sluice/pkg/config"
)

// recursionLimit stops the protobuf decoder a little below the deepest
// config allowed (a RateLimitConfig, MaxDepth descriptors, a rate_limit
// and a replaces entry), so a push nested thousands deep costs no more
// than one MaxDepth deep; walk then says which bound it broke.
const recursionLimit = config.MaxDepth + 4

// resourceConfig is one checked resource: its config and the name its
// errors and limits carry, as the file the reference would read.
type resourceConfig struct {
	file string
	rc   *rlsconf.RateLimitConfig
	data []byte
}

// check decodes a response's resources and holds them to the bounds of
// config files, on the protobuf, before any is converted: at most
// config.MaxFiles resources of at most sizes.MaxFileBytes each and
// sizes.MaxTotalBytes together (gRPC refuses a response over 4 MiB before
// that), descriptors nested at most config.MaxDepth deep, at most
// config.MaxNodes YAML nodes in all once converted, and every string at
// most config.MaxScalarBytes, names config.MaxNameBytes.
func check(resources []*anypb.Any, sizes config.SizeBounds) ([]resourceConfig, error) {
	sizes = sizes.WithDefaults()
	switch {
	case len(resources) == 0:
		return nil, errors.New("no RateLimitConfig resources")
	case len(resources) > config.MaxFiles:
		return nil, fmt.Errorf("%d resources: the most is %d", len(resources), config.MaxFiles)
	}
	var total int64
	for i, a := range resources {
		n := int64(len(a.GetValue()))
		if n > sizes.MaxFileBytes {
			return nil, fmt.Errorf("%s: %d bytes, more than the bound of %d", resourceName(i, a), n, sizes.MaxFileBytes)
		}
		total += n
	}
	if total > sizes.MaxTotalBytes {
		return nil, fmt.Errorf("the resources add up to %d bytes, more than the bound of %d", total, sizes.MaxTotalBytes)
	}
	out := make([]resourceConfig, 0, len(resources))
	seen := make(map[string]bool, len(resources))
	var w walk // MaxNodes bounds the resources together, as a config's files
	for i, a := range resources {
		if a.GetTypeUrl() != resource.RateLimitConfigType {
			return nil, fmt.Errorf("%s: type %s, not %s", resourceName(i, a), config.Quote(a.GetTypeUrl()), resource.RateLimitConfigType)
		}
		rc := new(rlsconf.RateLimitConfig)
		if err := (proto.UnmarshalOptions{RecursionLimit: recursionLimit}).Unmarshal(a.GetValue(), rc); err != nil {
			return nil, fmt.Errorf("%s: %w (descriptors nest at most %d deep)", resourceName(i, a), err, config.MaxDepth)
		}
		name := rc.GetName()
		if name == "" {
			name = rc.GetDomain()
		}
		if len(name) > config.MaxNameBytes {
			return nil, fmt.Errorf("%s: a name of %d bytes, more than the bound of %d", resourceName(i, a), len(name), config.MaxNameBytes)
		}
		file := "xds:" + fileName(name) + ".yaml"
		if seen[file] {
			return nil, fmt.Errorf("two RateLimitConfigs named %s", config.Quote(name))
		}
		seen[file] = true
		if err := w.config(rc); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		data := a.GetValue()
		if hasMetadata(rc.GetDescriptors()) {
			// A Struct's map is serialized in any order: the version is
			// the content's, not the order the sender chose this time.
			var err error
			if data, err = (proto.MarshalOptions{Deterministic: true}).Marshal(rc); err != nil {
				return nil, fmt.Errorf("%s: %w", file, err)
			}
		}
		out = append(out, resourceConfig{file: file, rc: rc, data: data})
	}
	return out, nil
}

// hasMetadata reports whether any descriptor of ds, or nested in them,
// carries metadata.
func hasMetadata(ds []*rlsconf.RateLimitDescriptor) bool {
	for _, d := range ds {
		if d.GetMetadata() != nil || hasMetadata(d.GetDescriptors()) {
			return true
		}
	}
	return false
}

// fileName is a resource's name as the name of the file it stands for, in
// errors, logs and pages: '/' and what does not print (controls, format
// characters that turn text around) become '_'.
func fileName(name string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || !unicode.IsPrint(r) {
			return '_'
		}
		return r
	}, name)
}

// resourceName names resource i for an error before it is decoded: its
// name or domain read off the wire (top-level fields 1 and 2, no nested
// message decoded), quoted within bounds.
func resourceName(i int, a *anypb.Any) string {
	b := a.GetValue()
	var domain []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			break
		}
		b = b[n:]
		if typ == protowire.BytesType && (num == 1 || num == 2) {
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				break
			}
			if num == 1 && len(v) > 0 {
				return "resource " + strconv.Itoa(i) + " (" + config.Quote(string(v)) + ")"
			}
			domain = v
			b = b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			break
		}
		b = b[m:]
	}
	if len(domain) > 0 {
		return "resource " + strconv.Itoa(i) + " (" + config.Quote(string(domain)) + ")"
	}
	return "resource " + strconv.Itoa(i)
}

// walk checks a decoded resource against the bounds before it is
// converted. It counts nodes as the config walk will charge them (see
// document): one per mapping and list, two per field (its name and its
// value).
type walk struct{ nodes int }

func (w *walk) charge(n int) error {
	if w.nodes += n; w.nodes > config.MaxNodes {
		return fmt.Errorf("more than %d YAML nodes in all the resources once converted", config.MaxNodes)
	}
	return nil
}

func (w *walk) str(what, s string) error {
	if len(s) > config.MaxScalarBytes {
		return fmt.Errorf("%s of %d bytes, %s: the most is %d", what, len(s), config.Quote(s), config.MaxScalarBytes)
	}
	return w.charge(2)
}

func (w *walk) config(rc *rlsconf.RateLimitConfig) error {
	if err := w.charge(1); err != nil {
		return err
	}
	if err := w.str("domain", rc.GetDomain()); err != nil {
		return err
	}
	return w.descriptors(rc.GetDescriptors(), 1)
}

// descriptors checks the list at depth (1 at the top), as
// config.ParseDocuments will: MaxDepth levels at most.
func (w *walk) descriptors(ds []*rlsconf.RateLimitDescriptor, depth int) error {
	if len(ds) == 0 {
		return nil
	}
	if depth > config.MaxDepth {
		return fmt.Errorf("descriptors nested more than %d deep", config.MaxDepth)
	}
	if err := w.charge(2); err != nil { // the field's name and the list
		return err
	}
	for _, d := range ds {
		if err := w.descriptor(d, depth); err != nil {
			return err
		}
	}
	return nil
}

func (w *walk) descriptor(d *rlsconf.RateLimitDescriptor, depth int) error {
	if err := w.charge(1); err != nil {
		return err
	}
	if err := w.str("key", d.GetKey()); err != nil {
		return err
	}
	if d.GetValue() != "" {
		if err := w.str("value", d.GetValue()); err != nil {
			return err
		}
	}
	flags := 0
	for _, set := range []bool{d.GetShadowMode(), d.GetDetailedMetric(), d.GetQuotaMode()} {
		if set {
			flags += 2
		}
	}
	if err := w.charge(flags); err != nil {
		return err
	}
	if p := d.GetRateLimit(); p != nil {
		if err := w.policy(p); err != nil {
			return err
		}
	}
	if m := d.GetMetadata(); m != nil {
		if err := w.charge(1); err != nil { // the field's name
			return err
		}
		if err := w.structure(m); err != nil {
			return err
		}
	}
	return w.descriptors(d.GetDescriptors(), depth+1)
}

// structure checks a descriptor's metadata as it converts (a mapping, its
// keys and values): every node counted, every string bounded. Its depth
// was bounded by the decoder (recursionLimit).
func (w *walk) structure(m *structpb.Struct) error {
	if err := w.charge(1); err != nil {
		return err
	}
	for k, v := range m.GetFields() {
		if err := w.str("metadata key", k); err != nil {
			return err
		}
		if err := w.value(v); err != nil {
			return err
		}
	}
	return nil
}

func (w *walk) value(v *structpb.Value) error {
	switch x := v.GetKind().(type) {
	case *structpb.Value_StructValue:
		return w.structure(x.StructValue)
	case *structpb.Value_ListValue:
		if err := w.charge(1); err != nil {
			return err
		}
		for _, e := range x.ListValue.GetValues() {
			if err := w.value(e); err != nil {
				return err
			}
		}
		return nil
	case *structpb.Value_StringValue:
		if len(x.StringValue) > config.MaxScalarBytes {
			return fmt.Errorf("a metadata string of %d bytes: the most is %d", len(x.StringValue), config.MaxScalarBytes)
		}
	}
	return w.charge(1)
}

func (w *walk) policy(p *rlsconf.RateLimitPolicy) error {
	n := 2 // the field's name and the mapping
	if p.GetUnlimited() {
		n += 2 // unlimited
	} else {
		n += 4 // unit and requests_per_unit
	}
	if err := w.charge(n); err != nil {
		return err
	}
	if p.GetName() != "" {
		if err := w.str("name", p.GetName()); err != nil {
			return err
		}
	}
	if len(p.GetReplaces()) > 0 {
		if err := w.charge(2); err != nil {
			return err
		}
	}
	for _, r := range p.GetReplaces() {
		if err := w.charge(1); err != nil {
			return err
		}
		if err := w.str("replaces name", r.GetName()); err != nil {
			return err
		}
	}
	return nil
}
