package rlqs

import (
	"math"
	"testing"
	"time"
)

// TestGainMakesUpForWaste: ten Envoys asking 1.5 times a limit of 100 a
// second and admitting 80 of the 100 they are handed: the gain rises, in
// steps of at least gainStep, until their shares would admit the rate,
// never past gainMax, and their shares are the rate's tenth times it; a
// jump in their demand takes it back to 1 at once (a flood on grown
// shares would admit gainMax times the limit); and when they ask for
// less than the limit it stays 1.
func TestGainMakesUpForWaste(t *testing.T) {
	f := newFleet(10)
	lim := shape{rate: 100, burst: 100}
	now := time.Unix(1_700_000_000, 0)
	gain := func() float64 {
		if k := f.keys["k"]; k != nil {
			return k.gain.value()
		}
		return 1
	}
	// round reports every Envoy's last 5 s: asked for asked a second
	// each, admitting yield of the share in force, at most what it was
	// asked for, and splits the limit again as a report does, the answer
	// carrying the share where the split says so.
	round := func(asked, yield float64) {
		now = now.Add(ReportInterval)
		for id := range uint64(10) {
			held := 10.0 // a first report's: the limit's tenth
			if k := f.keys["k"]; k != nil && k.members[id+1] != nil {
				held = k.members[id+1].sent
			}
			if _, _, ok := f.observe("k", id+1, asked*5, min(asked, yield*held)*5, 5, lim, now, nil); !ok {
				t.Fatal("fleet full")
			}
			if sh, push := f.share("k", id+1, lim, now); push {
				f.sent("k", id+1, sh.Rate) // as its answer carries it
			}
		}
	}
	// They admit 0.8 of their shares: 8 of 10 at a gain of 1.
	last := 1.0
	for i := range 12 {
		round(15, 0.8)
		g := gain()
		if g != last && math.Abs(g-last) < gainStep*last*0.999 {
			t.Fatalf("round %d: gain moved from %.3f to %.3f; want steps of at least %.2f", i, last, g, gainStep)
		}
		if g > gainMax {
			t.Fatalf("round %d: gain %.3f; want at most %.1f", i, g, gainMax)
		}
		last = g
	}
	if g := gain(); g < 1.15 || g > 1.35 {
		t.Fatalf("after a minute admitting 0.8 of their shares: gain %.3f; want about 1.25", g)
	}
	if sh, _ := f.shareOf("k", 1); math.Abs(sh.Rate-10*gain()) > 1e-9 {
		t.Errorf("a share of %.3f; want the tenth of the rate times the gain, %.3f", sh.Rate, 10*gain())
	}
	// A jump in demand: back to 1 within the round of reports that
	// tells it.
	round(100, 1)
	if g := gain(); g != 1 {
		t.Fatalf("after the Envoys' demand jumped sevenfold: gain %.3f; want 1", g)
	}
	// Asked for less than the limit: the gain stays 1.
	for range 6 {
		round(5, 1)
	}
	if g := gain(); g != 1 {
		t.Errorf("asked for half the limit: gain %.3f; want 1", g)
	}
}
