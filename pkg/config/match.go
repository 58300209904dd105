package config

import (
	"slices"
	"strings"
)

// Config is a loaded, validated descriptor config. It is immutable after
// Load or Parse and safe for concurrent use; a reload builds a new one. The
// zero value and a nil *Config match nothing, but neither is ever returned.
type Config struct {
	domains map[string]*level
	trees   []*domainTree // sorted by domain: the order of Domains, Limits and JSON
	names   []string
	limits  []*Limit
	byPath  map[string]*Limit
	version string
}

// domainTree is one file's domain as written, for Limits and MarshalJSON.
type domainTree struct {
	name  string
	file  string
	line  int
	root  level
	nodes []*node // top-level descriptors in file order
}

// node is one configured descriptor.
type node struct {
	key, value string
	line       int
	limit      *Limit // nil for a placeholder with only nested descriptors
	literal    int    // non-'*' bytes of a wildcard value: its specificity
	children   level
	ordered    []*node // children in file order
}

// level is one list of sibling descriptors, indexed three ways for the three
// kinds of match, in the order Match tries them.
type level struct {
	exact map[Entry]*node     // value without '*'
	byKey map[string]*byValue // wildcard values and the key-only entry
}

type byValue struct {
	wildcards []*node // most specific first, then file order
	keyOnly   *node
}

// add indexes n. Its caller has already rejected a sibling with the same
// key and value, and calls sortWildcards once the level is complete.
func (lv *level) add(n *node) {
	if n.value != "" && !strings.Contains(n.value, "*") {
		if lv.exact == nil {
			lv.exact = make(map[Entry]*node)
		}
		lv.exact[Entry{n.key, n.value}] = n
		return
	}
	if lv.byKey == nil {
		lv.byKey = make(map[string]*byValue)
	}
	bv := lv.byKey[n.key]
	if bv == nil {
		bv = &byValue{}
		lv.byKey[n.key] = bv
	}
	if n.value == "" {
		bv.keyOnly = n
		return
	}
	n.literal = len(n.value) - strings.Count(n.value, "*")
	bv.wildcards = append(bv.wildcards, n)
}

// sortWildcards puts the most specific patterns first. The sort is stable,
// so equally specific patterns keep their order in the file.
func (lv *level) sortWildcards() {
	for _, bv := range lv.byKey {
		slices.SortStableFunc(bv.wildcards, func(a, b *node) int { return b.literal - a.literal })
	}
}

// find selects the descriptor for one entry: exact value, else the most
// specific matching wildcard, else key-only.
func (lv *level) find(e Entry) *node {
	if n := lv.exact[e]; n != nil {
		return n
	}
	bv := lv.byKey[e.Key]
	if bv == nil {
		return nil
	}
	for _, w := range bv.wildcards {
		if glob(w.value, e.Value) {
			return w
		}
	}
	return bv.keyOnly
}

// Match returns the limit that the descriptor entries select in domain, or
// nil when the domain is unknown, entries is empty, or the walk does not end
// on a descriptor with a rate_limit (see the package documentation). It does
// not allocate. The returned Limit is shared: do not modify it.
func (c *Config) Match(domain string, entries []Entry) *Limit {
	if c == nil || len(entries) == 0 {
		return nil
	}
	lv := c.domains[domain]
	if lv == nil {
		return nil
	}
	for i, e := range entries {
		n := lv.find(e)
		if n == nil {
			return nil
		}
		if i == len(entries)-1 {
			return n.limit
		}
		lv = &n.children
	}
	return nil
}

// glob reports whether s matches pattern, in which each '*' matches any run
// of bytes, including an empty one. The text before the first star must
// start s and the text after the last must end it; the pieces between are
// found in order, each at its leftmost place, which never loses a match
// when '*' is the only operator. It runs in time linear in len(s) (one
// pass per piece, with strings.Index) and never allocates, so a value of
// any length is matched on what it holds.
func glob(pattern, s string) bool {
	head, rest, found := strings.Cut(pattern, "*")
	if !found {
		return pattern == s
	}
	if !strings.HasPrefix(s, head) {
		return false
	}
	s = s[len(head):]
	tail := rest
	if i := strings.LastIndexByte(rest, '*'); i >= 0 {
		tail, rest = rest[i+1:], rest[:i]
	} else {
		rest = ""
	}
	if !strings.HasSuffix(s, tail) {
		return false
	}
	s = s[:len(s)-len(tail)]
	for rest != "" {
		var piece string
		piece, rest, _ = strings.Cut(rest, "*")
		if piece == "" {
			continue
		}
		i := strings.Index(s, piece)
		if i < 0 {
			return false
		}
		s = s[i+len(piece):]
	}
	return true
}

// LimitAt returns domain's limit whose Path is path, or nil when there is
// none: a limit found by the path another process matched it under (a
// sidecar recording hits). It does not allocate.
func (c *Config) LimitAt(domain, path string) *Limit {
	if c == nil {
		return nil
	}
	if l := c.byPath[path]; l != nil && l.Domain == domain {
		return l
	}
	return nil
}

// Domains returns the configured domains, sorted.
func (c *Config) Domains() []string {
	if c == nil {
		return nil
	}
	return slices.Clone(c.names)
}

// HasDomain reports whether domain is configured. It does not allocate.
func (c *Config) HasDomain(domain string) bool {
	return c != nil && c.domains[domain] != nil
}

// Version returns a short hex digest (16 digits) of the files' names and
// contents: equal inputs give equal versions, so replicas and reloads can be
// compared. Load digests names relative to the loaded directory, so the same
// files mounted at different paths have the same version.
func (c *Config) Version() string {
	if c == nil {
		return ""
	}
	return c.version
}

// Limits returns every limit, ordered by domain and then depth-first in file
// order. The Limits are shared: do not modify them.
func (c *Config) Limits() []*Limit {
	if c == nil {
		return nil
	}
	return slices.Clone(c.limits)
}
