package envoy_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/sluicehq/sluice/pkg/config"
)

// configDir is the descriptor config the bootstraps go with; `make run` and docker-compose
// load it too.
const configDir = "ratelimit-config"

// samples stand in for the values a request supplies, by descriptor key. A key with several
// samples is tried with each, so that every configured branch below it is reached.
var samples = map[string][]string{
	"remote_address": {"203.0.113.7"},
	"api_key":        {"key-123"},
	"tenant":         {"acme"},
	"path":           {"/tenants/acme/reports", "/tenants/acme/reports?year=2025", "/tenants/acme/invoices"},
}

// part is one descriptor entry as an action produces it: a fixed value, or one taken from the
// request (value empty, dynamic true).
type part struct {
	key, value string
	dynamic    bool
	optional   bool // request_headers with skip_if_absent: the entry may be missing
}

func (p part) String() string {
	v := strconv.Quote(p.value)
	if p.dynamic {
		v = "<" + p.key + ">"
	}
	s := fmt.Sprintf("(%q, %s)", p.key, v)
	if p.optional {
		s += "?"
	}
	return s
}

// shape is the descriptor that one route.v3.RateLimit entry produces.
type shape struct {
	route  string // the route's name
	source string // where the entry is, for messages
	domain string
	parts  []part
	cost   uint64 // hits_addend.number; 0 when unset
}

func (s shape) String() string {
	var b strings.Builder
	b.WriteString("[")
	for i, p := range s.parts {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(p.String())
	}
	b.WriteString("]")
	if s.cost > 0 {
		fmt.Fprintf(&b, " cost %d", s.cost)
	}
	return b.String()
}

// entries expands s into the concrete descriptors a request can produce: dynamic parts take
// each of their samples, optional parts are tried present and absent.
func (s shape) entries(t *testing.T) [][]config.Entry {
	t.Helper()
	out := [][]config.Entry{nil}
	for _, p := range s.parts {
		var values []string
		if p.dynamic {
			values = samples[p.key]
			if len(values) == 0 {
				t.Fatalf("%s: no sample value for descriptor key %q: add one to samples", s.source, p.key)
			}
		} else {
			values = []string{p.value}
		}
		var next [][]config.Entry
		for _, prefix := range out {
			if p.optional {
				next = append(next, prefix)
			}
			for _, v := range values {
				next = append(next, append(slices.Clone(prefix), config.Entry{Key: p.key, Value: v}))
			}
		}
		out = next
	}
	return slices.DeleteFunc(out, func(e []config.Entry) bool { return len(e) == 0 })
}

// TestRoutesMatchConfig is the drift check between the bootstraps and ratelimit-config: every
// descriptor a route can send must select a limit (a descriptor that selects none is silently
// unlimited), and every limit in the config must be selected by some route (a limit that no
// route reaches is dead configuration, most likely a renamed key).
func TestRoutesMatchConfig(t *testing.T) {
	cfg, err := config.Load(configDir)
	if err != nil {
		t.Fatalf("config.Load(%s): %v", configDir, err)
	}
	for _, f := range rlsLayouts(t) {
		t.Run(f.name, func(t *testing.T) {
			reached := map[string]bool{}
			domains := map[string]bool{}
			for _, cm := range connManagers(t, f.b) {
				for _, s := range routeShapes(t, cm) {
					domains[s.domain] = true
					t.Logf("%s: %s", s.source, s)
					for _, e := range s.entries(t) {
						l := cfg.Match(s.domain, e)
						if l == nil {
							t.Errorf("%s sends %v, which matches no limit of domain %q in %s", s.source, e, s.domain, configDir)
							continue
						}
						reached[l.Path] = true
					}
				}
			}
			for _, l := range cfg.Limits() {
				if domains[l.Domain] && !reached[l.Path] {
					t.Errorf("%s:%d: limit %s is reached by no route", l.File, l.Line, l.Path)
				}
			}
		})
	}
}

// TestEveryRouteLimitsPerClient: each route sends the per-client descriptor
// [("remote_address", client)] on its own, so no route escapes the per-client limit.
func TestEveryRouteLimitsPerClient(t *testing.T) {
	for _, f := range rlsLayouts(t) {
		for _, cm := range connManagers(t, f.b) {
			perClient := map[string]bool{}
			for _, s := range routeShapes(t, cm) {
				if len(s.parts) == 1 && s.parts[0].key == "remote_address" && s.parts[0].dynamic {
					perClient[s.route] = true
				}
			}
			for _, vh := range cm.HCM.GetRouteConfig().GetVirtualHosts() {
				for _, r := range vh.GetRoutes() {
					if !perClient[r.GetName()] {
						t.Errorf("%s: route %q sends no [(\"remote_address\", client)] descriptor", f.name, r.GetName())
					}
				}
			}
		}
	}
}

// routeShapes returns the descriptors each route of cm sends to the rate limit service,
// following Envoy's rules for which rate_limits lists apply (envoyrl.Filter.Lists).
func routeShapes(t *testing.T, cm connManager) []shape {
	t.Helper()
	filter, ok, err := cm.RateLimitFilter()
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return nil
	}
	var out []shape
	for _, vh := range cm.HCM.GetRouteConfig().GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			where := "route " + r.GetName()
			lists, ignored, err := filter.Lists(r, vh)
			if err != nil {
				t.Fatal(err)
			}
			domain, err := filter.Domain(r, vh)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range ignored {
				t.Errorf("%s: %s is ignored by Envoy because %s is set; merge them", where, l.Name, lists[0].Name)
			}
			for _, l := range lists {
				for i, rl := range l.Entries {
					source := fmt.Sprintf("%s: %s[%d]", where, l.Name, i)
					if rl.GetStage().GetValue() != filter.Config.GetStage() {
						t.Errorf("%s: stage %d, but the rate limit filter runs stage %d", source, rl.GetStage().GetValue(), filter.Config.GetStage())
						continue
					}
					if rl.GetHitsAddend() != nil && !l.Costs {
						t.Errorf("%s: Envoy ignores hits_addend in %s; set it in the route's typed_per_filter_config (RateLimitPerRoute.rate_limits)", source, l.Name)
					}
					if rl.GetLimit() != nil {
						t.Fatalf("%s: a limit override replaces the configured limit; the drift check does not model it", source)
					}
					s := shape{route: r.GetName(), source: source, domain: domain, cost: rl.GetHitsAddend().GetNumber().GetValue()}
					if f := rl.GetHitsAddend().GetFormat(); f != "" {
						t.Fatalf("%s: hits_addend.format %q: the drift check models only number", source, f)
					}
					for _, a := range rl.GetActions() {
						s.parts = append(s.parts, actionPart(t, source, a))
					}
					out = append(out, s)
				}
			}
		}
	}
	return out
}

// actionPart is the descriptor entry one action appends, with Envoy's default keys.
func actionPart(t *testing.T, source string, a *routev3.RateLimit_Action) part {
	t.Helper()
	switch a := a.GetActionSpecifier().(type) {
	case *routev3.RateLimit_Action_RemoteAddress_:
		return part{key: "remote_address", dynamic: true}
	case *routev3.RateLimit_Action_RequestHeaders_:
		h := a.RequestHeaders
		return part{key: h.GetDescriptorKey(), dynamic: true, optional: h.GetSkipIfAbsent()}
	case *routev3.RateLimit_Action_GenericKey_:
		key := a.GenericKey.GetDescriptorKey()
		if key == "" {
			key = "generic_key"
		}
		return part{key: key, value: a.GenericKey.GetDescriptorValue()}
	case *routev3.RateLimit_Action_HeaderValueMatch_:
		key := a.HeaderValueMatch.GetDescriptorKey()
		if key == "" {
			key = "header_match"
		}
		return part{key: key, value: a.HeaderValueMatch.GetDescriptorValue()}
	default:
		t.Fatalf("%s: action %T is not modelled by the drift check: teach actionPart its descriptor entry", source, a)
		return part{}
	}
}
