package loadgen

import (
	"slices"
	"testing"
)

func draw(t *testing.T, dist Distribution, keys, n int, seed, stream uint64) []int {
	t.Helper()
	k, err := NewKeyChooser(dist, keys, 1.1, seed, stream)
	if err != nil {
		t.Fatalf("NewKeyChooser(%q, %d) = %v", dist, keys, err)
	}
	out := make([]int, n)
	for i := range out {
		out[i] = k.Next()
		if out[i] < 0 || out[i] >= keys {
			t.Fatalf("Next() = %d; want in [0, %d)", out[i], keys)
		}
	}
	return out
}

func counts(keys int, draws []int) []int {
	c := make([]int, keys)
	for _, k := range draws {
		c[k]++
	}
	return c
}

func TestZipfIsSkewed(t *testing.T) {
	const keys = 1000
	c := counts(keys, draw(t, Zipf, keys, 100_000, 1, 0))
	top, median := c[0], c[keys/2]
	if top < 20*max(median, 1) {
		t.Fatalf("zipf: key 0 drawn %d times, median key %d times; want the top key far more often", top, median)
	}
	if slices.Max(c) != top {
		t.Fatalf("zipf: key 0 drawn %d times, but some key %d times; want key 0 the hottest", top, slices.Max(c))
	}
}

func TestUniformIsFlat(t *testing.T) {
	const keys, n = 100, 100_000
	c := counts(keys, draw(t, Uniform, keys, n, 1, 0))
	// Expect 1000 each, σ ≈ 31: ±30% is about 10σ.
	if lo, hi := slices.Min(c), slices.Max(c); lo < 700 || hi > 1300 {
		t.Fatalf("uniform over %d keys: counts range %d..%d; want all within 700..1300", keys, lo, hi)
	}
}

func TestKeyChoiceIsDeterministic(t *testing.T) {
	for _, dist := range []Distribution{Uniform, Zipf} {
		t.Run(string(dist), func(t *testing.T) {
			a := draw(t, dist, 1000, 500, 7, 3)
			b := draw(t, dist, 1000, 500, 7, 3)
			if !slices.Equal(a, b) {
				t.Fatalf("same seed and stream gave different sequences")
			}
			if slices.Equal(a, draw(t, dist, 1000, 500, 8, 3)) {
				t.Fatalf("seeds 7 and 8 gave the same sequence")
			}
			if slices.Equal(a, draw(t, dist, 1000, 500, 7, 4)) {
				t.Fatalf("streams 3 and 4 (two callers) gave the same sequence")
			}
		})
	}
}

func TestNewKeyChooserErrors(t *testing.T) {
	tests := []struct {
		name  string
		dist  Distribution
		keys  int
		zipfS float64
	}{
		{"no keys", Uniform, 0, 1.1},
		{"zipf exponent 1", Zipf, 10, 1},
		{"zipf exponent 0.5", Zipf, 10, 0.5},
		{"unknown dist", "normal", 10, 1.1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewKeyChooser(tt.dist, tt.keys, tt.zipfS, 1, 0); err == nil {
				t.Fatalf("NewKeyChooser(%q, %d, %v) = nil error; want one", tt.dist, tt.keys, tt.zipfS)
			}
		})
	}
}

func TestSingleKeyZipf(t *testing.T) {
	if c := counts(1, draw(t, Zipf, 1, 100, 1, 0)); c[0] != 100 {
		t.Fatalf("zipf over 1 key: key 0 drawn %d of 100 times", c[0])
	}
}
