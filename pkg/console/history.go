package console

import (
	"sync"
	"time"
)

// History counts events per second by result over a fixed span, from
// cumulative totals (Prometheus counters) sampled about once a second: a
// ring of one slot per second, so its memory is fixed whatever the
// traffic. It is safe for concurrent use.
type History struct {
	results []string
	mu      sync.Mutex
	slots   [][]float64 // per second of the span, the count per result
	stamps  []int64     // the Unix second each slot counts
	last    []float64   // the totals at the last sample
	lastAt  int64       // that sample's Unix second; 0 before the first
}

// NewHistory keeps the last seconds (at least 1) of counts for results.
func NewHistory(results []string, seconds int) *History {
	seconds = max(seconds, 1)
	h := &History{results: results, slots: make([][]float64, seconds), stamps: make([]int64, seconds)}
	for i := range h.slots {
		h.slots[i] = make([]float64, len(results))
	}
	return h
}

// Sample records totals, one per result in NewHistory's order, as read at
// now. What they grew by since the previous sample is counted in the
// seconds between the two, evenly (a sample late by a stall spreads its
// increase over the seconds it missed); a total that went down (a counter
// reset) counts from zero. The first sample only sets the baseline.
func (h *History) Sample(now time.Time, totals []float64) {
	sec := now.Unix()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lastAt != 0 && sec >= h.lastAt {
		// The increase belongs to the seconds after the last sample's,
		// or to its own when both fall in one second.
		gap := max(sec-h.lastAt, 1)
		span := min(gap, int64(len(h.slots)))
		for r := range min(len(h.results), len(totals)) {
			d := totals[r]
			if r < len(h.last) && totals[r] >= h.last[r] {
				d -= h.last[r]
			}
			if d == 0 {
				continue
			}
			each := d / float64(gap)
			for s := sec - span + 1; s <= sec; s++ {
				h.slot(s)[r] += each
			}
		}
	}
	// The first sample, or one from before the last (the clock stepped
	// back), sets the baseline only.
	h.last, h.lastAt = append(h.last[:0], totals...), sec
}

// slot is second s's counts, emptied first if it held an older second's;
// the caller holds mu.
func (h *History) slot(s int64) []float64 {
	i := int(s % int64(len(h.slots)))
	if h.stamps[i] != s {
		h.stamps[i] = s
		clear(h.slots[i])
	}
	return h.slots[i]
}

// Series is a History read at one moment: per result, the counts of each
// second of the span, oldest first, the last being the second that ends at
// End.
//
// A plain value, safe to share between goroutines.
type Series struct {
	End     time.Time `json:"end"`
	Results []string  `json:"results"`
	// Counts[r][i] is result r's count in second i.
	Counts [][]float64 `json:"counts"`
}

// Series returns the seconds up to the one before now (the current
// second is still being counted).
func (h *History) Series(now time.Time) Series {
	end := now.Unix() - 1
	n := len(h.slots)
	s := Series{End: time.Unix(end+1, 0), Results: h.results, Counts: make([][]float64, len(h.results))}
	for r := range s.Counts {
		s.Counts[r] = make([]float64, n)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range n {
		sec := end - int64(n-1-i)
		j := int(sec % int64(n))
		if sec < 0 || h.stamps[j] != sec {
			continue
		}
		for r := range s.Counts {
			s.Counts[r][i] = h.slots[j][r]
		}
	}
	return s
}
