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
// Memory is bounded by Options.MaxKeys whatever the number of distinct keys.
// A bucket that has refilled to full is indistinguishable from a key never seen,
// so its slot is reused first, which changes no answer. Only when no full bucket
// is found is a recently unused bucket evicted (see Options); a key evicted that
// way comes back with a full bucket, so eviction only ever errs towards
// admitting, never towards rejecting.
//
// The package depends on the standard library only: no store, no gRPC, no
// configuration, no metrics. Callers map their own limits to a Limit.
package localbucket
