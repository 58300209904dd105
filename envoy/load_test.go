// Package envoy_test checks the files in envoy/ and the container files at the repository root
// without Docker or Envoy: the Envoy bootstraps are parsed into go-control-plane's protos and
// validated, the descriptors their routes produce are matched against ratelimit-config, and
// docker-compose.yml and the Dockerfile are checked against each other and against the commands
// they run.
package envoy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/anypb"
	"gopkg.in/yaml.v3"

	// Every typed_config in the bootstraps names one of these types. protojson resolves an Any
	// through protoregistry.GlobalTypes, which the generated packages fill in at init, so each
	// extension the files use must be imported here; a missing one fails the parse with
	// "unable to resolve".
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/local_ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

// bootstrapFile is one Envoy bootstrap from envoy/, parsed.
type bootstrapFile struct {
	name string // base name, e.g. "front-proxy-sidecar.yaml"
	b    *bootstrapv3.Bootstrap
}

// loadBootstraps parses every *.yaml in envoy/ that is an Envoy bootstrap (it has
// static_resources or dynamic_resources at the top). The test binary runs in envoy/.
func loadBootstraps(t *testing.T) []bootstrapFile {
	t.Helper()
	names, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var files []bootstrapFile
	for _, name := range names {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := yamlToJSONValue(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		top, ok := doc.(map[string]any)
		if !ok {
			continue
		}
		if _, ok := top["static_resources"]; !ok {
			if _, ok := top["dynamic_resources"]; !ok {
				continue
			}
		}
		js, err := json.Marshal(doc)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b := &bootstrapv3.Bootstrap{}
		// The defaults are what Envoy does: unknown fields are an error, and every Any must
		// resolve to a registered type.
		if err := protojson.Unmarshal(js, b); err != nil {
			t.Fatalf("%s: not a valid envoy.config.bootstrap.v3.Bootstrap: %v", name, err)
		}
		files = append(files, bootstrapFile{name: name, b: b})
	}
	if len(files) == 0 {
		t.Fatal("no Envoy bootstrap (*.yaml with static_resources) in envoy/")
	}
	return files
}

// bootstrap returns the file called name from files.
func bootstrap(t *testing.T, files []bootstrapFile, name string) *bootstrapv3.Bootstrap {
	t.Helper()
	i := slices.IndexFunc(files, func(f bootstrapFile) bool { return f.name == name })
	if i < 0 {
		t.Fatalf("%s is missing from envoy/", name)
	}
	return files[i].b
}

// yamlToJSONValue decodes one YAML document (anchors and aliases resolved, as Envoy's loader
// does) into values that encoding/json can marshal.
func yamlToJSONValue(data []byte) (any, error) {
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	return jsonValue(v)
}

func jsonValue(v any) (any, error) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			c, err := jsonValue(e)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			v[k] = c
		}
		return v, nil
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			s, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("mapping key %v (%T) is not a string", k, k)
			}
			c, err := jsonValue(e)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", s, err)
			}
			m[s] = c
		}
		return m, nil
	case []any:
		for i, e := range v {
			c, err := jsonValue(e)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			v[i] = c
		}
		return v, nil
	default:
		return v, nil
	}
}

// deepCheck runs the protoc-gen-validate rules of m and of every message packed in an Any
// below it, and reports each deprecated field or enum value that is set. The generated
// ValidateAll recurses into ordinary sub-messages but stops at google.protobuf.Any (an
// *anypb.Any has no ValidateAll), and nearly every Envoy extension is an Any, so without the
// walk a filter's own rules would never run.
func deepCheck(m proto.Message) []error {
	var c checker
	c.validate("", m)
	c.message("", m.ProtoReflect())
	return c.errs
}

// checker collects deepCheck's findings; path names the field being walked, as
// ".static_resources.listeners[0]...".
type checker struct{ errs []error }

func (c *checker) errorf(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf(format, args...))
}

// validate runs m's own ValidateAll, which covers its ordinary sub-messages.
func (c *checker) validate(path string, m proto.Message) {
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			c.errorf("%s (%s): %w", path, m.ProtoReflect().Descriptor().FullName(), err)
		}
	}
}

// message walks every set field of m, unpacking m itself if it is an Any.
func (c *checker) message(path string, m protoreflect.Message) {
	if a, ok := m.Interface().(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			c.errorf("%s: %w", path, err)
			return
		}
		c.validate(path, inner)
		c.message(path, inner.ProtoReflect())
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		p := path + "." + string(fd.Name())
		if opts, ok := fd.Options().(*descriptorpb.FieldOptions); ok && opts.GetDeprecated() {
			c.errorf("%s: deprecated field (Envoy warns, and rejects some by default)", p)
		}
		switch {
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				c.value(fmt.Sprintf("%s[%d]", p, i), fd, l.Get(i))
			}
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, e protoreflect.Value) bool {
				c.value(fmt.Sprintf("%s[%v]", p, k.Interface()), fd.MapValue(), e)
				return true
			})
		default:
			c.value(p, fd, v)
		}
		return true
	})
}

// value continues the walk into one value of field fd: a message, or an enum whose value
// may be deprecated.
func (c *checker) value(path string, fd protoreflect.FieldDescriptor, v protoreflect.Value) {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		c.message(path, v.Message())
	case protoreflect.EnumKind:
		ev := fd.Enum().Values().ByNumber(v.Enum())
		if ev == nil {
			return
		}
		if opts, ok := ev.Options().(*descriptorpb.EnumValueOptions); ok && opts.GetDeprecated() {
			c.errorf("%s: deprecated enum value %s", path, ev.Name())
		}
	}
}

// repoRoot is the repository root, the parent of envoy/.
func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(wd)
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root: %v", err)
	}
	return root
}

// indent prefixes every line of s with two spaces, for multi-line failure output.
func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}
