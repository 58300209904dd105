package algorithm

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

const sec = int64(1_000_000) // µs

// step is one call in a scripted sequence.
type step struct {
	at      int64 // µs since t0
	cost    int64
	allowed bool
	remain  int64
	retry   int64 // checked when >= 0
}

func run(t *testing.T, p Params, t0 int64, steps []step) {
	t.Helper()
	var s State
	for i, st := range steps {
		var r Result
		s, r = Decide(s, p, t0+st.at, st.cost, Take)
		if r.Allowed != st.allowed || r.Remaining != st.remain || (st.retry >= 0 && r.RetryAfter != st.retry) {
			t.Fatalf("step %d: Decide(at=%d, cost=%d) = %+v; want allowed=%v remaining=%d retry=%d",
				i, st.at, st.cost, r, st.allowed, st.remain, st.retry)
		}
	}
}

func TestAlgorithms(t *testing.T) {
	// t0 is on a minute boundary so the window algorithms start a window.
	const t0 = 1_780_000_020 * sec
	tests := []struct {
		name  string
		p     Params
		steps []step
	}{
		{"token_bucket burst then refill", Params{TokenBucket, 10, sec, 3, 0, ""}, []step{
			{0, 1, true, 2, 0}, {0, 1, true, 1, 0}, {0, 1, true, 0, 0},
			{0, 1, false, 0, sec / 10},
			{sec / 10, 1, true, 0, 0}, // one token refilled in 100 ms
			{sec / 10, 0, false, 0, sec / 10},
			{10 * sec, 0, true, 3, 0},  // capped at the burst
			{10 * sec, 4, false, 3, 0}, // above the burst: never
		}},
		{"token_bucket cost and check", Params{TokenBucket, 5, sec, 5, 0, ""}, []step{
			{0, 0, true, 5, 0}, {0, 3, true, 2, 0}, {0, 3, false, 2, sec / 5}, {0, 2, true, 0, 0},
		}},
		{"gcra matches token_bucket", Params{GCRA, 10, sec, 3, 0, ""}, []step{
			{0, 1, true, 2, 0}, {0, 1, true, 1, 0}, {0, 1, true, 0, 0},
			{0, 1, false, 0, sec / 10},
			{sec / 10, 1, true, 0, 0},
			{10 * sec, 0, true, 3, 0},
		}},
		{"fixed_window", Params{FixedWindow, 3, 60 * sec, 0, 0, ""}, []step{
			{0, 2, true, 1, 0}, {sec, 1, true, 0, 0}, {2 * sec, 1, false, 0, 58 * sec},
			{60 * sec, 1, true, 2, 0},
		}},
		// 42 hits in the previous minute, 18 so far, 15 s in: the estimate
		// is 42×45/60 + 18 = 49.5 of 50, so one more fits and then none.
		{"sliding_window worked example", Params{SlidingWindow, 50, 60 * sec, 0, 0, ""}, []step{
			{0, 42, true, 8, 0},
			{75 * sec, 18, true, 0, -1},
			{75 * sec, 1, false, 0, -1},
		}},
		{"sliding_log", Params{SlidingLog, 2, 10 * sec, 0, 0, ""}, []step{
			{0, 1, true, 1, 0}, {sec, 1, true, 0, 0}, {2 * sec, 1, false, 0, 8 * sec},
			{10 * sec, 1, true, 0, 0}, // the first hit left the window
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { run(t, tt.p, t0, tt.steps) })
	}
}

func TestSlidingWindowRetryAfterIsExact(t *testing.T) {
	p := Params{SlidingWindow, 10, 10 * sec, 0, 0, ""}
	t0 := int64(1_780_000_000) * sec
	var s State
	s, _ = Decide(s, p, t0, 10, Take)        // previous window: 10
	s, r := Decide(s, p, t0+10*sec, 1, Take) // weight 1: full
	if r.Allowed {
		t.Fatalf("Decide at boundary = %+v; want denied", r)
	}
	// Admitted exactly when the previous window's weight lets one through.
	_, at := Decide(s, p, t0+10*sec+r.RetryAfter, 1, Take)
	_, before := Decide(s, p, t0+10*sec+r.RetryAfter-1, 1, Take)
	if !at.Allowed || before.Allowed {
		t.Fatalf("retry %d µs: allowed at retry = %v, 1µs before = %v; want true, false", r.RetryAfter, at.Allowed, before.Allowed)
	}
}

// TestBoundaryBurst shows the fixed window's flaw: a client that sends the
// limit just before a boundary and again just after gets twice the limit
// through in two seconds; the sliding window and the token bucket do not.
func TestBoundaryBurst(t *testing.T) {
	const limit = 100
	w := 60 * sec
	t0 := int64(1_780_000_020)*sec + w - sec // one second before a boundary
	for _, tt := range []struct {
		kind Kind
		max  int
	}{
		{FixedWindow, 2 * limit},
		{SlidingWindow, limit + 2}, // the estimate lets through what decays in 1 s
		{TokenBucket, limit + 4},   // 2 s of refill at 100/min
		{GCRA, limit + 4},
		{SlidingLog, limit},
	} {
		t.Run(tt.kind.String(), func(t *testing.T) {
			p := Params{tt.kind, limit, w, limit, 0, ""}
			var s State
			admitted := 0
			for i := 0; i < 4*limit; i++ {
				now := t0 + int64(i)*(2*sec)/(4*limit) // spread over 2 s
				var r Result
				s, r = Decide(s, p, now, 1, Take)
				if r.Allowed {
					admitted++
				}
			}
			if admitted > tt.max {
				t.Errorf("admitted %d across the boundary; want at most %d", admitted, tt.max)
			}
			if tt.kind == FixedWindow && admitted != 2*limit {
				t.Errorf("fixed_window admitted %d; want exactly %d (its documented flaw)", admitted, 2*limit)
			}
		})
	}
}

// TestClockBackwards: time going back never hands out allowance.
func TestClockBackwards(t *testing.T) {
	t0 := int64(1_780_000_020) * sec
	for k := Kind(0); k < numKinds; k++ {
		t.Run(k.String(), func(t *testing.T) {
			p := Params{k, 10, 10 * sec, 10, 0, ""}
			var s State
			s, _ = Decide(s, p, t0+20*sec, 10, Take) // use it all up
			for _, back := range []int64{sec, 9 * sec, 25 * sec} {
				_, r := Decide(s, p, t0+20*sec-back, 1, Take)
				if r.Allowed {
					t.Errorf("after the clock went back %d µs: %+v; want denied", back, r)
				}
			}
		})
	}
}

// TestLongRunRate: no algorithm but fixed_window admits more than
// burst + rate × elapsed in any run; fixed_window at most 2 × limit per window.
func TestLongRunRate(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	t0 := int64(1_780_000_020) * sec
	for k := Kind(0); k < numKinds; k++ {
		t.Run(k.String(), func(t *testing.T) {
			p := Params{k, 20, 10 * sec, 20, 0, ""}
			var s State
			now, admitted := t0, int64(0)
			for i := 0; i < 5000; i++ {
				now += rng.Int64N(sec / 5)
				cost := rng.Int64N(3)
				var r Result
				s, r = Decide(s, p, now, cost, Take)
				if r.Allowed {
					admitted += cost
				}
			}
			elapsed := now - t0
			bound := p.Burst + p.Limit*elapsed/p.Window + 1
			if k == FixedWindow || k == SlidingWindow {
				bound = p.Limit * (elapsed/p.Window + 2)
			}
			if admitted > bound {
				t.Errorf("admitted %d over %d µs; want at most %d", admitted, elapsed, bound)
			}
		})
	}
}

func TestForceGoesIntoDebt(t *testing.T) {
	t0 := int64(1_780_000_020) * sec
	for _, k := range []Kind{TokenBucket, GCRA, FixedWindow, SlidingWindow, SlidingLog} {
		t.Run(k.String(), func(t *testing.T) {
			p := Params{k, 10, 10 * sec, 10, 0, ""}
			s, r := Decide(State{}, p, t0, 15, Force)
			if r.Allowed || r.Remaining != 0 {
				t.Fatalf("Force 15 of 10 = %+v; want not allowed, remaining 0", r)
			}
			// One second later at most one unit refilled, still in debt.
			if _, r := Decide(s, p, t0+sec, 1, Take); r.Allowed {
				t.Fatalf("after debt: %+v; want denied", r)
			}
		})
	}
}

// TestForceAnswersForTheNextRequest: a Force decision records its cost and
// reports the key as the next request would find it, so that a sidecar
// recording hits it already admitted learns whether, and until when, the
// key is used up: Allowed iff one more unit fits, RetryAfter until it does.
// The retry must hold for the whole debt, also when the recorded cost is
// larger than the bucket (an aggregate of many requests).
func TestForceAnswersForTheNextRequest(t *testing.T) {
	t0 := int64(1_780_000_020) * sec
	for _, k := range []Kind{TokenBucket, GCRA, FixedWindow, SlidingWindow, SlidingLog} {
		for _, cost := range []int64{3, 9, 10, 15, 35} {
			t.Run(fmt.Sprintf("%v/%d", k, cost), func(t *testing.T) {
				p := Params{k, 10, 10 * sec, 10, 0, ""}
				s, r := Decide(State{}, p, t0, cost, Force)
				check, want := Decide(s, p, t0, 0, Take)
				if r != want {
					t.Fatalf("Force %d of 10 = %+v; want the next request's view %+v", cost, r, want)
				}
				if r.Allowed != (cost < 10) {
					t.Fatalf("Force %d of 10: Allowed = %v; want %v", cost, r.Allowed, cost < 10)
				}
				if r.Allowed {
					return
				}
				if _, early := Decide(check, p, t0+r.RetryAfter-1, 1, Take); early.Allowed {
					t.Errorf("admitted 1µs before RetryAfter %d", r.RetryAfter)
				}
				if _, then := Decide(check, p, t0+r.RetryAfter, 1, Take); !then.Allowed {
					t.Errorf("denied at RetryAfter %d: %+v", r.RetryAfter, then)
				}
			})
		}
	}
}

func TestDecideAllVetoConsumesNothing(t *testing.T) {
	t0 := int64(1_780_000_020) * sec
	items := []Item{
		{Key: "a", Params: Params{TokenBucket, 10, sec, 10, 0, ""}, Cost: 1},
		{Key: "b", Params: Params{FixedWindow, 1, 60 * sec, 0, 0, ""}, Cost: 1},
	}
	states := make([]State, 2)
	res := make([]Result, 2)
	if !DecideAll(items, states, t0, res) {
		t.Fatalf("first request vetoed: %+v", res)
	}
	if DecideAll(items, states, t0, res) {
		t.Fatalf("second request admitted: %+v", res)
	}
	if !res[0].Allowed || res[0].Remaining != 9 || res[1].Allowed {
		t.Fatalf("results = %+v; want a allowed with 9 left (nothing taken), b denied", res)
	}
	// Shadow items never veto.
	items[1].Shadow = true
	if !DecideAll(items, states, t0, res) || res[0].Remaining != 8 {
		t.Fatalf("with b in shadow mode = %+v; want admitted, a at 8", res)
	}
}

func TestDecideAllSameKeyTwice(t *testing.T) {
	items := []Item{
		{Key: "a", Params: Params{FixedWindow, 3, 60 * sec, 0, 0, ""}, Cost: 2},
		{Key: "a", Params: Params{FixedWindow, 3, 60 * sec, 0, 0, ""}, Cost: 2},
	}
	states := make([]State, 2)
	res := make([]Result, 2)
	if DecideAll(items, states, 0, res) || !res[0].Allowed || res[1].Allowed {
		t.Fatalf("two costs of 2 on one key with limit 3 = %+v; want the second to see the first", res)
	}
}

// TestForceLogBounded: recording more than the limit on a sliding log
// keeps at most twice the limit, in one run and a debt, which enters the
// log as its units leave and holds the key back two windows at most.
func TestForceLogBounded(t *testing.T) {
	t0 := int64(1_780_000_020) * sec
	p := Params{SlidingLog, 10, 10 * sec, 0, 0, ""}
	s, _ := Decide(State{}, p, t0, 3, Take)
	s, r := Decide(s, p, t0+sec, 1<<32, Force)
	runs, debt := splitDebt(s.Log)
	if len(runs) != 2 || logUnits(runs) != 10 || debt != 10 || r.Allowed || r.Remaining != 0 || r.RetryAfter != 20*sec || r.ResetAfter != 20*sec {
		t.Fatalf("Force 2^32 = %+v with %d runs of %d units and a debt of %d; want 2 runs of the limit's 10 units and a debt of 10, denied for two windows", r, len(runs), logUnits(runs), debt)
	}
	if _, r := Decide(s, p, t0+21*sec-1, 1, Take); r.Allowed {
		t.Errorf("admitted before the debt left")
	}
	if _, r := Decide(s, p, t0+21*sec, 1, Take); !r.Allowed {
		t.Errorf("denied once the debt left: %+v", r)
	}
}

// TestSlidingLogRepaysItsDebt: a sliding log of 10 a second, filled by
// takes and then charged 2 more by a late record (a sidecar's admissions
// past the limit), admits only 8 in the next window: 20 in two windows,
// as an exact limiter fed the same requests would, not 22. The debt
// enters as the first units leave, so its units count from then.
func TestSlidingLogRepaysItsDebt(t *testing.T) {
	t0 := int64(1_780_000_020) * sec
	p := Params{SlidingLog, 10, sec, 0, 0, ""}
	var s State
	admitted := 0
	for i := range 20 { // 10 over the first 100 ms, then refused
		var r Result
		if s, r = Decide(s, p, t0+int64(i)*5_000, 1, Take); r.Allowed {
			admitted++
		}
	}
	s, r := Record(s, p, t0+120_000, 100_000, 2) // admitted at t0+20ms, recorded at t0+120ms
	admitted += 2
	if r.Remaining != 0 || r.RetryAfter != sec+10_000-120_000 {
		// The debt's 2 take the room the first two units leave (t0+1s,
		// t0+1.005s), so the third (t0+1.010s) makes room for a request.
		t.Fatalf("after a record past the limit: %+v; want none left, a retry at t0+1.010s", r)
	}
	for i := range 40 { // the next window, flooded
		var r Result
		if s, r = Decide(s, p, t0+sec+int64(i)*5_000, 1, Take); r.Allowed {
			admitted++
		}
	}
	if admitted != 20 {
		t.Errorf("admitted %d over two windows; want 20 (the limit twice, the debt repaid)", admitted)
	}
}

func TestKindNames(t *testing.T) {
	for _, k := range Kinds() {
		got, err := ParseKind(strings.ToUpper(k.String()))
		if err != nil || got != k {
			t.Errorf("ParseKind(%q) = %v, %v; want %v", k, got, err, k)
		}
	}
	if Kind(0) != TokenBucket {
		t.Error("the zero Kind is not TokenBucket")
	}
	if _, err := ParseKind(""); err == nil {
		t.Error(`ParseKind("") succeeded`)
	}
	if err := (Params{Kind: numKinds, Limit: 1, Window: 1, Burst: 1}).Validate(); err == nil {
		t.Error("an unknown kind validates")
	}
}

// TestRefundUndoesTake: a refund of a take, right after it, leaves every
// algorithm where it was; takes by others after it stay.
func TestRefundUndoesTake(t *testing.T) {
	t0 := int64(1_780_000_020) * sec
	for _, k := range Kinds() {
		t.Run(k.String(), func(t *testing.T) {
			p := Params{k, 10, 10 * sec, 10, 0, ""}
			s, _ := Decide(State{}, p, t0, 3, Take)
			_, before := Decide(s, p, t0+1, 0, Take)
			s, r := Decide(s, p, t0+1, 4, Take)
			if !r.Allowed {
				t.Fatalf("take: %+v", r)
			}
			s, _ = Decide(s, p, t0+2, 1, Take) // another request's, after
			s = Refund(s, p, t0+1, 4)
			_, after := Decide(s, p, t0+2, 0, Take)
			if after.Remaining != before.Remaining-1 {
				t.Fatalf("after the refund: %d left; want %d (the other request's 1 taken)", after.Remaining, before.Remaining-1)
			}
		})
	}
}
