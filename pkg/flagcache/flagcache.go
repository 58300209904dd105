// Package flagcache is pkg/cache's name before it, kept for one release.
//
// Deprecated: import github.com/sluicehq/sluice/pkg/cache; this package
// goes in the next release.
package flagcache

import "github.com/sluicehq/sluice/pkg/cache"

// OverLimit is cache.OverLimit. Safe for concurrent use, as it is.
//
// Deprecated: use cache.OverLimit.
type OverLimit = cache.OverLimit

// DefaultSize and KeyOverhead are cache's.
//
// Deprecated: use cache.DefaultSize and cache.KeyOverhead.
const (
	DefaultSize = cache.DefaultSize
	KeyOverhead = cache.KeyOverhead
)

// New is cache.New.
//
// Deprecated: use cache.New.
func New(size int) (*OverLimit, error) { return cache.New(size) }
