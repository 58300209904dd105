package config

import (
	"slices"
	"strings"
)

// MaxBucketEntries bounds the entries of a bucket BucketEntries reads:
// as many as a request's descriptor may have (limiter.MaxEntries).
const MaxBucketEntries = 16

// BucketEntries reads an unordered set of entries (the bucket id of
// Envoy's rate limit quota filter, whose entries come as a map) as a
// descriptor of domain and returns the entries in that order and the
// limit they select (nil when none: an unknown domain, an entry the walk
// cannot place, a path that ends on no rate_limit).
//
// The order is the config's: starting at the domain's descriptors, at each
// level the first descriptor in the file whose key the bucket has and
// whose value matches the bucket's (exactly, by wildcard or key-only, as
// Match prefers them) takes that entry, and the walk goes on among its
// nested descriptors until every entry is placed. So a bucket
// {tenant: acme, name: api} under
//
//   - key: name
//     value: api
//     descriptors:
//   - key: tenant
//     rate_limit: ...
//
// is the descriptor [(name, api), (tenant, acme)] and counts on the same
// limit and key as a ShouldRateLimit request carrying that descriptor.
func (c *Config) BucketEntries(domain string, bucket map[string]string) ([]Entry, *Limit) {
	if c == nil || len(bucket) == 0 || len(bucket) > MaxBucketEntries {
		return nil, nil
	}
	i, found := slices.BinarySearchFunc(c.trees, domain, func(t *domainTree, d string) int { return strings.Compare(t.name, d) })
	if !found {
		return nil, nil
	}
	lv, nodes := &c.trees[i].root, c.trees[i].nodes
	entries := make([]Entry, 0, len(bucket))
	var last *node
	for len(entries) < len(bucket) {
		var next *node
		for _, n := range nodes {
			v, ok := bucket[n.key]
			if !ok || placed(entries, n.key) {
				continue
			}
			if next = lv.find(Entry{n.key, v}); next != nil {
				entries = append(entries, Entry{n.key, v})
				break
			}
		}
		if next == nil {
			return nil, nil // an entry no descriptor here takes
		}
		last, lv, nodes = next, &next.children, next.ordered
	}
	return entries, last.limit
}

// placed reports whether entries has key.
func placed(entries []Entry, key string) bool {
	for _, e := range entries {
		if e.Key == key {
			return true
		}
	}
	return false
}
