package share

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

func TestAllot(t *testing.T) {
	cases := []struct {
		name                       string
		pool, mine, total, u, want float64
	}{
		{"loose: the pool covers Tightness intervals of demand", 80, 500, 1000, 0, -1},
		{"tight: a share in whole units", 10, 500, 1000, 0.99, 5},
		{"a fraction rounds up with its probability", 3, 500, 1000, 0.4, 2},
		{"and down otherwise", 3, 500, 1000, 0.6, 1},
		{"debt: nothing", -5, 500, 1000, 0, 0},
		{"no demand reported: no allowance", 0, 0, 0, 0, -1},
	}
	for _, c := range cases {
		if got := Allot(c.pool, c.mine, c.total, 0.01, c.u); got != c.want {
			t.Errorf("%s: Allot(pool %v, mine %v, total %v) = %v; want %v", c.name, c.pool, c.mine, c.total, got, c.want)
		}
	}
}

// TestTrackerSharesByDemand: on a tight key each sidecar's allowances
// follow its share of the demand the sidecars reported, in whole units on
// average; a key no sidecar floods gets none.
func TestTrackerSharesByDemand(t *testing.T) {
	tr, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	iv := 10 * time.Millisecond
	if g := tr.Allot("loose", Report{Sidecar: "a", Rate: 100, Interval: iv}, 1000, now); g != -1 {
		t.Fatalf("a key far from its limit got an allowance of %v", g)
	}
	rates := map[string]float64{"big": 800, "small-1": 100, "small-2": 100}
	sum := map[string]float64{}
	const rounds = 2000
	for range rounds {
		for _, id := range []string{"big", "small-1", "small-2"} {
			now = now.Add(iv / 3)
			sum[id] += tr.Allot("k", Report{Sidecar: id, Rate: rates[id], Interval: iv}, 10, now)
		}
	}
	for id, rate := range rates {
		want := 10 * rate / 1000
		if got := sum[id] / rounds; math.Abs(got-want) > 0.1*want {
			t.Errorf("%s: %.2f a round on average; want %.2f (its share of the demand)", id, got, want)
		}
	}
	// A sidecar that stopped reporting stops counting after a second.
	later := now.Add(2 * time.Second)
	if g := tr.Allot("k", Report{Sidecar: "small-1", Rate: 100, Interval: iv}, 1, later); g != 1 {
		t.Errorf("alone on the key after the others went quiet: %v; want the whole pool, 1", g)
	}
}

// TestTrackerBounds: reports outside the bounds get nothing and are not
// kept; a key keeps at most MaxSidecars reports, and the tracker at most
// MaxKeys keys.
func TestTrackerBounds(t *testing.T) {
	tr, err := New(Options{MaxKeys: 2, MaxSidecars: 3})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	iv := 10 * time.Millisecond
	for _, r := range []Report{
		{Sidecar: "", Rate: 1, Interval: iv},
		{Sidecar: strings.Repeat("x", MaxSidecarID+1), Rate: 1, Interval: iv},
		{Sidecar: "a", Rate: math.NaN(), Interval: iv},
		{Sidecar: "a", Rate: -1, Interval: iv},
		{Sidecar: "a", Rate: math.Inf(1), Interval: iv},
		{Sidecar: "a", Rate: 1, Interval: 0},
		{Sidecar: "a", Rate: 1, Interval: time.Hour},
	} {
		if g := tr.Allot("k", r, 0, now); g != -1 {
			t.Errorf("report %+v: allowance %v; want none", r, g)
		}
	}
	if tr.keys.Len() != 0 {
		t.Errorf("refused reports left %d keys", tr.keys.Len())
	}
	for i := range 10 {
		tr.Allot("k", Report{Sidecar: fmt.Sprint(i), Rate: 1, Interval: iv}, 0, now)
		tr.Allot(fmt.Sprint("other", i), Report{Sidecar: "a", Rate: 1, Interval: iv}, 0, now)
	}
	if tr.keys.Len() != 2 {
		t.Errorf("%d keys held; want MaxKeys 2", tr.keys.Len())
	}
	ks, _ := tr.keys.Peek("other9")
	if ks == nil || len(ks.reports) > 3 {
		t.Fatalf("the newest key lost or over its bound: %+v", ks)
	}
}

func TestNewRefusesNegativeBounds(t *testing.T) {
	if _, err := New(Options{MaxKeys: -1}); err == nil {
		t.Error("MaxKeys -1: no error")
	}
}
