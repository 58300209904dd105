package console

import (
	"slices"
	"testing"
	"time"
)

func TestHistory(t *testing.T) {
	at := func(sec int64) time.Time { return time.Unix(1_000_000+sec, 0) }
	type sample struct {
		sec    int64
		totals []float64
	}
	tests := []struct {
		name    string
		samples []sample
		readAt  int64
		want    [][]float64 // per result, the last 4 seconds
	}{
		{"the first sample is a baseline", []sample{{0, []float64{100, 7}}}, 1,
			[][]float64{{0, 0, 0, 0}, {0, 0, 0, 0}}},
		{"one second's increase", []sample{{0, []float64{100, 7}}, {1, []float64{105, 9}}}, 2,
			[][]float64{{0, 0, 0, 5}, {0, 0, 0, 2}}},
		{"a late sample spreads over the seconds it missed", []sample{{0, []float64{0, 0}}, {3, []float64{9, 3}}}, 4,
			[][]float64{{0, 3, 3, 3}, {0, 1, 1, 1}}},
		{"two samples in one second add up", []sample{{0, []float64{0, 0}}, {1, []float64{2, 0}}, {1, []float64{5, 1}}}, 2,
			[][]float64{{0, 0, 0, 5}, {0, 0, 0, 1}}},
		{"a counter reset counts from zero", []sample{{0, []float64{50, 5}}, {1, []float64{3, 6}}}, 2,
			[][]float64{{0, 0, 0, 3}, {0, 0, 0, 1}}},
		{"the current second is not shown yet", []sample{{0, []float64{0, 0}}, {1, []float64{4, 0}}}, 1,
			[][]float64{{0, 0, 0, 0}, {0, 0, 0, 0}}},
		{"seconds older than the span are gone", []sample{{0, []float64{0, 0}}, {1, []float64{4, 0}}, {8, []float64{4, 0}}}, 9,
			[][]float64{{0, 0, 0, 0}, {0, 0, 0, 0}}},
		{"a clock stepped back sets a new baseline", []sample{{5, []float64{0, 0}}, {2, []float64{10, 0}}, {3, []float64{11, 0}}}, 4,
			[][]float64{{0, 0, 0, 1}, {0, 0, 0, 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := NewHistory([]string{"ok", "over_limit"}, 4)
			for _, s := range tt.samples {
				h.Sample(at(s.sec), s.totals)
			}
			got := h.Series(at(tt.readAt))
			if !got.End.Equal(at(tt.readAt)) {
				t.Errorf("End %v; want %v", got.End, at(tt.readAt))
			}
			for r := range tt.want {
				if !slices.Equal(got.Counts[r], tt.want[r]) {
					t.Errorf("%s: %v; want %v", got.Results[r], got.Counts[r], tt.want[r])
				}
			}
		})
	}
}

// TestHistoryFixedMemory: a day of samples leaves the ring its size.
func TestHistoryFixedMemory(t *testing.T) {
	h := NewHistory([]string{"ok"}, 300)
	for s := range int64(86_400) {
		h.Sample(time.Unix(s+1, 0), []float64{float64(s)})
	}
	if len(h.slots) != 300 || len(h.stamps) != 300 {
		t.Fatalf("%d slots", len(h.slots))
	}
	series := h.Series(time.Unix(86_401, 0))
	for i, n := range series.Counts[0] {
		if n != 1 {
			t.Fatalf("second %d counts %v; want 1", i, n)
		}
	}
}
