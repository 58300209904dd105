package global

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pkg/algorithm"
)

// Leases are concurrency slots on a store, for callers that can release
// them (pkg/httplimit.Concurrency): each key is a concurrency limit
// (algorithm.Concurrency), each lease one unit of it held by the lease's
// id until it is released or its TTL passes, so that a holder that dies
// without releasing frees its slot within the TTL (Stripe's
// concurrent-request limiter, Kuadrant's reserve/commit). The limits
// Envoy's in-flight descriptors count are the same: one rule, in Go for
// the memory store and in Lua for Redis, under the differential tests.
// Acquiring and releasing are each one atomic step, on the store's clock.
//
// A key's TTL is its limit's: give one key one TTL (a lease taken with a
// shorter one can set the key to expire before a longer one held).
//
// It is safe for concurrent use when its store is (Memory and Redis are).
type Leases struct {
	store leaseStore
}

// leaseStore is what Leases needs of a store: Memory, Redis.
type leaseStore interface {
	Decide(ctx context.Context, items []Item, out []Result) error
}

// NewLeases keeps leases on store: a Memory store (one process; it
// forgets the slots of a key not used lately when full, so size its
// MaxKeys and MaxBytes above the keys held at once) or a Redis store
// (shared by every replica).
func NewLeases(store leaseStore) *Leases { return &Leases{store: store} }

// Acquire takes a slot of key for lease id, if fewer than limit are held:
// it reports whether it did, how many are held, and when full how long
// until the first lease expires. A key holds at most
// algorithm.MaxConcurrencyLimit slots; an id is at most
// algorithm.MaxHolderLen bytes, without NUL.
func (l *Leases) Acquire(ctx context.Context, key, id string, limit int64, ttl time.Duration) (bool, int64, time.Duration, error) {
	r, err := l.decide(ctx, key, id, limit, ttl, algorithm.Take)
	if err != nil {
		return false, 0, 0, err
	}
	return r.Allowed, limit - r.Remaining, time.Duration(r.RetryAfter) * time.Microsecond, nil
}

// Release gives lease id's slot of key back: nothing if it expired (or
// was never taken). limit and ttl are the key's, as acquired.
func (l *Leases) Release(ctx context.Context, key, id string, limit int64, ttl time.Duration) error {
	_, err := l.decide(ctx, key, id, limit, ttl, algorithm.GiveBack)
	return err
}

func (l *Leases) decide(ctx context.Context, key, id string, limit int64, ttl time.Duration, mode algorithm.Mode) (Result, error) {
	if key == "" {
		return Result{}, errors.New("lease: empty key")
	}
	p := algorithm.Params{Kind: algorithm.Concurrency, Limit: limit, Window: ttl.Microseconds(), Holder: id}
	if err := p.Validate(); err != nil {
		return Result{}, fmt.Errorf("lease: %w", err)
	}
	items := []Item{{Key: key, Params: p, Cost: 1, Mode: mode}}
	var out [1]Result
	if err := l.store.Decide(ctx, items, out[:]); err != nil {
		return Result{}, err
	}
	return out[0], nil
}
