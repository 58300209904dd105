package algorithm

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func concurrencyParams(limit, ttl int64, holder string) Params {
	return Params{Kind: Concurrency, Limit: limit, Window: ttl, Holder: holder}
}

// An in-flight limit of 5: five holders take a unit each, a sixth is
// refused until one of them gives its unit back or its TTL passes; every
// refund frees its own holder's unit and nobody else's.
func TestConcurrencyHoldsAndFrees(t *testing.T) {
	const t0, ttl = 1_780_000_000 * sec, 10 * sec
	var s State
	take := func(h string, at, cost int64) Result {
		var r Result
		s, r = Decide(s, concurrencyParams(5, ttl, h), t0+at, cost, Take)
		return r
	}
	refund := func(h string, at, cost int64) Result {
		var r Result
		s, r = Decide(s, concurrencyParams(5, ttl, h), t0+at, cost, GiveBack)
		return r
	}
	for i := range 5 {
		if r := take(fmt.Sprint("h", i), int64(i)*sec, 1); !r.Allowed || r.Remaining != int64(4-i) {
			t.Fatalf("holder %d: %+v; want admitted, %d left", i, r, 4-i)
		}
	}
	if r := take("late", 5*sec, 1); r.Allowed || r.RetryAfter != 5*sec {
		t.Fatalf("a sixth: %+v; want refused until h0's TTL passes (5 s)", r)
	}
	// The refused request's stream-end refund: it holds nothing, frees nothing.
	if r := refund("late", 5*sec, 1); !r.Allowed || r.Remaining != 0 {
		t.Fatalf("refund of a refused request: %+v; want 0 left", r)
	}
	if r := refund("h2", 6*sec, 1); r.Remaining != 1 {
		t.Fatalf("h2's refund: %+v; want 1 left", r)
	}
	if r := refund("h2", 6*sec, 1); r.Remaining != 1 {
		t.Fatalf("h2's refund again: %+v; want still 1 left (it holds nothing now)", r)
	}
	if r := take("h5", 6*sec, 1); !r.Allowed || r.Remaining != 0 {
		t.Fatalf("a new holder after the refund: %+v; want admitted", r)
	}
	// h0 never gives its unit back: its TTL frees it at 10 s.
	if r := take("h6", 10*sec-1, 1); r.Allowed {
		t.Fatalf("before h0's TTL: %+v; want refused", r)
	}
	if r := take("h6", 10*sec, 1); !r.Allowed {
		t.Fatalf("at h0's TTL: %+v; want admitted", r)
	}
	// h0's refund comes late, after its unit expired and h6 took it: it
	// frees nothing of h6's (or anyone's).
	if r := refund("h0", 10*sec+sec/2, 1); r.Remaining != 0 {
		t.Fatalf("h0's late refund: %+v; want 0 left, h6 still holding", r)
	}
}

// A holder's refund frees at most the units it holds, the newest first,
// whatever cost it names.
func TestConcurrencyRefundBoundedByHeld(t *testing.T) {
	const t0, ttl = 1_780_000_000 * sec, 60 * sec
	var s State
	s, _ = Decide(s, concurrencyParams(10, ttl, "a"), t0, 3, Take)
	s, _ = Decide(s, concurrencyParams(10, ttl, "b"), t0+sec, 2, Take)
	s, r := Decide(s, concurrencyParams(10, ttl, "a"), t0+2*sec, 1_000_000, GiveBack)
	if r.Remaining != 8 || !r.Allowed {
		t.Fatalf("a's huge refund: %+v; want 8 left (b's 2 held)", r)
	}
	s, r = Decide(s, concurrencyParams(10, ttl, "nobody"), t0+2*sec, 5, GiveBack)
	if r.Remaining != 8 {
		t.Fatalf("an unknown holder's refund: %+v; want 8 left", r)
	}
	// A holder taking twice holds both takes; a refund of one frees one.
	s, _ = Decide(s, concurrencyParams(10, ttl, "b"), t0+3*sec, 1, Take)
	s, r = Decide(s, concurrencyParams(10, ttl, "b"), t0+3*sec, 1, GiveBack)
	if r.Remaining != 8 || len(s.Slots) != 2 {
		t.Fatalf("b took 2 then 1 and gave 1 back: %+v, %d slots; want 8 left", r, len(s.Slots))
	}
}

// Random interleavings of takes and refunds by many holders against a
// model that knows who holds what: the count never differs from the
// model's, so it never falls below the truth (no limit breached) and
// never stays above it (no unit lost).
func TestConcurrencyMatchesModel(t *testing.T) {
	const t0, ttl, limit = 1_780_000_000 * sec, 2 * sec, 8
	rng := rand.New(rand.NewPCG(1, 2))
	type unit struct {
		holder string
		at     int64
	}
	var (
		s     State
		model []unit
		now   = t0
	)
	for step := range 20_000 {
		now += rng.Int64N(200_000)
		live := model[:0]
		for _, u := range model {
			if u.at > now-ttl {
				live = append(live, u)
			}
		}
		model = live
		h := fmt.Sprint("h", rng.IntN(20))
		cost := 1 + rng.Int64N(3)
		p := concurrencyParams(limit, ttl, h)
		var r Result
		if rng.IntN(2) == 0 {
			s, r = Decide(s, p, now, cost, Take)
			if want := int64(len(model))+cost <= limit; r.Allowed != want {
				t.Fatalf("step %d: take %d by %s with %d held: allowed %v; want %v", step, cost, h, len(model), r.Allowed, want)
			}
			if r.Allowed {
				for range cost {
					model = append(model, unit{h, now})
				}
			}
		} else {
			s, r = Decide(s, p, now, cost, GiveBack)
			for i := len(model) - 1; i >= 0 && cost > 0; i-- {
				if model[i].holder == h {
					model = append(model[:i], model[i+1:]...)
					cost--
				}
			}
		}
		if r.Remaining != limit-int64(len(model)) {
			t.Fatalf("step %d: %d left; the model holds %d of %d", step, r.Remaining, len(model), limit)
		}
	}
}

func TestConcurrencyValidate(t *testing.T) {
	for _, tc := range []struct {
		p  Params
		ok bool
	}{
		{concurrencyParams(5, sec, "req-1"), true},
		{concurrencyParams(5, sec, ""), false},
		{concurrencyParams(MaxConcurrencyLimit+1, sec, "h"), false},
		{concurrencyParams(5, sec, string(make([]byte, MaxHolderLen+1))), false},
		{concurrencyParams(5, sec, "a\x002"), false},
	} {
		if err := tc.p.Validate(); (err == nil) != tc.ok {
			t.Errorf("Validate(%+v) = %v; want ok %v", tc.p, err, tc.ok)
		}
	}
}

// A unit's name is the holder's only as SlotMember writes it: "a\x0005"
// and "a\x00+5" are no units of a.
func TestMemberUnit(t *testing.T) {
	for _, tc := range []struct {
		m    string
		k    int64
		ours bool
	}{
		{"a", 1, true}, {SlotMember("a", 5), 5, true}, {"a\x0005", 0, false}, {"a\x00+5", 0, false},
		{"a\x001", 0, false}, {"ab", 0, false}, {"b\x002", 0, false},
	} {
		if k, ok := memberUnit(tc.m, "a"); ok != tc.ours || ok && k != tc.k {
			t.Errorf("memberUnit(%q, a) = %d, %v; want %d, %v", tc.m, k, ok, tc.k, tc.ours)
		}
	}
}
