// Package localbucket owns in-process token buckets keyed by string, for many
// keys: a bounded, sharded set of buckets that answers "may key K spend n
// tokens now?" in tens of nanoseconds without allocating. The sluice sidecar
// uses it as the coarse local pass in front of the global limit; any Go program
// can use it on its own.
//
// Each bucket follows the model of golang.org/x/time/rate: it holds up to Burst
// tokens and refills at Rate tokens per second, lazily, when it is next asked —
// there is no ticker and no goroutine. Time is passed in (AllowN) or read from
// the monotonic clock (Allow), and is kept as nanoseconds since an instant taken
// in New, so a wall-clock jump changes nothing; a clock that goes backwards hands
// out no tokens.
//
// Memory is bounded by Options.MaxKeys whatever the number of distinct keys,
// each key costing at most KeyOverhead bytes plus its own: 184.5 MB at
// DefaultMaxKeys with the daemons' 41-byte keys. A bucket that has refilled
// to full is indistinguishable from a key never seen, so its slot is reused
// first, which changes no answer, and Sweep, called by the owner on a timer,
// drops every full bucket and gives a shard's memory back once few keys are
// left in it. Only when no full bucket is found is a recently unused bucket
// evicted (see Options); a key evicted that way comes back with a full
// bucket, so eviction only ever errs towards admitting, never towards
// rejecting.
//
// Why a bucket of its own and not pkg/algorithm's token bucket, which decides
// the global limit: that one is the twin of a Lua script, so it counts in
// whole tokens and integer microseconds (the store's clock) and carries what
// only a shared store needs (debt under Force, integer Remaining). The
// sidecar's bucket holds a share of a limit spread over many proxies, which
// is fractional (100/s over 7 proxies is 14.28…/s and a burst of 14.28…
// tokens), runs on the process's monotonic clock in nanoseconds, and gives
// tokens back (ReturnN) when the global answer overrides the local one.
// Folding the two together would put floats into the Lua twin or whole
// numbers into the share; both would change answers.
//
// The package depends on the standard library only: no store, no gRPC, no
// configuration, no metrics. Callers map their own limits to a Limit.
package localbucket
