// Package envoy_test checks the files in envoy/ and the container files at the repository root
// without Docker or Envoy: the Envoy bootstraps are parsed into go-control-plane's protos and
// validated, the descriptors their routes produce are matched against ratelimit-config, and
// docker-compose.yml and the Dockerfile are checked against each other and against the commands
// they run.
package envoy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluicehq/sluice/internal/testkit/envoyrl"
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
		ok, err := envoyrl.IsBootstrap(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !ok {
			continue
		}
		// Envoy's own loader: unknown fields are an error, and every Any must resolve to a
		// registered type.
		b, err := envoyrl.ParseBootstrap(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		files = append(files, bootstrapFile{name: name, b: b})
	}
	if len(files) == 0 {
		t.Fatal("no Envoy bootstrap (*.yaml with static_resources) in envoy/")
	}
	return files
}

// bootstrap returns the file called name from files.
// rlsLayouts are the bootstraps whose proxies call the rate limit service per request (the
// envoy.filters.http.ratelimit filter): the layouts that share their routes and descriptors.
// front-proxy-rlqs.yaml is not one: its Envoy holds token buckets of its own (rlqs_test.go).
func rlsLayouts(t *testing.T) []bootstrapFile {
	t.Helper()
	var out []bootstrapFile
	for _, f := range loadBootstraps(t) {
		for _, cm := range connManagers(t, f.b) {
			if slices.ContainsFunc(cm.HCM.GetHttpFilters(), func(h *hcmv3.HttpFilter) bool { return h.GetName() == "envoy.filters.http.ratelimit" }) {
				out = append(out, f)
				break
			}
		}
	}
	return out
}

func bootstrap(t *testing.T, files []bootstrapFile, name string) *bootstrapv3.Bootstrap {
	t.Helper()
	i := slices.IndexFunc(files, func(f bootstrapFile) bool { return f.name == name })
	if i < 0 {
		t.Fatalf("%s is missing from envoy/", name)
	}
	return files[i].b
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
	c.ignoredCosts(path, m.Interface())
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

// ignoredCosts reports a hits_addend in a RouteAction's or a VirtualHost's
// own rate_limits: Envoy honours it only in the rate limit filter's
// rate_limits and its per-route config (RateLimitPerRoute), and silently
// charges 1 elsewhere, so a refund there would become a charge.
func (c *checker) ignoredCosts(path string, m proto.Message) {
	var limits []*routev3.RateLimit
	switch x := m.(type) {
	case *routev3.RouteAction:
		limits = x.GetRateLimits()
	case *routev3.VirtualHost:
		limits = x.GetRateLimits()
	}
	for i, rl := range limits {
		if rl.GetHitsAddend() != nil {
			c.errorf("%s.rate_limits[%d].hits_addend: Envoy ignores it here; put the entry in the rate limit filter's per-route config (RateLimitPerRoute.rate_limits)", path, i)
		}
	}
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
