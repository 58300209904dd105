package rlqs

import (
	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// records is a limiter.Request recording the allowed counts of a report's
// buckets: one descriptor each, its entries in the config's order
// (config.BucketEntries), its cost the count.
type records struct {
	domain  string
	entries [][]config.Entry
	costs   []uint64
}

func (r *records) add(entries []config.Entry, cost uint64) {
	r.entries = append(r.entries, entries)
	r.costs = append(r.costs, cost)
}

func (r *records) Domain() string    { return r.domain }
func (r *records) Cost() uint32      { return 1 }
func (r *records) Len() int          { return len(r.entries) }
func (r *records) Entries(i int) int { return len(r.entries[i]) }
func (r *records) Entry(i, j int) (string, string) {
	e := r.entries[i][j]
	return e.Key, e.Value
}
func (r *records) DescriptorCost(i int) (uint64, bool)   { return r.costs[i], true }
func (r *records) Override(int) (limiter.Override, bool) { return limiter.Override{}, false }
func (r *records) Refund(int) bool                       { return false }
