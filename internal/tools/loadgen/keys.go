package loadgen

import (
	"fmt"
	"math/rand/v2"
)

// Distribution names how key indexes are drawn.
type Distribution string

const (
	// Uniform draws every key index in [0, keys) equally often.
	Uniform Distribution = "uniform"
	// Zipf draws index k with probability proportional to (1+k)^-s, so
	// index 0 is the hottest key: a few clients sending most of the traffic.
	Zipf Distribution = "zipf"
)

// KeyChooser draws key indexes. It is deterministic for a given seed and
// stream, and not safe for concurrent use: each caller owns one, seeded with
// the run's seed and its own caller number as the stream.
type KeyChooser struct {
	r    *rand.Rand
	zipf *rand.Zipf // nil for Uniform
	n    int
}

// NewKeyChooser returns a chooser over keys indexes (keys ≥ 1). zipfS is the
// Zipf exponent, which must be > 1 (math/rand/v2's Zipf); it is ignored for
// Uniform.
func NewKeyChooser(dist Distribution, keys int, zipfS float64, seed, stream uint64) (*KeyChooser, error) {
	if keys < 1 {
		return nil, fmt.Errorf("key space %d: need at least 1 key", keys)
	}
	k := &KeyChooser{r: rand.New(rand.NewPCG(seed, stream)), n: keys}
	switch dist {
	case Uniform:
	case Zipf:
		if !(zipfS > 1) {
			return nil, fmt.Errorf("zipf exponent %v: must be > 1", zipfS)
		}
		k.zipf = rand.NewZipf(k.r, zipfS, 1, uint64(keys-1))
	default:
		return nil, fmt.Errorf("key distribution %q: want %q or %q", dist, Uniform, Zipf)
	}
	return k, nil
}

// Next returns the next key index, in [0, keys).
func (k *KeyChooser) Next() int {
	if k.zipf != nil {
		return int(k.zipf.Uint64())
	}
	return k.r.IntN(k.n)
}
