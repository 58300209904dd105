package algorithm

import "testing"

// TestCount: Count judges each request as Take would and records its
// hits whether admitted or not (the reference's counting), within the
// debt cap of Force: a fixed window of 3 admits three of five, holds all
// five (so a refused request costs), and the next window starts afresh.
func TestCount(t *testing.T) {
	const minute = int64(60_000_000)
	p := Params{Kind: FixedWindow, Limit: 3, Window: minute, Burst: 3}
	var s State
	now := 10 * minute
	for i, want := range []bool{true, true, true, false, false} {
		var r Result
		s, r = Decide(s, p, now, 1, Count)
		if r.Allowed != want {
			t.Fatalf("hit %d: allowed %v; want %v", i+1, r.Allowed, want)
		}
		if r.Allowed && r.RetryAfter != 0 {
			t.Errorf("hit %d admitted with a retry of %d µs", i+1, r.RetryAfter)
		}
		if !r.Allowed && r.RetryAfter <= 0 {
			t.Errorf("hit %d refused without a retry time", i+1)
		}
	}
	// Five counted: a check finds the window spent.
	if _, r := Decide(s, p, now, 0, Take); r.Allowed || r.Remaining != 0 {
		t.Errorf("after five counted hits: %+v; want used up", r)
	}
	// A token bucket counts refused hits as debt: after five hits on a
	// bucket of 3 refilling 3 a minute, one token comes back only after
	// the two hits of debt are repaid.
	b := Params{Kind: TokenBucket, Limit: 3, Window: minute, Burst: 3}
	var bs State
	for range 5 {
		bs, _ = Decide(bs, b, now, 1, Count)
	}
	if _, r := Decide(bs, b, now+minute/3*2, 1, Take); r.Allowed {
		t.Error("a counted debt of 2 repaid in two thirds of a minute, with a token to spare")
	}
	if _, r := Decide(bs, b, now+minute, 1, Take); !r.Allowed {
		t.Error("a counted debt of 2 not repaid after a minute")
	}
}
