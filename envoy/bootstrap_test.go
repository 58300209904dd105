package envoy_test

import (
	"fmt"
	"slices"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	localratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/local_ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluicehq/sluice/internal/testkit/envoyrl"
)

// perRouteTypes maps an HTTP filter's config type to the type Envoy expects for it in
// typed_per_filter_config, for the filters these files use.
var perRouteTypes = map[protoreflect.FullName]protoreflect.FullName{
	proto.MessageName(&ratelimitv3.RateLimit{}):           proto.MessageName(&ratelimitv3.RateLimitPerRoute{}),
	proto.MessageName(&localratelimitv3.LocalRateLimit{}): proto.MessageName(&localratelimitv3.LocalRateLimit{}),
}

// connManager is one HttpConnectionManager of a bootstrap, unpacked.
type connManager = envoyrl.ConnManager

// connManagers returns every HttpConnectionManager in b's static listeners.
func connManagers(t *testing.T, b *bootstrapv3.Bootstrap) []connManager {
	t.Helper()
	cms, err := envoyrl.ConnManagers(b)
	if err != nil {
		t.Fatal(err)
	}
	return cms
}

// unpack returns the message in a.
func unpack(t *testing.T, a *anypb.Any) proto.Message {
	t.Helper()
	m, err := a.UnmarshalNew()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestBootstrapsValidate: each bootstrap parses as Envoy's v3 API with every typed_config
// resolved (loadBootstraps), passes the API's validation rules all the way down into every
// typed_config, and uses no deprecated field.
func TestBootstrapsValidate(t *testing.T) {
	for _, f := range loadBootstraps(t) {
		t.Run(f.name, func(t *testing.T) {
			for _, err := range deepCheck(f.b) {
				t.Error(err)
			}
		})
	}
}

// TestBootstrapsWiring checks what the API's rules cannot: names that must refer to each
// other, the router last, per-route configs of the right type for a filter in the chain, and
// HTTP/2 on every cluster that carries gRPC.
func TestBootstrapsWiring(t *testing.T) {
	for _, f := range loadBootstraps(t) {
		t.Run(f.name, func(t *testing.T) {
			clusters := map[string]*clusterv3.Cluster{}
			for _, c := range f.b.GetStaticResources().GetClusters() {
				if clusters[c.GetName()] != nil {
					t.Errorf("cluster %q defined twice", c.GetName())
				}
				clusters[c.GetName()] = c
				if got := c.GetLoadAssignment().GetClusterName(); got != c.GetName() {
					t.Errorf("cluster %q: load_assignment.cluster_name = %q; want the cluster's name", c.GetName(), got)
				}
			}
			grpcClusters := map[string]bool{}
			for _, cm := range connManagers(t, f.b) {
				filterTypes := checkFilterChain(t, cm)
				for _, hf := range cm.HCM.GetHttpFilters() {
					rl := &ratelimitv3.RateLimit{}
					if !hf.GetTypedConfig().MessageIs(rl) {
						continue
					}
					if err := hf.GetTypedConfig().UnmarshalTo(rl); err != nil {
						t.Fatal(err)
					}
					svc := rl.GetRateLimitService()
					if v := svc.GetTransportApiVersion(); v != corev3.ApiVersion_V3 {
						t.Errorf("%s: rate_limit_service.transport_api_version = %v; want V3 (Envoy refuses v2)", hf.GetName(), v)
					}
					name := svc.GetGrpcService().GetEnvoyGrpc().GetClusterName()
					if name == "" {
						t.Errorf("%s: rate_limit_service must use envoy_grpc with a cluster_name", hf.GetName())
					}
					grpcClusters[name] = true
					if rl.GetTimeout() == nil {
						t.Errorf("%s: set timeout explicitly; the RLS deadline is a decision, not a default", hf.GetName())
					}
				}
				rc := cm.HCM.GetRouteConfig()
				if rc == nil {
					t.Fatalf("%s: want an inline route_config", cm.Where)
				}
				for _, vh := range rc.GetVirtualHosts() {
					checkPerFilterConfig(t, fmt.Sprintf("virtual host %q", vh.GetName()), vh.GetTypedPerFilterConfig(), filterTypes)
					for _, r := range vh.GetRoutes() {
						where := fmt.Sprintf("route %q", r.GetName())
						if r.GetName() == "" {
							t.Errorf("virtual host %q: every route needs a name (drift messages name it)", vh.GetName())
						}
						checkPerFilterConfig(t, where, r.GetTypedPerFilterConfig(), filterTypes)
						if c := r.GetRoute().GetCluster(); c != "" && clusters[c] == nil {
							t.Errorf("%s: cluster %q is not defined", where, c)
						}
					}
				}
			}
			for name := range grpcClusters {
				c := clusters[name]
				if c == nil {
					t.Errorf("rate_limit_service cluster %q is not defined", name)
					continue
				}
				checkHTTP2(t, c)
			}
		})
	}
}

// checkFilterChain checks cm's HTTP filters (unique names, router last, a known type each)
// and returns each filter's config type by name.
func checkFilterChain(t *testing.T, cm connManager) map[string]protoreflect.FullName {
	t.Helper()
	types := map[string]protoreflect.FullName{}
	filters := cm.HCM.GetHttpFilters()
	for i, hf := range filters {
		if _, dup := types[hf.GetName()]; dup {
			t.Errorf("%s: http filter %q appears twice", cm.Where, hf.GetName())
		}
		m := unpack(t, hf.GetTypedConfig())
		types[hf.GetName()] = m.ProtoReflect().Descriptor().FullName()
		if _, isRouter := m.(*routerv3.Router); isRouter != (i == len(filters)-1) {
			t.Errorf("%s: the router must be the last http filter and only the last (filter %d is %s)", cm.Where, i, hf.GetName())
		}
	}
	return types
}

// checkPerFilterConfig: each typed_per_filter_config key must name a filter in the chain
// (Envoy looks per-route configs up by filter name) and hold that filter's per-route type.
func checkPerFilterConfig(t *testing.T, where string, cfg map[string]*anypb.Any, filterTypes map[string]protoreflect.FullName) {
	t.Helper()
	for name, a := range cfg {
		ft, ok := filterTypes[name]
		if !ok {
			t.Errorf("%s: typed_per_filter_config[%q] names no http filter in the chain", where, name)
			continue
		}
		want, ok := perRouteTypes[ft]
		if !ok {
			t.Errorf("%s: typed_per_filter_config[%q]: no per-route type known for %s (add it to perRouteTypes)", where, name, ft)
			continue
		}
		got := unpack(t, a).ProtoReflect().Descriptor().FullName()
		if got != want {
			t.Errorf("%s: typed_per_filter_config[%q] is %s; want %s", where, name, got, want)
		}
	}
}

// checkHTTP2: gRPC needs HTTP/2 to the cluster, set through the upstream HTTP protocol
// options extension (the cluster's own http2_protocol_options field is deprecated).
func checkHTTP2(t *testing.T, c *clusterv3.Cluster) {
	t.Helper()
	const key = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
	a := c.GetTypedExtensionProtocolOptions()[key]
	if a == nil {
		t.Errorf("cluster %q carries gRPC but has no typed_extension_protocol_options[%q]", c.GetName(), key)
		return
	}
	opts, ok := unpack(t, a).(*upstreamhttpv3.HttpProtocolOptions)
	if !ok {
		t.Errorf("cluster %q: typed_extension_protocol_options[%q] is not an HttpProtocolOptions", c.GetName(), key)
		return
	}
	if opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		t.Errorf("cluster %q carries gRPC: want explicit_http_config.http2_protocol_options", c.GetName())
	}
}

// TestBootstrapsShareRoutes: the three layouts differ in the rate limit cluster and filters,
// never in their routes, so a route or descriptor change must be made in all of them.
func TestBootstrapsShareRoutes(t *testing.T) {
	files := rlsLayouts(t)
	const reference = "front-proxy-sidecar.yaml"
	want := connManagers(t, bootstrap(t, files, reference))
	for _, f := range files {
		if f.name == reference {
			continue
		}
		t.Run(f.name, func(t *testing.T) {
			got := connManagers(t, f.b)
			if len(got) != len(want) {
				t.Fatalf("%d connection managers; %s has %d", len(got), reference, len(want))
			}
			for i := range got {
				g, w := got[i].HCM.GetRouteConfig(), want[i].HCM.GetRouteConfig()
				if proto.Equal(g, w) {
					continue
				}
				gr, wr := routes(g.GetVirtualHosts()), routes(w.GetVirtualHosts())
				for name, r := range wr {
					if !proto.Equal(r, gr[name]) {
						t.Errorf("%s: route %q differs from %s", got[i].Where, name, reference)
					}
				}
				for name := range gr {
					if wr[name] == nil {
						t.Errorf("%s: route %q is not in %s", got[i].Where, name, reference)
					}
				}
				t.Errorf("%s: route_config differs from %s's; the files must share their routes", got[i].Where, reference)
			}
			// The application cluster is the same everywhere too.
			if !proto.Equal(cluster(f.b, "upstream"), cluster(bootstrap(t, files, reference), "upstream")) {
				t.Errorf("cluster \"upstream\" differs from %s's", reference)
			}
		})
	}
}

// routes indexes the routes of vhs by "virtual host/route"; "virtual host/" is the virtual
// host without its routes.
func routes(vhs []*routev3.VirtualHost) map[string]proto.Message {
	out := map[string]proto.Message{}
	for _, vh := range vhs {
		bare := proto.Clone(vh).(*routev3.VirtualHost)
		bare.Routes = nil
		out[vh.GetName()+"/"] = bare
		for _, r := range vh.GetRoutes() {
			out[vh.GetName()+"/"+r.GetName()] = r
		}
	}
	return out
}

// cluster returns b's static cluster called name, or nil.
func cluster(b *bootstrapv3.Bootstrap, name string) *clusterv3.Cluster {
	cs := b.GetStaticResources().GetClusters()
	if i := slices.IndexFunc(cs, func(c *clusterv3.Cluster) bool { return c.GetName() == name }); i >= 0 {
		return cs[i]
	}
	return nil
}
