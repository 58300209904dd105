package share

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"
)

// lim is a limit of 100 a second with a capacity of 100.
var lim = Limit{Rate: 100, Capacity: 100}

// backed is r backed by as many asked units as its rate claims over its
// interval (Report.Asked), so that its rate weighs in full.
func backed(r Report) Report {
	r.Asked = r.Rate * r.Interval.Seconds()
	return r
}

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
		if got := Allot(c.pool, c.mine, c.total, c.total*0.01, c.u); got != c.want {
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
	if g := tr.Allot("loose", backed(Report{Sidecar: "a", Rate: 100, Interval: iv}), 1000, Limit{}, now); g != -1 {
		t.Fatalf("a key far from its limit got an allowance of %v", g)
	}
	rates := map[string]float64{"big": 800, "small-1": 100, "small-2": 100}
	sum := map[string]float64{}
	const rounds = 2000
	for range rounds {
		for _, id := range []string{"big", "small-1", "small-2"} {
			now = now.Add(iv / 3)
			sum[id] += tr.Allot("k", backed(Report{Sidecar: id, Rate: rates[id], Interval: iv}), 10, Limit{}, now)
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
	if g := tr.Allot("k", backed(Report{Sidecar: "small-1", Rate: 100, Interval: iv}), 1, Limit{}, later); g != 1 {
		t.Errorf("alone on the key after the others went quiet: %v; want the whole pool, 1", g)
	}
}

// TestTrackerBounds: reports outside the bounds get nothing and are not
// kept; a key keeps at most MaxSidecars reports.
func TestTrackerBounds(t *testing.T) {
	tr, err := New(Options{MaxSidecars: 3})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	iv := 10 * time.Millisecond
	for _, r := range []Report{
		{Sidecar: "", Rate: 1, Interval: iv},
		{Sidecar: strings.Repeat("x", MaxSidecarID+1), Rate: 1, Interval: iv},
		{Peer: strings.Repeat("p", MaxPeer+1), Sidecar: "a", Rate: 1, Interval: iv},
		{Sidecar: "a", Rate: math.NaN(), Interval: iv},
		{Sidecar: "a", Rate: -1, Interval: iv},
		{Sidecar: "a", Rate: math.Inf(1), Interval: iv},
		{Sidecar: "a", Rate: 1, Interval: 0},
		{Sidecar: "a", Rate: 1, Interval: time.Hour},
	} {
		if g := tr.Allot("k", r, 0, lim, now); g != -1 {
			t.Errorf("report %+v: allowance %v; want none", r, g)
		}
	}
	if tr.Len() != 0 {
		t.Errorf("refused reports left %d keys", tr.Len())
	}
	for i := range 10 {
		tr.Allot("k", backed(Report{Sidecar: fmt.Sprint(i), Rate: 1, Interval: iv}), 0, lim, now)
	}
	n := -1
	tr.keys.Get("k", func(ks *keyState) { n = len(ks.reports) })
	if n != 3 {
		t.Errorf("key k holds %d reports; want MaxSidecars 3", n)
	}
}

// TestTrackerHeapWithinBudget: one caller reporting distinct keys under
// distinct sidecar ids, as fast as it can (the flood of the issue that
// took a server to 894 MB), leaves the tracker within its byte budget,
// read off the heap.
func TestTrackerHeapWithinBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("reports 200k keys")
	}
	const budget = 8 << 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	tr, err := New(Options{MaxBytes: budget})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	id := strings.Repeat("i", MaxSidecarID-8)
	peer := strings.Repeat("p", 64)
	for i := range 200_000 {
		key := fmt.Sprintf("sluice:%0200d", i/4) // four sidecars a key, 200-byte keys
		tr.Allot(key, backed(Report{Peer: peer, Sidecar: fmt.Sprintf("%s%08d", id, i), Rate: 1e9, Interval: 10 * time.Millisecond}), 0, lim, now)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("heap %d bytes for a budget of %d (%d keys, %d counted)", heap, budget, tr.Len(), tr.Bytes())
	if tr.Bytes() > budget || heap > budget*5/4 {
		t.Errorf("heap %d bytes, counted %d; want both within the %d-byte budget (a quarter over for the allocator)", heap, tr.Bytes(), budget)
	}
	runtime.KeepAlive(tr)
}

// TestStaleReportsSweptAway: keys whose reports all went stale leave on
// the owner's timer, without another report of the same key.
func TestStaleReportsSweptAway(t *testing.T) {
	tr, _ := New(Options{})
	now := time.Unix(1000, 0)
	for i := range 1000 {
		tr.Allot(fmt.Sprint("k", i), backed(Report{Sidecar: "a", Rate: 1, Interval: 10 * time.Millisecond}), 0, lim, now)
	}
	if n := tr.Sweep(now.Add(500 * time.Millisecond)); n != 0 {
		t.Errorf("Sweep half a second later dropped %d keys; want none (reports count for a second)", n)
	}
	if n := tr.Sweep(now.Add(1001 * time.Millisecond)); n != 1000 || tr.Len() != 0 || tr.Bytes() != 0 {
		t.Errorf("Sweep after a second dropped %d keys, left %d (%d bytes); want all 1000 gone", n, tr.Len(), tr.Bytes())
	}
}

// TestReportLifetimeIsTheSeenInterval: a sidecar that says it reports
// every 10 s, the most a report may say, still counts for a second after a
// single report: how long a report counts follows how often its sidecar is
// seen, not what it says (the forged report of the issue counted for 30 s).
func TestReportLifetimeIsTheSeenInterval(t *testing.T) {
	tr, _ := New(Options{})
	now := time.Unix(1000, 0)
	slow := backed(Report{Peer: "evil", Sidecar: "evil", Rate: 1000, Interval: MaxInterval})
	tr.Allot("k", slow, 0, lim, now)
	alone := backed(Report{Peer: "good", Sidecar: "good", Rate: 100, Interval: 10 * time.Millisecond})
	// A pool of 5 is tight for a demand of 100/s (8 intervals of it are 8).
	if g := tr.Allot("k", alone, 5, lim, now.Add(1500*time.Millisecond)); g != 5 {
		t.Errorf("1.5 s after one report that says 10 s: the other sidecar got %v of 5; want all (the report is stale)", g)
	}
	// Seen every 500 ms, it counts for 1.5 s (three of its seen intervals).
	tr.Allot("k2", slow, 0, lim, now)
	tr.Allot("k2", slow, 0, lim, now.Add(500*time.Millisecond))
	if g := tr.Allot("k2", alone, 5, lim, now.Add(1700*time.Millisecond)); g == 5 {
		t.Errorf("seen every 500 ms, the report no longer counted 1.2 s later: the other got all %v; want a share", g)
	}
	if g := tr.Allot("k2", alone, 5, lim, now.Add(2100*time.Millisecond)); g != 5 {
		t.Errorf("seen every 500 ms, the report still counted 1.6 s later: the other got %v of 5; want all", g)
	}
}

// TestOnePeerCannotStarveOthers: a peer holding valid credentials that
// claims the largest demand a report may carry, under as many sidecar
// names as a key holds, leaves every other peer's sidecar at least half
// of the share it gets without the attacker, whenever the others' demand
// is at least the limit's rate; and it cannot make a key tight that has
// more than half its capacity left.
func TestOnePeerCannotStarveOthers(t *testing.T) {
	iv := 10 * time.Millisecond
	for _, honest := range [][]float64{{100}, {70, 50}, {250, 50, 10}} {
		t.Run(fmt.Sprint(honest), func(t *testing.T) {
			// The key refills 0.4 units every half interval (80/s, below
			// the honest demand: it stays tight); each honest sidecar spends what it is
			// allowed, up to its demand, and its spending leaves the pool
			// by its next report, as a store would count it. The attacker
			// spends nothing.
			run := func(attack bool) []float64 {
				tr, _ := New(Options{})
				now := time.Unix(1000, 0)
				got := make([]float64, len(honest))
				pool := 0.0
				for range 600 {
					now = now.Add(iv / 2)
					pool = min(pool+0.4, 100)
					if attack {
						for j := range DefaultMaxSidecars {
							tr.Allot("k", backed(Report{Peer: "evil", Sidecar: fmt.Sprint(j), Rate: MaxRate, Interval: MinInterval}), pool, lim, now)
						}
					}
					for i, d := range honest {
						r := backed(Report{Peer: fmt.Sprint("peer", i), Sidecar: "s", Rate: d, Interval: iv})
						spent := min(max(0, tr.Allot("k", r, pool, lim, now)), d*iv.Seconds()/2, pool)
						pool -= spent
						got[i] += spent
					}
				}
				return got
			}
			fair, attacked := run(false), run(true)
			for i := range honest {
				if attacked[i] < fair[i]/2 {
					t.Errorf("sidecar of demand %v got %.0f under attack, %.0f without; want at least half", honest[i], attacked[i], fair[i])
				}
			}
		})
	}
	tr, _ := New(Options{})
	now := time.Unix(1000, 0)
	for j := range DefaultMaxSidecars {
		tr.Allot("k", backed(Report{Peer: "evil", Sidecar: fmt.Sprint(j), Rate: MaxRate, Interval: iv}), 0, lim, now)
	}
	if g := tr.Allot("k", backed(Report{Peer: "good", Sidecar: "g", Rate: 1, Interval: iv}), 51, lim, now); g != -1 {
		t.Errorf("a key with 51 of 100 left made tight by one peer's claims: allowance %v; want none", g)
	}
	if g := tr.Allot("k", backed(Report{Peer: "good", Sidecar: "g", Rate: 1, Interval: iv}), 49, lim, now); g < 0 {
		t.Errorf("a key with 49 of 100 left and a peer's claims: no allowance; want one (the rule still binds)")
	}
}

// TestTightOverTheInterval: a key is tight when what is left covers less
// than Tightness of the sidecars' reporting intervals of their demand: 40
// left is loose for a sidecar asked for 300 a second that reports every
// 10 ms (8 intervals take 24), tight for one that reports every 50 ms
// (120), as a sidecar whose flushes run late says (pkg/localtier).
func TestTightOverTheInterval(t *testing.T) {
	tr, _ := New(Options{})
	now := time.Unix(1000, 0)
	if g := tr.Allot("k", backed(Report{Sidecar: "a", Rate: 300, Interval: 10 * time.Millisecond}), 40, Limit{}, now); g != -1 {
		t.Errorf("reported every 10 ms, 40 left: allowance %v; want none", g)
	}
	if g := tr.Allot("k", backed(Report{Sidecar: "a", Rate: 300, Interval: 50 * time.Millisecond}), 40, Limit{}, now); g < 0 {
		t.Errorf("reported every 50 ms, 40 left: no allowance; want one")
	}
}

// TestHeldHoldsBack: what a sidecar still held of its last allowance when
// it reported may be spent until its answer arrives, so it is kept from
// the others, however much smaller its new allowance; and it is believed
// only up to what it was given of late and one unit: a claim of more
// holds back nothing more.
func TestHeldHoldsBack(t *testing.T) {
	tr, _ := New(Options{})
	now := time.Unix(1000, 0)
	iv := 10 * time.Millisecond
	a := backed(Report{Sidecar: "a", Rate: 1000, Interval: iv})
	b := backed(Report{Sidecar: "b", Rate: 1000, Interval: iv})
	if g := tr.Allot("k", a, 10, lim, now); g != 10 {
		t.Fatalf("alone with 10 left: %v; want 10", g)
	}
	// a reports again holding 8 of its 10 (a round trip away from its
	// answer): the pool is 8 (2 spent), its share of it 8.
	a.Held = 8
	tr.Allot("k", a, 8, lim, now.Add(iv))
	if g := tr.Allot("k", b, 8, lim, now.Add(iv+time.Millisecond)); g != 0 {
		t.Errorf("b with a holding all 8 left: %v; want 0", g)
	}
	tr2, _ := New(Options{})
	a.Held = 0
	tr2.Allot("k", a, 4, lim, now)
	a.Held = 1000 // a claim past what it was given
	tr2.Allot("k", a, 4, lim, now.Add(iv))
	var held float64
	tr2.keys.Get("k", func(ks *keyState) { held = ks.reports[0].held })
	if held != 4+heldSlack {
		t.Errorf("held %v believed after allowances of at most 4; want %v", held, 4+heldSlack)
	}
}

// TestNamesAreThePeers: a sidecar name claimed by two peers is two
// sidecars: neither report replaces the other.
func TestNamesAreThePeers(t *testing.T) {
	tr, _ := New(Options{})
	now := time.Unix(1000, 0)
	iv := 10 * time.Millisecond
	tr.Allot("k", backed(Report{Peer: "good", Sidecar: "a", Rate: 100, Interval: iv}), 4, lim, now)
	tr.Allot("k", backed(Report{Peer: "evil", Sidecar: "a", Rate: 0, Interval: iv}), 4, lim, now)
	n := 0
	tr.keys.Get("k", func(ks *keyState) { n = len(ks.reports) })
	if n != 2 {
		t.Errorf("%d reports for one name under two peers; want 2", n)
	}
}

// TestReplicasDividePool: trackers that do not see each other's reports
// (cached mode's servers) each hand out their share of the pool.
func TestReplicasDividePool(t *testing.T) {
	tr, _ := New(Options{Replicas: func() int { return 4 }})
	g := tr.Allot("k", backed(Report{Sidecar: "a", Rate: 1000, Interval: 10 * time.Millisecond}), 8, lim, time.Unix(1000, 0))
	if g != 2 {
		t.Errorf("alone on a tight key with 8 left, one of 4 replicas: %v; want 2", g)
	}
}

// TestReplicasHoldBackEachOther: replicas do not see each other's
// allowances, so each takes the others to hold the most its own sidecar
// may still admit: on a pool that shrinks, a share of what is left now is
// not handed out again while the others' larger ones are spent.
func TestReplicasHoldBackEachOther(t *testing.T) {
	tr, _ := New(Options{Replicas: func() int { return 3 }})
	now := time.Unix(1000, 0)
	iv := 10 * time.Millisecond
	r := backed(Report{Sidecar: "a", Rate: 1000, Interval: iv})
	if g := tr.Allot("k", r, 30, lim, now); g != 10 {
		t.Fatalf("one of 3 replicas, 30 left: %v; want 10", g)
	}
	// Its 10 spent and recorded, and the others' (taken as 10 each) not
	// yet: 15 left is less than the others may still hold.
	if g := tr.Allot("k", r, 15, lim, now.Add(iv)); g != 0 {
		t.Errorf("15 left with the other two taken to hold 10 each: %v; want 0", g)
	}
	// The others are taken to hold what this one may still admit: its
	// last answer, or what it says it holds unspent, if more.
	held := r
	held.Held = 10
	if g := tr.Allot("k", held, 15, lim, now.Add(2*iv)); g != 0 {
		t.Errorf("15 left, holding 10 unspent: %v; want 0", g)
	}
	// Having spent what it was given (recorded: in the pool), it takes the
	// others to have spent theirs: a third.
	if g := tr.Allot("k", r, 15, lim, now.Add(3*iv)); g != 5 {
		t.Errorf("15 left, its allowances spent: %v; want 5", g)
	}
}

func TestNewRefusesNegativeBounds(t *testing.T) {
	if _, err := New(Options{MaxBytes: -1}); err == nil {
		t.Error("MaxBytes -1: no error")
	}
}

// TestReportBackedByAsked: a report's rate weighs no more than
// MaxAskedWeight times what it was asked for (hits and refusals) over the
// time between its reports: a claim backed by nothing takes nothing from a
// sidecar that was asked for its demand, and a backed one weighs in full.
func TestReportBackedByAsked(t *testing.T) {
	tr, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	iv := 10 * time.Millisecond
	const pool = 50 // tight for 1,000 a second over 10 ms
	honest, good := 0.0, 0.0
	for range 100 {
		now = now.Add(iv)
		// Records nothing, refused nothing, claims the limit's rate.
		tr.Allot("k", Report{Peer: "evil", Sidecar: "e", Rate: MaxRate, Interval: MinInterval}, pool, Limit{Rate: 1e9, Capacity: 1e9}, now)
		g := tr.Allot("k", Report{Peer: "good", Sidecar: "g", Rate: 1000, Interval: iv, Asked: 10}, pool, Limit{Rate: 1e9, Capacity: 1e9}, now)
		honest += g
		good += pool
	}
	if honest < good {
		t.Errorf("beside an unbacked claim the honest sidecar got %.0f of %.0f; want it all", honest, good)
	}

	// Backed by what it was asked for, a report weighs its rate in full:
	// the same two reports share the pool evenly.
	tr, err = New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	sum := map[string]float64{}
	for range 400 {
		now = now.Add(iv)
		for _, id := range []string{"a", "b"} {
			sum[id] += tr.Allot("k", Report{Peer: id, Sidecar: id, Rate: 1000, Interval: iv, Asked: 10}, 20, Limit{Rate: 2000, Capacity: 2000}, now)
		}
	}
	if sum["a"] < 0.4*(sum["a"]+sum["b"]) || sum["b"] < 0.4*(sum["a"]+sum["b"]) {
		t.Errorf("two equal backed reports got %v; want even shares", sum)
	}
}
