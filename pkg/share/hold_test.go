package share

import (
	"testing"
	"time"
)

// TestLooseHold: a sidecar that says it may hold a loose key's hits gets
// its demand's share of HoldShare of the pool, rounded down, and none
// when the key is tight, its pool covers less than HoldMargin times the
// demand over the hold, or it does not say; once the key turns tight,
// another sidecar's allowance leaves out the hold while it may run, and
// counts it no longer after.
func TestLooseHold(t *testing.T) {
	tr, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	iv := 10 * time.Millisecond
	a := backed(Report{Sidecar: "a", Rate: 100, Interval: iv, Hold: 2 * time.Second})
	b := backed(Report{Sidecar: "b", Rate: 100, Interval: iv, Hold: 2 * time.Second})

	if g, h := tr.AllotHold("k", a, 1600, Limit{}, now); g != -1 || h != 100 {
		t.Fatalf("alone, 1600 left: allowance %v, hold %v; want -1, 100 (1600/16)", g, h)
	}
	if g, h := tr.AllotHold("k", b, 1601, Limit{}, now); g != -1 || h != 50 {
		t.Fatalf("b beside a, 1601 left: allowance %v, hold %v; want -1, 50 (half of 1601/16, rounded down)", g, h)
	}
	noHold := a
	noHold.Hold = 0
	if g, h := tr.AllotHold("other", noHold, 1600, Limit{}, now); g != -1 || h != 0 {
		t.Errorf("a sidecar that holds nothing: allowance %v, hold %v; want -1, 0", g, h)
	}
	if g, h := tr.AllotHold("drained", a, 399, Limit{}, now); g != -1 || h != 0 {
		t.Errorf("a pool under twice the demand over the hold (400): allowance %v, hold %v; want -1, 0", g, h)
	}
	tooLong := a
	tooLong.Hold = MaxHold + time.Second
	if g, h := tr.AllotHold("other", tooLong, 1600, Limit{}, now); g != -1 || h != 0 {
		t.Errorf("a hold past MaxHold: allowance %v, hold %v; want -1, 0 (refused)", g, h)
	}

	// The key turns tight (5 left, under 8 intervals of their demand):
	// a's hold of 100 may still run unrecorded, so b gets nothing of 5.
	at := now.Add(time.Second)
	if g, h := tr.AllotHold("k", b, 5, Limit{}, at); g != 0 || h != 0 {
		t.Errorf("tight, a's hold running: allowance %v, hold %v; want 0, 0", g, h)
	}
	// After a's hold has run out (2 s and its interval), b is alone.
	at = now.Add(2*time.Second + 2*iv)
	if g, h := tr.AllotHold("k", b, 5, Limit{}, at); g != 5 || h != 0 {
		t.Errorf("tight, a's hold run out: allowance %v, hold %v; want 5, 0", g, h)
	}
}
