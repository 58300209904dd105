package rlqs

import (
	"math"
	"testing"
	"time"
)

// TestPushesWorthAToken: a share is pushed between an Envoy's reports only
// where it moved by a token or more until its next report (a push costs it
// up to one); its own answer carries a move of a token over a report
// interval; and moves too small to push, all one way, are pushed once they
// would admit more than moved of a report interval of the limit.
func TestPushesWorthAToken(t *testing.T) {
	f := newFleet(10)
	lim := shape{rate: 100, burst: 100}
	now := time.Unix(1_700_000_000, 0)
	pokes := make(map[uint64]int)
	// Ten Envoys asking 15 a second each: shares of 10, pushed with their
	// answers.
	report := func(id uint64, asked float64) bool {
		if _, _, ok := f.observe("k", id, asked*5, 5, 5, lim, now, func(string) { pokes[id]++ }); !ok {
			t.Fatal("fleet full")
		}
		sh, push := f.share("k", id, lim, now)
		if push {
			f.sent("k", id, sh.Rate)
		}
		return push
	}
	for range 2 {
		now = now.Add(ReportInterval)
		for id := range uint64(10) {
			report(id+1, 15)
		}
	}
	clear(pokes)
	// One Envoy's demand doubles 1 s into the interval: its share rises to
	// about 18, the others' fall to about 9.1 (down 9 %: 4 s × 0.9 is 3.6
	// tokens each until their reports): all pushed.
	now = now.Add(time.Second)
	if !report(1, 30) {
		t.Error("its own share moved by 80 %: not carried by its answer")
	}
	if len(pokes) != 9 {
		t.Errorf("%d others poked; want 9 (each moved by 3.6 tokens until its next report)", len(pokes))
	}
	// 4.9 s later, just before the others report: a move of the same size
	// is worth 0.1 token each, too little for a push; nor do all nine
	// together come near the budget.
	for id := range uint64(10) {
		f.sent("k", id+1, must(f.shareOf("k", id+1)).Rate)
	}
	clear(pokes)
	now = now.Add(ReportInterval - 100*time.Millisecond)
	report(2, 30)
	if len(pokes) != 0 {
		t.Errorf("%d poked 0.1 s before their own reports; want none", len(pokes))
	}
}

func must(sh Share, ok bool) Share {
	if !ok {
		panic("no share")
	}
	return sh
}

// TestWeightsDrawNoiseToTheMean: ten Envoys asked for 1.5 a second each,
// read from whole requests over 5 s (5 to 10 of them), weigh about
// evenly; one asked for ten times that keeps its weight, and one asked
// for nothing stays near nothing; twenty zipf Envoys, whose demands spread
// far past their noise, keep their own.
func TestWeightsDrawNoiseToTheMean(t *testing.T) {
	members := make(map[uint64]*member)
	counts := []float64{5, 6, 7, 7, 8, 8, 9, 10, 10, 8}
	for i, n := range counts {
		members[uint64(i+1)] = &member{demand: n / 5, over: 5}
	}
	ids, all := weights(members, 1)
	lo, hi := math.Inf(1), 0.0
	for _, w := range all {
		lo, hi = min(lo, w), max(hi, w)
	}
	if hi/lo > 1.2 {
		t.Errorf("counts of 5 to 10 in 5 s weigh %.2f to %.2f; want within 1.2 of each other (the raw counts: 2)", lo, hi)
	}
	members[11] = &member{demand: 15, over: 5}
	members[12] = &member{demand: 0, over: 5}
	ids, all = weights(members, 1)
	for i, id := range ids {
		switch id {
		case 11:
			if all[i] < 14 {
				t.Errorf("an Envoy asked for 15 a second weighs %.2f; want about 15", all[i])
			}
		case 12:
			if all[i] > 1 {
				t.Errorf("an Envoy asked for nothing weighs %.2f; want below 1", all[i])
			}
		}
	}
	// Twenty zipf Envoys' demands over 15 s spread far past their counts'
	// noise: each keeps its own, a quiet one's at most a request more than
	// it counted (drawn to the mean, the quiet ones weighed what the busy
	// ones lacked).
	zipf := make(map[uint64]*member)
	for i := range 20 {
		rate := 35 / math.Pow(float64(i+1), 1.1)
		zipf[uint64(i+1)] = &member{demand: math.Round(rate*15) / 15, over: 15}
	}
	ids, all = weights(zipf, 1)
	for i, id := range ids {
		if m := zipf[id]; all[i] < 0.9*m.demand || all[i] > m.demand+1/m.over+1e-9 {
			t.Errorf("a zipf Envoy that asked for %.2f a second weighs %.2f; want %.2f to %.2f", m.demand, all[i], 0.9*m.demand, m.demand+1/m.over)
		}
	}
}

// TestQuietShareCarriedByItsAnswer: a quiet Envoy's share that moves by
// less than a token a report interval, but by more than astray of the one
// in force, goes with its own answer; left to the next report, it would be
// judged the same way there, and stay in force for good.
func TestQuietShareCarriedByItsAnswer(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	k := &fleetKey{members: make(map[uint64]*member)}
	for id := range uint64(20) {
		k.members[id+1] = &member{demand: 30, over: 15, at: now, sent: 5}
	}
	quiet := &member{demand: 0.4, over: 15, at: now, sent: 0.05}
	k.members[100] = quiet
	lim := shape{rate: 100, burst: 100}
	_, mine := k.split(lim, 100, now)
	if moved := (quiet.share.Rate - quiet.sent) * ReportInterval.Seconds(); !mine || moved >= pushTokens {
		t.Errorf("a quiet Envoy's share went from %.3f to %.3f a second (%.2f tokens a report interval), carried by its answer: %v; want under a token, carried",
			quiet.sent, quiet.share.Rate, moved, mine)
	}
}

// TestPushesHoldTheSum: moves too small to push one by one (a hundred
// Envoys of 1 a second, each losing a hundredth of its share to a newcomer
// just after their reports) are left until, all one way, the shares left
// as they were would admit more than moved of a report interval of the
// limit until their Envoys' next reports; then the ones furthest above
// theirs are pushed until they would not.
func TestPushesHoldTheSum(t *testing.T) {
	f := newFleet(10)
	lim := shape{rate: 100, burst: 100}
	now := time.Unix(1_700_000_000, 0)
	poked := 0
	join := func(id uint64) {
		if _, _, ok := f.observe("k", id, 1.5*5, 5, 5, lim, now, func(string) { poked++ }); !ok {
			t.Fatal("fleet full")
		}
		if sh, push := f.share("k", id, lim, now); push {
			f.sent("k", id, sh.Rate)
		}
	}
	for range 2 {
		now = now.Add(ReportInterval)
		for id := range uint64(100) {
			join(id + 1)
		}
	}
	for id := range uint64(100) {
		f.sent("k", id+1, must(f.shareOf("k", id+1)).Rate)
	}
	poked = 0
	join(101) // the others 1 % above theirs: 5 tokens over the fleet
	if poked != 0 {
		t.Fatalf("one newcomer: %d poked; want none (0.05 of a token each)", poked)
	}
	join(102)
	join(103) // 3 %: 15 tokens, past the 10 of the budget
	if poked == 0 || poked == 100 {
		t.Errorf("three newcomers: %d poked; want some, not all (the budget is 2 %% of 5 s of the limit)", poked)
	}
}
