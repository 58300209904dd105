package httplimit

import (
	"cmp"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
)

// Source gives a descriptor entry its value from a request; false when the
// request has none, which leaves the entry's descriptor out.
//
// It is called from every request's goroutine: a Source must be safe for
// concurrent use (the ones this package returns are).
type Source func(*http.Request) (string, bool)

// ClientIP is the address of the client, read from X-Forwarded-For only
// where the request came through trusted proxies: when the TCP peer is one
// of trusted, the header's entries are walked from the right, past every
// trusted proxy's own entry, and the first other address is the client's:
// the one the outermost trusted proxy appended. Entries further left were
// written by the client and are never used, and a peer that is not trusted
// is the client whatever header it sends. With no trusted proxies it is the
// peer's address.
func ClientIP(trusted ...netip.Prefix) Source {
	isTrusted := func(a netip.Addr) bool {
		a = a.Unmap()
		for _, p := range trusted {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	return func(r *http.Request) (string, bool) {
		peer, ok := peerAddr(r.RemoteAddr)
		if !ok {
			return "", false
		}
		client := peer
		if isTrusted(peer) {
			xff := r.Header.Values("X-Forwarded-For")
		walk:
			for i := len(xff) - 1; i >= 0; i-- {
				entries := strings.Split(xff[i], ",")
				for j := len(entries) - 1; j >= 0; j-- {
					a, err := netip.ParseAddr(strings.TrimSpace(entries[j]))
					if err != nil {
						break walk // not an address: nothing left of it can be trusted
					}
					client = a
					if !isTrusted(a) {
						break walk
					}
				}
			}
		}
		return client.Unmap().String(), true
	}
}

// peerAddr parses http.Request.RemoteAddr ("ip:port").
func peerAddr(remote string) (netip.Addr, bool) {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	a, err := netip.ParseAddr(host)
	return a, err == nil
}

// Header is the first value of request header name (an API key, a
// tenant); absent or empty, the request has none.
func Header(name string) Source {
	return func(r *http.Request) (string, bool) {
		v := r.Header.Get(name)
		return v, v != ""
	}
}

// Constant is always value: for a route-wide limit (Envoy's generic_key).
func Constant(value string) Source {
	return func(*http.Request) (string, bool) { return value, true }
}

// Path is the request's URL path (without the query).
func Path() Source {
	return func(r *http.Request) (string, bool) { return r.URL.Path, true }
}

// Method is the request's method.
func Method() Source {
	return func(r *http.Request) (string, bool) { return r.Method, true }
}

// FromContext is the string an earlier handler stored in the request's
// context under key: the authenticated user, say. A missing or empty value
// (an anonymous request) has none.
func FromContext(key any) Source {
	return func(r *http.Request) (string, bool) {
		v, _ := r.Context().Value(key).(string)
		return v, v != ""
	}
}

// RouteCost is a Cost: the cost of the longest path prefix in costs that
// the request's path starts with, or def.
// costs is read once, when RouteCost is called.
func RouteCost(costs map[string]uint64, def uint64) func(*http.Request) uint64 {
	// Longest first: the first prefix that matches is the longest (two
	// different prefixes of one length cannot both match a path).
	prefixes := slices.SortedFunc(maps.Keys(costs), func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	ordered := make([]uint64, len(prefixes))
	for i, p := range prefixes {
		ordered[i] = costs[p]
	}
	return func(r *http.Request) uint64 {
		for i, prefix := range prefixes {
			if strings.HasPrefix(r.URL.Path, prefix) {
				return ordered[i]
			}
		}
		return def
	}
}
