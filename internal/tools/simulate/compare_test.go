package simulate

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/algorithm"
)

func TestCompareSameAlgorithmAgrees(t *testing.T) {
	cfg := parseConfig(t, threePer10s)
	trace, err := Generate(Pattern{Kind: Many, Duration: time.Minute, Rate: 0.5, Clients: 50, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, alg := range []algorithm.Kind{algorithm.TokenBucket, algorithm.GCRA, algorithm.SlidingWindow, algorithm.FixedWindow, algorithm.SlidingLog} {
		a, _, c, err := RunBoth(cfg, trace, Options{Domain: "test"}, Override(alg), Override(alg))
		if err != nil {
			t.Fatal(err)
		}
		if a.Limits[0].Rejected == 0 {
			t.Fatalf("%s rejected nothing: the trace does not test the limit", alg)
		}
		if c.Total.Offered != int64(len(trace)) || c.Total.OnlyA != 0 || c.Total.OnlyB != 0 {
			t.Errorf("%s against itself: %+v; want %d offered, no disagreement", alg, c.Total, len(trace))
		}
	}
}

func TestCompareCounts(t *testing.T) {
	cfg := parseConfig(t, threePer10s)
	// Hand-computed in TestRunKnownTraces: of six requests across the
	// boundary at 10 s, fixed_window admits all, sliding_log the first 3.
	trace := at(9.7, 9.8, 9.9, 10.0, 10.1, 10.2)
	_, _, c, err := RunBoth(cfg, trace, Options{Domain: "test"}, Override(algorithm.FixedWindow), Override(algorithm.SlidingLog))
	if err != nil {
		t.Fatal(err)
	}
	want := LimitComparison{Path: "test.remote_address", Offered: 6, OnlyA: 3, OnlyB: 0, OnlyAPercent: 50, OnlyBPercent: 0}
	if len(c.Limits) != 1 || c.Limits[0] != want {
		t.Fatalf("limits %+v; want [%+v]", c.Limits, want)
	}
	if want.Path = "total"; c.Total != want || c.A != "fixed_window" || c.B != "sliding_log" {
		t.Errorf("%s vs %s total %+v; want fixed_window vs sliding_log %+v", c.A, c.B, c.Total, want)
	}
	// The reverse order swaps the columns.
	_, _, c, _ = RunBoth(cfg, trace, Options{Domain: "test"}, Override(algorithm.SlidingLog), Override(algorithm.FixedWindow))
	if c.Total.OnlyA != 0 || c.Total.OnlyB != 3 {
		t.Errorf("reversed: only A %d, only B %d; want 0, 3", c.Total.OnlyA, c.Total.OnlyB)
	}
}

func TestCompareBoundaryPattern(t *testing.T) {
	cfg := parseConfig(t, threePer10s)
	trace, err := Generate(Pattern{Kind: Boundary, Duration: time.Minute, Limit: 3, Window: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	sw, fw, c, err := RunBoth(cfg, trace, Options{Domain: "test"}, Override(algorithm.SlidingWindow), Override(algorithm.FixedWindow))
	if err != nil {
		t.Fatal(err)
	}
	// Three attacks of 3 + 3: the fixed window takes all 18, twice its
	// limit around each boundary; the sliding window's estimate holds it
	// to 3 a window.
	if fw.Limits[0].Admitted != 18 || fw.Limits[0].WorstWindow != 6 {
		t.Errorf("fixed_window admitted %d, worst window %d; want 18, 6", fw.Limits[0].Admitted, fw.Limits[0].WorstWindow)
	}
	if sw.Limits[0].WorstWindow != 3 {
		t.Errorf("sliding_window worst window %d; want 3", sw.Limits[0].WorstWindow)
	}
	if c.Total.OnlyB != 9 || c.Total.OnlyA != 0 {
		t.Errorf("only sliding_window %d, only fixed_window %d; want 0, 9", c.Total.OnlyA, c.Total.OnlyB)
	}
}

func TestCompareRefusesDifferentTraces(t *testing.T) {
	cfg := parseConfig(t, threePer10s)
	a, _ := Run(cfg, at(1, 2, 3), Options{Domain: "test"})
	b, _ := Run(cfg, at(1, 2, 4), Options{Domain: "test"})
	if _, err := Compare(a, b); err == nil || !strings.Contains(err.Error(), "different traces") {
		t.Errorf("Compare of two traces = %v; want an error", err)
	}
}
