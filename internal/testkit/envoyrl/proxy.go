package envoyrl

import (
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strings"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Request is an HTTP request as it reaches Envoy.
type Request struct {
	Method string      // default GET
	Path   string      // the :path, query included
	Host   string      // the :authority
	Header http.Header // the other headers, X-Forwarded-For among them
	Peer   string      // the TCP peer's IP address
	// Metadata is the stream's dynamic metadata when it ends, by
	// "namespace:key" (what %DYNAMIC_METADATA(namespace:key)% reads), as
	// filters of the chain wrote it: a hits_addend format's source.
	Metadata map[string]string
}

// header returns the first value of header name, pseudo-headers included.
func (r Request) header(name string) (string, bool) {
	switch strings.ToLower(name) {
	case ":method":
		if r.Method == "" {
			return "GET", true
		}
		return r.Method, true
	case ":path":
		return r.Path, r.Path != ""
	case ":authority", "host":
		return r.Host, r.Host != ""
	case ":scheme":
		return "http", true
	}
	v := r.Header.Values(name)
	if len(v) == 0 {
		return "", false
	}
	return v[0], true
}

// Proxy is the rate limit filter of one Envoy bootstrap's connection
// manager: it computes the RateLimitRequests the filter sends for an HTTP
// request, when it starts and when its stream ends.
type Proxy struct {
	cm     ConnManager
	filter Filter
}

// NewProxy returns the Proxy of b's first connection manager with a rate
// limit filter.
func NewProxy(b *bootstrapv3.Bootstrap) (*Proxy, error) {
	cms, err := ConnManagers(b)
	if err != nil {
		return nil, err
	}
	for _, cm := range cms {
		f, ok, err := cm.RateLimitFilter()
		if err != nil {
			return nil, err
		}
		if ok {
			return &Proxy{cm: cm, filter: f}, nil
		}
	}
	return nil, fmt.Errorf("no connection manager has a rate limit filter")
}

// RateLimitRequest returns what the filter sends the rate limit service for
// req when it starts and the name of the route req matched; nil when the
// route produces no descriptor (the filter then makes no call) or no route
// matches.
func (p *Proxy) RateLimitRequest(req Request) (*rlsv3.RateLimitRequest, string, error) {
	return p.phase(req, false)
}

// StreamDoneRequest is what the filter sends when req's stream ends: the
// descriptors of the entries with apply_on_stream_done, and only those
// (Envoy's filter, onDestroy). Envoy sends it whatever the answer to the
// first call was, refused requests' included, unless the stream was reset
// while that call was in flight.
func (p *Proxy) StreamDoneRequest(req Request) (*rlsv3.RateLimitRequest, string, error) {
	return p.phase(req, true)
}

func (p *Proxy) phase(req Request, streamDone bool) (*rlsv3.RateLimitRequest, string, error) {
	vh, r, err := p.route(req)
	if err != nil || r == nil {
		return nil, "", err
	}
	lists, _, err := p.filter.Lists(r, vh)
	if err != nil {
		return nil, r.GetName(), err
	}
	domain, err := p.filter.Domain(r, vh)
	if err != nil {
		return nil, r.GetName(), err
	}
	out := &rlsv3.RateLimitRequest{Domain: domain}
	for _, l := range lists {
		for i, rl := range l.Entries {
			if rl.GetStage().GetValue() != p.filter.Config.GetStage() || rl.GetApplyOnStreamDone() != streamDone {
				continue
			}
			d, err := p.descriptor(rl, l.Costs, req)
			if err != nil {
				return nil, r.GetName(), fmt.Errorf("route %s: %s[%d]: %w", r.GetName(), l.Name, i, err)
			}
			if d != nil {
				out.Descriptors = append(out.Descriptors, d)
			}
		}
	}
	if len(out.Descriptors) == 0 {
		return nil, r.GetName(), nil
	}
	return out, r.GetName(), nil
}

// route returns the virtual host and route req matches: the first route of
// the most specific virtual host whose domains match the host.
func (p *Proxy) route(req Request) (*routev3.VirtualHost, *routev3.Route, error) {
	rc := p.cm.HCM.GetRouteConfig()
	if rc == nil {
		return nil, nil, fmt.Errorf("%s: only an inline route_config is modelled", p.cm.Where)
	}
	host, _, err := net.SplitHostPort(req.Host)
	if err != nil {
		host = req.Host
	}
	var best *routev3.VirtualHost
	bestRank := -1
	for _, vh := range rc.GetVirtualHosts() {
		for _, d := range vh.GetDomains() {
			if rank := domainRank(d, strings.ToLower(host)); rank > bestRank {
				best, bestRank = vh, rank
			}
		}
	}
	if best == nil {
		return nil, nil, nil
	}
	path, _, _ := strings.Cut(req.Path, "?") // route matching ignores the query
	for _, r := range best.GetRoutes() {
		ok, err := routeMatches(r.GetMatch(), path, req)
		if err != nil {
			return nil, nil, fmt.Errorf("route %s: %w", r.GetName(), err)
		}
		if ok {
			return best, r, nil
		}
	}
	return best, nil, nil
}

// domainRank orders Envoy's virtual host domain matches: exact, then
// suffix wildcards, then prefix wildcards (each the longest first), then
// "*"; -1 for no match.
func domainRank(pattern, host string) int {
	const tier = 1 << 16 // beyond any host name's length
	pattern = strings.ToLower(pattern)
	switch {
	case pattern == host:
		return 3 * tier
	case strings.HasPrefix(pattern, "*") && pattern != "*" && strings.HasSuffix(host, pattern[1:]):
		return 2*tier + len(pattern)
	case strings.HasSuffix(pattern, "*") && pattern != "*" && strings.HasPrefix(host, pattern[:len(pattern)-1]):
		return tier + len(pattern)
	case pattern == "*":
		return 0
	}
	return -1
}

func routeMatches(m *routev3.RouteMatch, path string, req Request) (bool, error) {
	if len(m.GetQueryParameters()) > 0 || m.GetGrpc() != nil || m.GetRuntimeFraction() != nil || len(m.GetDynamicMetadata()) > 0 {
		return false, fmt.Errorf("a route matcher beyond path and headers is not modelled")
	}
	fold := m.GetCaseSensitive() != nil && !m.GetCaseSensitive().GetValue()
	eq := func(a, b string) bool { return a == b || fold && strings.EqualFold(a, b) }
	var ok bool
	switch ps := m.GetPathSpecifier().(type) {
	case *routev3.RouteMatch_Prefix:
		ok = len(path) >= len(ps.Prefix) && eq(path[:len(ps.Prefix)], ps.Prefix)
	case *routev3.RouteMatch_Path:
		ok = eq(path, ps.Path)
	case *routev3.RouteMatch_SafeRegex:
		var err error
		if ok, err = fullMatch(ps.SafeRegex.GetRegex(), path); err != nil {
			return false, err
		}
	default:
		return false, fmt.Errorf("path specifier %T is not modelled", ps)
	}
	if !ok {
		return false, nil
	}
	return headersMatch(m.GetHeaders(), req)
}

// descriptor is the descriptor one rate limit entry produces for req, or
// nil when one of its actions produces nothing (Envoy then sends none).
func (p *Proxy) descriptor(rl *routev3.RateLimit, costs bool, req Request) (*ratelimitv3.RateLimitDescriptor, error) {
	if rl.GetLimit() != nil {
		return nil, fmt.Errorf("a limit override from dynamic metadata is not modelled")
	}
	d := &ratelimitv3.RateLimitDescriptor{}
	for _, a := range rl.GetActions() {
		e, ok, err := p.action(a, req)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, nil
		}
		if e != nil {
			d.Entries = append(d.Entries, e)
		}
	}
	if len(d.Entries) == 0 {
		return nil, nil
	}
	if h := rl.GetHitsAddend(); h != nil && costs {
		if f := h.GetFormat(); f != "" {
			n, ok, err := formatHits(f, req)
			if err != nil || !ok {
				return nil, err // Envoy drops the descriptor, with a warning
			}
			d.HitsAddend = wrapperspb.UInt64(n)
		}
		if n := h.GetNumber(); n != nil {
			d.HitsAddend = wrapperspb.UInt64(n.GetValue())
		}
		d.IsNegativeHits = h.GetIsNegativeHits() // Envoy 1.38: a refund
	}
	return d, nil
}

// action returns the entry one action appends; ok false when the action
// produces nothing, which drops the whole descriptor; a nil entry with ok
// true when it is skipped (request_headers with skip_if_absent).
func (p *Proxy) action(a *routev3.RateLimit_Action, req Request) (*ratelimitv3.RateLimitDescriptor_Entry, bool, error) {
	switch a := a.GetActionSpecifier().(type) {
	case *routev3.RateLimit_Action_RemoteAddress_:
		client := p.clientAddress(req)
		if client == "" {
			return nil, false, nil
		}
		return &ratelimitv3.RateLimitDescriptor_Entry{Key: "remote_address", Value: client}, true, nil
	case *routev3.RateLimit_Action_RequestHeaders_:
		h := a.RequestHeaders
		v, ok := req.header(h.GetHeaderName())
		if !ok {
			return nil, h.GetSkipIfAbsent(), nil
		}
		return &ratelimitv3.RateLimitDescriptor_Entry{Key: h.GetDescriptorKey(), Value: v}, true, nil
	case *routev3.RateLimit_Action_GenericKey_:
		key := a.GenericKey.GetDescriptorKey()
		if key == "" {
			key = "generic_key"
		}
		return &ratelimitv3.RateLimitDescriptor_Entry{Key: key, Value: a.GenericKey.GetDescriptorValue()}, true, nil
	case *routev3.RateLimit_Action_HeaderValueMatch_:
		m := a.HeaderValueMatch
		matched, err := headersMatch(m.GetHeaders(), req)
		if err != nil {
			return nil, false, err
		}
		expect := m.GetExpectMatch() == nil || m.GetExpectMatch().GetValue()
		if matched != expect {
			return nil, false, nil
		}
		key := m.GetDescriptorKey()
		if key == "" {
			key = "header_match"
		}
		return &ratelimitv3.RateLimitDescriptor_Entry{Key: key, Value: m.GetDescriptorValue()}, true, nil
	}
	return nil, false, fmt.Errorf("action %T is not modelled", a.GetActionSpecifier())
}

// clientAddress is Envoy's trusted client address: with use_remote_address
// and xff_num_trusted_hops N > 0, the Nth X-Forwarded-For entry from the
// right (the one the trusted proxy in front appended), without
// use_remote_address the (N+1)th; the TCP peer when the header has too few
// entries or the entry is not an IP address.
func (p *Proxy) clientAddress(req Request) string {
	n := int(p.cm.HCM.GetXffNumTrustedHops())
	skip := n // entries to skip from the right
	if p.cm.HCM.GetUseRemoteAddress().GetValue() {
		if n == 0 {
			return req.Peer
		}
		skip = n - 1
	}
	var xff []string
	for _, v := range req.Header.Values("X-Forwarded-For") {
		for _, e := range strings.Split(v, ",") {
			xff = append(xff, strings.TrimSpace(e))
		}
	}
	if i := len(xff) - 1 - skip; i >= 0 && net.ParseIP(xff[i]) != nil {
		return xff[i]
	}
	return req.Peer
}

// headersMatch reports whether req matches every header matcher.
func headersMatch(ms []*routev3.HeaderMatcher, req Request) (bool, error) {
	for _, m := range ms {
		ok, err := headerMatches(m, req)
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

func headerMatches(m *routev3.HeaderMatcher, req Request) (bool, error) {
	v, present := req.header(m.GetName())
	var ok bool
	switch spec := m.GetHeaderMatchSpecifier().(type) {
	case *routev3.HeaderMatcher_PresentMatch:
		ok = present == spec.PresentMatch
	case *routev3.HeaderMatcher_StringMatch:
		if !present && !m.GetTreatMissingHeaderAsEmpty() {
			return false, nil // a missing header matches no string, inverted or not
		}
		var err error
		if ok, err = stringMatches(spec.StringMatch, v); err != nil {
			return false, fmt.Errorf("header %s: %w", m.GetName(), err)
		}
	default:
		return false, fmt.Errorf("header %s: matcher %T is not modelled", m.GetName(), spec)
	}
	return ok != m.GetInvertMatch(), nil
}

func stringMatches(m *matcherv3.StringMatcher, v string) (bool, error) {
	if m.GetIgnoreCase() {
		v = strings.ToLower(v)
	}
	low := func(s string) string {
		if m.GetIgnoreCase() {
			return strings.ToLower(s)
		}
		return s
	}
	switch p := m.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		return v == low(p.Exact), nil
	case *matcherv3.StringMatcher_Prefix:
		return strings.HasPrefix(v, low(p.Prefix)), nil
	case *matcherv3.StringMatcher_Suffix:
		return strings.HasSuffix(v, low(p.Suffix)), nil
	case *matcherv3.StringMatcher_Contains:
		return strings.Contains(v, low(p.Contains)), nil
	case *matcherv3.StringMatcher_SafeRegex:
		return fullMatch(p.SafeRegex.GetRegex(), v)
	}
	return false, fmt.Errorf("string matcher %T is not modelled", m.GetMatchPattern())
}

// fullMatch reports whether pattern matches all of s, as Envoy's RE2
// safe_regex does (the whole value, not a substring).
func fullMatch(pattern, s string) (bool, error) {
	re, err := regexp.Compile("^(?:" + pattern + ")$")
	if err != nil {
		return false, err
	}
	return re.MatchString(s), nil
}
