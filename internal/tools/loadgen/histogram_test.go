package loadgen

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBucketsAreContiguous(t *testing.T) {
	var prevHi uint64
	for i := range numBuckets {
		lo, hi := bucketBounds(i)
		if i > 0 && lo != prevHi+1 {
			t.Fatalf("bucket %d starts at %d; want %d (previous ends at %d)", i, lo, prevHi+1, prevHi)
		}
		if got := bucketOf(lo); got != i {
			t.Fatalf("bucketOf(%d) = %d; want %d", lo, got, i)
		}
		if got := bucketOf(hi); got != i {
			t.Fatalf("bucketOf(%d) = %d; want %d", hi, got, i)
		}
		if width := hi - lo + 1; lo >= 2*subCount && float64(width)/float64(lo) > 1.0/subCount {
			t.Fatalf("bucket %d [%d, %d] is wider than 1/%d of its start", i, lo, hi, subCount)
		}
		prevHi = hi
	}
	if prevHi != maxValue {
		t.Fatalf("last bucket ends at %d; want maxValue %d", prevHi, uint64(maxValue))
	}
}

// exactQuantile is the smallest sample with at least q of the samples at or
// below it, the definition Quantile approximates from above.
func exactQuantile(sorted []time.Duration, q float64) time.Duration {
	rank := int(float64(len(sorted))*q + 0.999999999)
	return sorted[max(rank, 1)-1]
}

func TestHistogramQuantiles(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	tests := []struct {
		name string
		draw func() time.Duration
	}{
		{"uniform 1µs-10ms", func() time.Duration { return time.Microsecond + time.Duration(r.Int64N(int64(10*time.Millisecond))) }},
		{"exponential mean 300µs", func() time.Duration { return time.Duration(r.ExpFloat64() * 300e3) }},
		{"small exact values", func() time.Duration { return time.Duration(r.IntN(200)) }},
		{"heavy tail", func() time.Duration {
			if r.IntN(100) == 0 {
				return time.Duration(200e6 + r.Int64N(50e6))
			}
			return time.Duration(50e3 + r.Int64N(50e3))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Histogram
			samples := make([]time.Duration, 20000)
			for i := range samples {
				samples[i] = tt.draw()
				h.Record(samples[i])
			}
			slices.Sort(samples)
			if h.Count() != uint64(len(samples)) {
				t.Fatalf("Count() = %d; want %d", h.Count(), len(samples))
			}
			if h.Min() != samples[0] || h.Max() != samples[len(samples)-1] {
				t.Fatalf("Min, Max = %v, %v; want %v, %v", h.Min(), h.Max(), samples[0], samples[len(samples)-1])
			}
			for _, q := range []float64{0.01, 0.5, 0.9, 0.99, 0.999} {
				got, want := h.Quantile(q), exactQuantile(samples, q)
				// Never below the true quantile, above it by at most one
				// bucket width (1/subCount).
				if got < want || float64(got-want) > float64(want)/subCount+1 {
					t.Errorf("Quantile(%v) = %v; want %v within +1/%d", q, got, want, subCount)
				}
			}
			if h.Quantile(0) != samples[0] || h.Quantile(1) != samples[len(samples)-1] {
				t.Errorf("Quantile(0), Quantile(1) = %v, %v; want min %v, max %v", h.Quantile(0), h.Quantile(1), samples[0], samples[len(samples)-1])
			}
		})
	}
}

func TestHistogramMergeEqualsOne(t *testing.T) {
	var all, a, b Histogram
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 5000 {
		d := time.Duration(r.Int64N(int64(time.Second)))
		all.Record(d)
		if i%3 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
	}
	var m Histogram
	m.Merge(&a)
	m.Merge(&b)
	m.Merge(new(Histogram)) // empty: no effect on min
	if m != all {
		t.Fatalf("merge of parts differs from recording all: count %d vs %d, min %v vs %v", m.Count(), all.Count(), m.Min(), all.Min())
	}
}

func TestHistogramEdges(t *testing.T) {
	var h Histogram
	if h.Quantile(0.5) != 0 || h.Max() != 0 || h.Mean() != 0 || h.CountAbove(0) != 0 {
		t.Fatalf("empty histogram: Quantile %v Max %v Mean %v CountAbove %d; want zeros", h.Quantile(0.5), h.Max(), h.Mean(), h.CountAbove(0))
	}
	h.Record(-5)        // counts as 0
	h.Record(time.Hour) // beyond maxValue: top bucket, exact max
	if h.Min() != 0 || h.Max() != time.Hour {
		t.Fatalf("Min, Max = %v, %v; want 0, 1h", h.Min(), h.Max())
	}
	if got := h.Quantile(0.99); got != time.Hour {
		t.Fatalf("Quantile(0.99) = %v; want 1h (clamped to Max)", got)
	}
	for _, d := range []time.Duration{50 * time.Millisecond, 150 * time.Millisecond, 250 * time.Millisecond} {
		h.Record(d)
	}
	if got := h.CountAbove(100 * time.Millisecond); got != 3 {
		t.Fatalf("CountAbove(100ms) = %d; want 3", got)
	}
	h.Reset()
	if h.Count() != 0 {
		t.Fatalf("after Reset, Count() = %d; want 0", h.Count())
	}
}

func BenchmarkHistogramRecord(b *testing.B) {
	var h Histogram
	b.ReportAllocs()
	for i := range b.N {
		h.Record(time.Duration(i&0xfffff) * 100)
	}
}
