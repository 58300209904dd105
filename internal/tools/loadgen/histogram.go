package loadgen

import (
	"math"
	"math/bits"
	"time"
)

// The histogram is log-linear (the HdrHistogram layout, kept small): values
// below 2·subCount nanoseconds have one bucket each, and every power of two
// above that is split into subCount equal buckets, so a bucket's width is at
// most 1/subCount of its lower bound: quantiles are known to within 0.8%.
const (
	subBits  = 7
	subCount = 1 << subBits // buckets per power of two
	// maxValue caps recorded values (~18 min, above any run's bound); larger
	// values land in the top bucket while Max stays exact.
	maxValue = 1<<40 - 1
	// numBuckets: the exact range, then one row per power of two up to 2^40.
	numBuckets = 2*subCount + (40-subBits-1)*subCount
)

// bucketOf returns the bucket index of v (0 ≤ v ≤ maxValue).
func bucketOf(v uint64) int {
	if v < 2*subCount {
		return int(v)
	}
	shift := bits.Len64(v) - (subBits + 1) // v>>shift is in [subCount, 2·subCount)
	return 2*subCount + (shift-1)*subCount + int(v>>shift) - subCount
}

// bucketBounds returns the smallest and largest value that bucket i holds.
func bucketBounds(i int) (lo, hi uint64) {
	if i < 2*subCount {
		return uint64(i), uint64(i)
	}
	shift := uint((i-2*subCount)/subCount + 1)
	m := uint64((i-2*subCount)%subCount + subCount)
	lo = m << shift
	return lo, lo + 1<<shift - 1
}

// Histogram counts durations (in nanoseconds) in log-linear buckets. The zero
// value is an empty histogram ready to use. It is not safe for concurrent
// use: each caller of a load run records into its own histogram and they are
// merged when the run ends, so the hot path takes no lock.
type Histogram struct {
	counts [numBuckets]uint64
	total  uint64
	min    int64
	max    int64
	sum    float64 // float: a long run's nanoseconds can overflow int64
}

// Record adds one observation. Negative durations count as zero.
func (h *Histogram) Record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	}
	if h.total == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.total++
	h.sum += float64(v)
	h.counts[bucketOf(uint64(min(v, maxValue)))]++
}

// Merge adds every observation of o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.total == 0 {
		return
	}
	if h.total == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.total += o.total
	h.sum += o.sum
	for i, c := range o.counts {
		h.counts[i] += c
	}
}

// Reset empties h.
func (h *Histogram) Reset() { *h = Histogram{} }

// Count returns the number of observations.
func (h *Histogram) Count() uint64 { return h.total }

// Min returns the smallest observation exactly (0 when empty).
func (h *Histogram) Min() time.Duration { return time.Duration(h.min) }

// Max returns the largest observation exactly (0 when empty).
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Mean returns the average observation (0 when empty).
func (h *Histogram) Mean() time.Duration {
	if h.total == 0 {
		return 0
	}
	return time.Duration(math.Round(h.sum / float64(h.total)))
}

// Quantile returns a value v such that at least a fraction q of the
// observations are ≤ v, reporting the top of the bucket the quantile falls in
// (so it errs high by at most the bucket width), clamped to [Min, Max].
// q ≤ 0 gives Min and q ≥ 1 gives Max; an empty histogram gives 0.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	if q <= 0 {
		return time.Duration(h.min)
	}
	if q >= 1 {
		return time.Duration(h.max)
	}
	rank := uint64(math.Ceil(q * float64(h.total)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			_, hi := bucketBounds(i)
			if i == numBuckets-1 {
				return time.Duration(h.max) // the top bucket also holds values past maxValue
			}
			return time.Duration(min(max(int64(hi), h.min), h.max))
		}
	}
	return time.Duration(h.max)
}

// CountAbove returns how many observations exceed d, to bucket precision:
// observations in the bucket holding d count only if that whole bucket is
// above d.
func (h *Histogram) CountAbove(d time.Duration) uint64 {
	if d < 0 {
		return h.total
	}
	v := uint64(min(int64(d), maxValue))
	var n uint64
	for i := bucketOf(v); i < numBuckets; i++ {
		if lo, _ := bucketBounds(i); lo > v {
			n += h.counts[i]
		}
	}
	return n
}
