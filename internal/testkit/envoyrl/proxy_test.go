package envoyrl

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

func proxyFor(t *testing.T, name string) *Proxy {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "envoy", name))
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseBootstrap(data)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	p, err := NewProxy(b)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// describe renders a request as "domain: [k=v, k=v] [k=v]xN".
func describe(r *rlsv3.RateLimitRequest) string {
	if r == nil {
		return "none"
	}
	var b strings.Builder
	b.WriteString(r.GetDomain() + ":")
	for _, d := range r.GetDescriptors() {
		b.WriteString(" [")
		for i, e := range d.GetEntries() {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(e.GetKey() + "=" + e.GetValue())
		}
		b.WriteString("]")
		if h := d.GetHitsAddend(); h != nil {
			b.WriteString("x" + strconv.FormatUint(h.GetValue(), 10))
		}
	}
	return b.String()
}

// TestSidecarBootstrap: the requests Envoy's filter sends for the routes of
// envoy/front-proxy-sidecar.yaml, as its comments describe them.
func TestSidecarBootstrap(t *testing.T) {
	for _, file := range []string{"front-proxy-sidecar.yaml", "front-proxy-direct.yaml"} {
		p := proxyFor(t, file)
		tests := []struct {
			name   string
			req    Request
			want   string
			wantRt string
		}{
			{"client from the rightmost XFF entry", Request{Path: "/", Header: http.Header{"X-Forwarded-For": {"192.0.2.66, 203.0.113.7"}}, Peer: "10.0.0.2"},
				"edge: [remote_address=203.0.113.7]", "default"},
			{"XFF over two header lines", Request{Path: "/", Header: http.Header{"X-Forwarded-For": {"192.0.2.66", "203.0.113.8"}}, Peer: "10.0.0.2"},
				"edge: [remote_address=203.0.113.8]", "default"},
			{"no XFF: the peer", Request{Path: "/x", Peer: "10.0.0.2"}, "edge: [remote_address=10.0.0.2]", "default"},
			{"a malformed XFF entry: the peer", Request{Path: "/x", Header: http.Header{"X-Forwarded-For": {"bogus"}}, Peer: "10.0.0.2"},
				"edge: [remote_address=10.0.0.2]", "default"},
			{"api read", Request{Path: "/api/items", Header: http.Header{"X-Api-Key": {"k1"}}, Peer: "10.0.0.3"},
				"edge: [remote_address=10.0.0.3] [api_key=k1]", "api"},
			{"api write", Request{Method: "POST", Path: "/api/items", Header: http.Header{"X-Api-Key": {"k1"}}, Peer: "10.0.0.3"},
				"edge: [remote_address=10.0.0.3] [api_key=k1] [api_key=k1, method=write]", "api"},
			{"api without a key", Request{Method: "DELETE", Path: "/api/items", Peer: "10.0.0.3"},
				"edge: [remote_address=10.0.0.3]", "api"},
			{"tenant endpoint, query included", Request{Path: "/tenants/acme/reports?year=2025", Header: http.Header{"X-Tenant-Id": {"acme"}}, Peer: "10.0.0.4"},
				"edge: [remote_address=10.0.0.4] [tenant=acme] [tenant=acme, path=/tenants/acme/reports?year=2025]", "tenants"},
			{"search costs 5", Request{Path: "/search?q=x", Peer: "10.0.0.5"},
				"edge: [remote_address=10.0.0.5] [generic_key=search]x5", "search"},
			{"demo", Request{Path: "/demo", Peer: "10.0.0.6"}, "edge: [remote_address=10.0.0.6] [generic_key=demo]", "demo"},
		}
		for _, tt := range tests {
			got, route, err := p.RateLimitRequest(tt.req)
			if err != nil {
				t.Fatalf("%s: %s: %v", file, tt.name, err)
			}
			if describe(got) != tt.want || route != tt.wantRt {
				t.Errorf("%s: %s: route %q sends %s; want route %q sending %s", file, tt.name, route, describe(got), tt.wantRt, tt.want)
			}
		}
	}
}

func TestClientAddress(t *testing.T) {
	xff := http.Header{"X-Forwarded-For": {"198.51.100.1, 198.51.100.2, 198.51.100.3"}}
	tests := []struct {
		remote bool
		hops   uint32
		want   string
	}{
		{true, 0, "10.0.0.9"},      // nothing trusted in front: the peer, XFF ignored
		{true, 1, "198.51.100.3"},  // one trusted proxy: the entry it appended
		{true, 2, "198.51.100.2"},  // two trusted proxies
		{true, 4, "10.0.0.9"},      // fewer entries than trusted hops: the peer
		{false, 0, "198.51.100.3"}, // without use_remote_address: the last entry
		{false, 1, "198.51.100.2"},
	}
	for _, tt := range tests {
		p := proxyFor(t, "front-proxy-direct.yaml")
		p.cm.HCM.UseRemoteAddress.Value = tt.remote
		p.cm.HCM.XffNumTrustedHops = tt.hops
		if got := p.clientAddress(Request{Header: xff, Peer: "10.0.0.9"}); got != tt.want {
			t.Errorf("use_remote_address %v, xff_num_trusted_hops %d: client %s; want %s", tt.remote, tt.hops, got, tt.want)
		}
	}
}

// TestNegativeHits: a route's hits_addend with is_negative_hits (Envoy
// 1.38) makes its descriptor a refund of that many hits.
func TestNegativeHits(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "envoy", "front-proxy-direct.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	refunding := strings.Replace(string(data), "number: 5\n", "number: 5\n                                    is_negative_hits: true\n", 1)
	if refunding == string(data) {
		t.Fatal("the bootstrap's search route has no hits_addend of 5 to turn into a refund")
	}
	b, err := ParseBootstrap([]byte(refunding))
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewProxy(b)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := p.RateLimitRequest(Request{Path: "/search?q=x", Peer: "10.0.0.5"})
	if err != nil {
		t.Fatal(err)
	}
	d := got.GetDescriptors()
	if len(d) != 2 || d[0].GetIsNegativeHits() || !d[1].GetIsNegativeHits() || d[1].GetHitsAddend().GetValue() != 5 {
		t.Errorf("the search route with is_negative_hits sends %s, negative %v %v; want the search descriptor a refund of 5", describe(got), d[0].GetIsNegativeHits(), d[len(d)-1].GetIsNegativeHits())
	}
}

// A hits_addend format gives the number its substitution reads, and
// Envoy drops the descriptor when it reads none, or one out of [0, 1e9].
func TestFormatHits(t *testing.T) {
	req := Request{Header: http.Header{"X-Cost": {"12"}}, Metadata: map[string]string{"ns:used": "1200", "ns:bad": "x", "ns:huge": "1000000001"}}
	for _, tc := range []struct {
		format string
		n      uint64
		ok     bool
	}{
		{"%DYNAMIC_METADATA(ns:used)%", 1200, true},
		{"%REQ(x-cost)%", 12, true},
		{"%DYNAMIC_METADATA(ns:missing)%", 0, false},
		{"%DYNAMIC_METADATA(ns:bad)%", 0, false},
		{"%DYNAMIC_METADATA(ns:huge)%", 0, false},
	} {
		n, ok, err := formatHits(tc.format, req)
		if err != nil || n != tc.n || ok != tc.ok {
			t.Errorf("formatHits(%s) = %d, %v, %v; want %d, %v", tc.format, n, ok, err, tc.n, tc.ok)
		}
	}
	if _, _, err := formatHits("%FILTER_STATE(x)%", req); err == nil {
		t.Error("an unmodelled format: no error")
	}
}
