// Package global owns the shared-store limiter: the Redis store (single
// node, Cluster, Sentinel) running embedded Lua scripts, and the embedded
// in-memory store running the same algorithms from pkg/algorithm. Both
// decide all limits of one request at once, all or nothing.
//
// It depends on pkg/algorithm and the Redis client only: not on the
// descriptor config, gRPC or metrics, which belong to the callers.
package global

import (
	"fmt"

	"github.com/sluicehq/sluice/pkg/algorithm"
)

// Item is one limit of a request; Result is its decision. Both are
// pkg/algorithm's plain values, safe to copy and to read from many
// goroutines.
type (
	Item   = algorithm.Item
	Result = algorithm.Result
)

// maxItems bounds the limits one request may carry to a store.
const maxItems = 64

// validate refuses items a store cannot decide: too many for one request,
// or an item whose Params do not validate (an unknown algorithm, say),
// which no store turns into another algorithm.
func validate(items []Item) error {
	if len(items) > maxItems {
		return ErrTooManyItems
	}
	for i := range items {
		if err := items[i].Params.Validate(); err != nil {
			return fmt.Errorf("item %d: %w", i, err)
		}
	}
	return nil
}
