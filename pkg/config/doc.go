// Package config owns the descriptor config: the envoyproxy/ratelimit YAML
// format (domain, descriptors, key, value, rate_limit, shadow_mode,
// detailed_metric, replaces, quota_mode, share_threshold, value_to_metric,
// metadata, nested descriptors) plus sluice's extensions under rate_limit
// (algorithm, burst, unit_multiplier, count_refused, calendar), so that an existing
// file loads as is, except for the few constructs listed under "Differences
// from the reference" below.
//
// It loads and validates files into an immutable *Config and answers one
// question on the request path: which configured limit does this descriptor
// match (Config.Match)? It must not depend on the store, the limiter, gRPC,
// metrics or logging: it is a pure function of the files, so it can be fuzzed,
// loaded by a `check` command and swapped atomically on reload by its caller.
//
// # Matching
//
// The reference implementation (envoyproxy/ratelimit, src/config/config_impl.go
// GetLimit) walks the request's entries from the domain's top level; sluice
// keeps its rules exactly, with wildcards generalised:
//
//   - At each level the entry (key, value) selects one configured descriptor
//     with the same key: a descriptor whose value equals the entry's value,
//     else a descriptor whose value is a wildcard pattern matching it, else the
//     key-only descriptor (no value). There is no backtracking: once a
//     descriptor is selected, a dead end below it means no match, as in the
//     reference.
//   - A value containing `*` is a glob: each `*` matches any run of bytes,
//     including none, anywhere in the value (the reference supports only a
//     trailing `*`, which means the same thing here). There is no escape for a
//     literal `*`. When several patterns match, the one with the most literal
//     (non-`*`) bytes wins; ties go to the pattern written first in the file.
//   - The request's last entry must land on a descriptor that has a
//     rate_limit. A rate_limit half way down the tree does not apply to a
//     longer request, and a request that ends above a rate_limit matches
//     nothing (the README's "Example 4").
//
// # Paths
//
// Limit.Path is the reference's stats key for the configured node: the domain,
// then for each level "." and the key, followed by "_" and the value when the
// descriptor has one (the pattern itself for wildcards), e.g.
// "edge.remote_address.path_/api/*". Because "_" and "." may occur inside keys
// and values the form is ambiguous in general, so Parse rejects a config in
// which two limits would share a Path: within one Config a Path identifies one
// limit.
//
// # Differences from the reference
//
// Parse is stricter than envoyproxy/ratelimit where the reference would
// silently do something surprising, and says so with file and line:
//
//   - unlimited: true refuses requests_per_unit and the extensions, not only
//     a unit.
//   - share_threshold on a value without a wildcard is refused (it shares
//     nothing there).
//   - A second YAML document in a file is refused (yaml.v2 ignores it).
//   - A `*` inside a value is a wildcard (the reference matches it
//     literally), and among matching patterns the most specific wins (the
//     reference takes the first listed).
//   - Domains are never merged (the reference's MERGE_DOMAIN_CONFIG).
//   - A calendar zone must be named: "Local" (the process's own zone) is
//     refused.
//
// # Bounds
//
// A config is bounded before it is expanded, however it arrives (bounds.go):
// LoadWith refuses a file over SizeBounds.MaxFileBytes and a directory
// over MaxTotalBytes or MaxFiles before reading them; the walk charges
// every YAML node of all the files together, aliases expanded, to
// MaxNodes, nests at most MaxDepth deep and reads no string longer than
// MaxScalarBytes; a calendar zone is at most MaxZoneBytes. Errors quote at
// most MaxQuotedBytes of any config string (Quote), and one Parse reports
// at most 10 errors, so that an error fits in a log line, a NACK and
// /readyz. Sources that hold configs as data (xDS) check the same bounds
// on their own form before building a Document.
package config
