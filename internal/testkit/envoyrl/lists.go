package envoyrl

import (
	"fmt"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// ConnManager is one HttpConnectionManager of a bootstrap, unpacked.
type ConnManager struct {
	Where string // "listener edge", for messages
	HCM   *hcmv3.HttpConnectionManager
}

// ConnManagers returns every HttpConnectionManager in b's static listeners.
func ConnManagers(b *bootstrapv3.Bootstrap) ([]ConnManager, error) {
	var out []ConnManager
	for _, l := range b.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				hcm := &hcmv3.HttpConnectionManager{}
				if !f.GetTypedConfig().MessageIs(hcm) {
					continue
				}
				if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
					return nil, fmt.Errorf("listener %s: %w", l.GetName(), err)
				}
				out = append(out, ConnManager{Where: "listener " + l.GetName(), HCM: hcm})
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no http_connection_manager in any listener")
	}
	return out, nil
}

// RouteProxy returns the Proxy of a rate limit filter named
// envoy.filters.http.ratelimit, configured by filter, in front of the
// routes of rc: a RouteConfiguration file, as the envoy/ route examples
// are, without a bootstrap around it.
func RouteProxy(rc *routev3.RouteConfiguration, filter *ratelimitv3.RateLimit) *Proxy {
	hcm := &hcmv3.HttpConnectionManager{RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: rc}}
	return &Proxy{cm: ConnManager{Where: "route configuration " + rc.GetName(), HCM: hcm},
		filter: Filter{Name: "envoy.filters.http.ratelimit", Config: filter}}
}

// Filter is the rate limit filter of a connection manager: its name (the
// key of its typed_per_filter_config) and its config.
type Filter struct {
	Name   string
	Config *ratelimitv3.RateLimit
}

// RateLimitFilter returns cm's rate limit filter, or ok false if it has
// none. More than one is an error: the model handles one.
func (cm ConnManager) RateLimitFilter() (f Filter, ok bool, err error) {
	for _, hf := range cm.HCM.GetHttpFilters() {
		cfg := &ratelimitv3.RateLimit{}
		if !hf.GetTypedConfig().MessageIs(cfg) {
			continue
		}
		if ok {
			return Filter{}, false, fmt.Errorf("%s: more than one rate limit filter", cm.Where)
		}
		if err := hf.GetTypedConfig().UnmarshalTo(cfg); err != nil {
			return Filter{}, false, fmt.Errorf("%s: filter %s: %w", cm.Where, hf.GetName(), err)
		}
		f, ok = Filter{Name: hf.GetName(), Config: cfg}, true
	}
	return f, ok, nil
}

// List is one list of rate limit entries Envoy may read for a route.
type List struct {
	Name    string // where it is, e.g. "RouteAction.rate_limits"
	Entries []*routev3.RateLimit
	// Costs says whether Envoy honours hits_addend in this list (only the
	// filter-level and per-route lists, Envoy 1.33+).
	Costs bool
}

// Lists returns the lists of rate limit entries the filter applies to
// route r of virtual host vh, in Envoy's order, and the lists that are set
// but ignored because another one takes precedence:
//
//   - RateLimitPerRoute.rate_limits (typed_per_filter_config, Envoy 1.33+)
//     replaces every other list;
//   - else the filter's own rate_limits replace the route's and the virtual
//     host's;
//   - else the route's RouteAction.rate_limits, plus the virtual host's
//     when the per-route vh_rate_limits says INCLUDE, or instead of them
//     when the route has none (OVERRIDE, the default); IGNORE drops the
//     virtual host's.
func (f Filter) Lists(r *routev3.Route, vh *routev3.VirtualHost) (apply, ignored []List, err error) {
	perRoute, err := f.perRoute(r, vh)
	if err != nil {
		return nil, nil, err
	}
	routeLists := []List{
		{Name: "RouteAction.rate_limits", Entries: r.GetRoute().GetRateLimits()},
		{Name: "VirtualHost.rate_limits", Entries: vh.GetRateLimits()},
	}
	switch {
	case len(perRoute.GetRateLimits()) > 0:
		apply = []List{{Name: "typed_per_filter_config RateLimitPerRoute.rate_limits", Entries: perRoute.GetRateLimits(), Costs: true}}
	case len(f.Config.GetRateLimits()) > 0:
		apply = []List{{Name: "filter " + f.Name + " rate_limits", Entries: f.Config.GetRateLimits(), Costs: true}}
	default:
		apply = routeLists[:1]
		switch perRoute.GetVhRateLimits() {
		case ratelimitv3.RateLimitPerRoute_INCLUDE:
			apply = routeLists
		case ratelimitv3.RateLimitPerRoute_OVERRIDE:
			if len(r.GetRoute().GetRateLimits()) == 0 {
				apply = routeLists[1:]
			}
		}
		return apply, nil, nil
	}
	for _, l := range routeLists {
		if len(l.Entries) > 0 {
			ignored = append(ignored, l)
		}
	}
	return apply, ignored, nil
}

// Domain is the domain of the filter's requests for route r: the per-route
// config's, else the filter's.
func (f Filter) Domain(r *routev3.Route, vh *routev3.VirtualHost) (string, error) {
	perRoute, err := f.perRoute(r, vh)
	if err != nil {
		return "", err
	}
	if d := perRoute.GetDomain(); d != "" {
		return d, nil
	}
	return f.Config.GetDomain(), nil
}

// perRoute returns the most specific RateLimitPerRoute for the filter (the
// route's, else the virtual host's), or nil.
func (f Filter) perRoute(r *routev3.Route, vh *routev3.VirtualHost) (*ratelimitv3.RateLimitPerRoute, error) {
	for _, cfg := range []map[string]*anypb.Any{r.GetTypedPerFilterConfig(), vh.GetTypedPerFilterConfig()} {
		if a := cfg[f.Name]; a != nil {
			pr := &ratelimitv3.RateLimitPerRoute{}
			if err := a.UnmarshalTo(pr); err != nil {
				return nil, fmt.Errorf("route %q: typed_per_filter_config[%q]: %w", r.GetName(), f.Name, err)
			}
			return pr, nil
		}
	}
	return nil, nil
}
