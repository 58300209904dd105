package algorithm

import (
	"math/rand/v2"
	"testing"
)

// allKinds are the algorithms at a limit of 10 a minute (burst 10).
func allKinds() []Params {
	var ps []Params
	for k := range numKinds {
		p := Params{Kind: Kind(k), Limit: 10, Window: 60 * sec}
		if kinds[k].hasBurst {
			p.Burst = 10
		}
		ps = append(ps, p)
	}
	return ps
}

// TestGiveBack: charge, refund, charge again, with the exact remaining
// after each step, in every algorithm; a refund on a fresh key, one larger
// than what was consumed, and one after its charge's window closed.
func TestGiveBack(t *testing.T) {
	w0 := 1_780_000_020 * sec // a minute's start: windows and the log alike
	for _, p := range allKinds() {
		t.Run(p.Kind.String(), func(t *testing.T) {
			var s State
			var r Result
			step := func(what string, cost int64, mode Mode, at int64, wantLeft int64) {
				t.Helper()
				s, r = Decide(s, p, at, cost, mode)
				if !r.Allowed || r.RetryAfter != 0 {
					t.Fatalf("%s: %+v; want allowed", what, r)
				}
				if r.Remaining != wantLeft {
					t.Fatalf("%s: %d remaining; want %d", what, r.Remaining, wantLeft)
				}
			}
			step("a refund on a fresh key", 4, GiveBack, w0, 10)
			step("10 charged", 10, Take, w0, 0)
			step("4 refunded", 4, GiveBack, w0, 4)
			step("3 charged again", 3, Take, w0, 1)
			step("100 refunded: at most what was consumed", 100, GiveBack, w0, 10)
			step("10 charged", 10, Take, w0, 0)
			if _, r := Decide(s, p, w0, 1, Take); r.Allowed {
				t.Fatalf("the 11th: admitted; want refused")
			}
		})
	}
	// A refund after its charge's window closed does not enlarge the next.
	for _, kind := range []Kind{FixedWindow, SlidingWindow} {
		p := Params{Kind: kind, Limit: 10, Window: 60 * sec}
		var s State
		s, _ = Decide(s, p, w0, 10, Take)
		next := w0 + 60*sec
		_, before := Decide(s, p, next, 0, Take)
		s, r := Decide(s, p, next, 10, GiveBack)
		if r.Remaining != before.Remaining {
			t.Errorf("%v: a refund in the next window of a charge in the last: %d remaining; want %d as before it", kind, r.Remaining, before.Remaining)
		}
	}
}

// TestGiveBackNeverBanks: random charges and refunds on one key never
// report more remaining than the limit, and within any window-long span
// admit at most the limit plus what was refunded in it.
func TestGiveBackNeverBanks(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 24))
	for _, p := range allKinds() {
		t.Run(p.Kind.String(), func(t *testing.T) {
			for trial := range 200 {
				var s State
				now := 1_780_000_000*sec + rng.Int64N(p.Window)
				type event struct {
					at             int64
					taken, refunds int64
				}
				var events []event
				for range 300 {
					now += rng.Int64N(p.Window / 20)
					cost := 1 + rng.Int64N(4)
					var r Result
					if rng.IntN(3) == 0 {
						s, r = Decide(s, p, now, cost, GiveBack)
						events = append(events, event{at: now, refunds: cost})
					} else if s, r = Decide(s, p, now, cost, Take); r.Allowed {
						events = append(events, event{at: now, taken: cost})
					}
					if r.Remaining > p.Limit {
						t.Fatalf("trial %d: %d remaining on a limit of %d", trial, r.Remaining, p.Limit)
					}
				}
				// A fixed window admits twice its limit across a boundary, a
				// sliding window's estimate as much (its last window's hits
				// at its end), a bucket its burst and the refill over the
				// span; the log its limit.
				most := p.Limit
				if p.Kind == FixedWindow || p.Kind == SlidingWindow {
					most = 2 * p.Limit
				}
				if kinds[p.Kind].hasBurst {
					most = p.Burst + p.Limit
				}
				for i := range events {
					taken, refunded := int64(0), int64(0)
					for _, e := range events[i:] {
						if e.at >= events[i].at+p.Window {
							break
						}
						taken += e.taken
						refunded += e.refunds
					}
					if taken > most+refunded {
						t.Fatalf("trial %d: %d admitted within a window from %d, %d refunded; want at most %d", trial, taken, events[i].at, refunded, most+refunded)
					}
				}
			}
		})
	}
}

// TestGiveBackInARefusedRequest: a request whose charge is refused still
// applies its refund, to the key as the request found it.
func TestGiveBackInARefusedRequest(t *testing.T) {
	for _, p := range allKinds() {
		t.Run(p.Kind.String(), func(t *testing.T) {
			now := 1_780_000_020 * sec
			full, _ := Decide(State{}, p, now, 10, Take)
			used, _ := Decide(State{}, p, now, 6, Take)
			items := []Item{
				{Key: "full", Params: p, Cost: 1, Mode: Take},
				{Key: "used", Params: p, Cost: 4, Mode: GiveBack},
				{Key: "used", Params: p, Cost: 1, Mode: Take},
			}
			states := []State{full, used, used}
			results := make([]Result, len(items))
			if !DecideAll(items, states, now, results) {
				t.Fatal("DecideAll: nothing to store; want the refund stored")
			}
			if results[0].Allowed || !results[1].Allowed {
				t.Fatalf("results %+v; want the charge refused, the refund allowed", results)
			}
			if _, r := Decide(states[2], p, now, 0, Take); r.Remaining != 8 {
				t.Errorf("the refunded key after a refused request: %d remaining; want 8 (6 used, 4 back, the refused charge not taken)", r.Remaining)
			}
		})
	}
}
