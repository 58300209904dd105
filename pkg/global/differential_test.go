package global

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/pkg/algorithm"
)

const sec = int64(1_000_000)

// TestDifferentialMemoryVsLua runs random sequences of (time step, keys,
// costs, limits) through the in-memory store and the Lua scripts on a real
// redis-server, with time injected into both, and demands the same results.
//
// Redis expires keys on its own clock, not the injected one, so a key the
// memory store has expired can still be in Redis. Going forward that makes
// no difference (expired state equals a fresh key's), so the "forward" run
// lets keys expire and never goes back, its clock never slower than
// Redis's; the "backward" run moves the clock back and forth on limits
// whose state lasts longer than the run.
// It runs on the decide function (FCALL) and on the script alone
// (ScriptsOnly, what a Redis without functions gets).
func TestDifferentialMemoryVsLua(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := context.Background()
	for _, scripts := range []bool{false, true} {
		// Two servers on the Redis, one storing states as text and one
		// packed, each step decided by either: a rolling switch of
		// -redis-state-format, both ways, at every step.
		var rs []*Redis
		for _, packed := range []bool{false, true} {
			r, err := NewRedis(RedisOptions{Client: client, InjectTime: true, Timeout: 5e9, ScriptsOnly: scripts, PackedState: packed})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Close() })
			rs = append(rs, r)
		}
		for _, backward := range []bool{false, true} {
			for _, kind := range algorithm.Kinds() {
				name := kind.String() + "/forward"
				if backward {
					name = kind.String() + "/backward"
				}
				if scripts {
					name += "/script"
				}
				t.Run(name, func(t *testing.T) { differential(t, ctx, rs, kind, backward) })
			}
		}
	}
}

func differential(t *testing.T, ctx context.Context, stores []*Redis, kind algorithm.Kind, backward bool) {
	mem, err := NewMemory(MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	prefix := redistest.Prefix(t)
	rng := rand.New(rand.NewPCG(uint64(kind), 7))
	// Limits with awkward rates so the floating point gets exercised.
	params := []algorithm.Params{
		{Kind: kind, Limit: 7, Window: 3 * sec, Burst: 5},
		{Kind: kind, Limit: 100, Window: 60 * sec, Burst: 100},
		{Kind: kind, Limit: 3, Window: sec, Burst: 1},
		// Windows that start off the epoch, as a calendar limit's do.
		{Kind: kind, Limit: 4, Window: 7 * sec, Burst: 4, Origin: 1_780_000_000*sec + 123_457},
		// A burst above the limit: a bucket's debt stops at one window's
		// refill, not at one burst.
		{Kind: kind, Limit: 2, Window: 5 * sec, Burst: 9},
	}
	if backward {
		// States that outlive the run: hour windows, slow refill.
		params = []algorithm.Params{
			{Kind: kind, Limit: 70, Window: 3600 * sec, Burst: 50},
			{Kind: kind, Limit: 9, Window: 7200 * sec, Burst: 13},
		}
	}
	now := int64(1_780_000_003)*sec + rng.Int64N(sec)
	var admitted, denied int
	last := time.Now()
	for step := 0; step < 3000; step++ {
		before := now
		switch r := rng.IntN(10); {
		case r == 0 && !backward:
			now += rng.Int64N(5 * sec) // idle: windows roll, keys expire
		case r < 3 && backward:
			now -= rng.Int64N(sec / 2) // the clock goes back a little
		default:
			now += rng.Int64N(sec / 10)
		}
		if !backward {
			// A step takes at least the real time it took: Redis expires a
			// key (its TTL set from the injected clock) on its own, and the
			// memory store must have expired it too by then. A loaded
			// machine can pause between two steps for longer than a 3-a-
			// second bucket's third of a second.
			now = max(now, before+time.Since(last).Microseconds()+1)
			last = time.Now()
		}
		n := 1 + rng.IntN(3)
		items := make([]Item, n)
		for i := range items {
			k := rng.IntN(5)
			items[i] = Item{
				Key:    Key(prefix, fmt.Sprint(k)),
				Params: params[k%len(params)],
				Cost:   rng.Int64N(4),
				Shadow: rng.IntN(8) == 0,
			}
			switch rng.IntN(20) {
			case 0:
				// Recorded hits, up to past the debt cap.
				items[i].Mode = algorithm.Force
				items[i].Cost = rng.Int64N(3*items[i].Params.Limit + 1)
				if rng.IntN(4) == 0 {
					items[i].Cost = 1 << 32 // the largest a request carries
				}
				if rng.IntN(2) == 0 {
					// Admitted a while ago (algorithm.Record), past a
					// window and before now included.
					items[i].Age = rng.Int64N(2*items[i].Params.Window+2) - 1
					if backward {
						// Within half a window: the states must outlive
						// the run, and a record placed a window back
						// expires within µs, in Redis by its own clock.
						items[i].Age = rng.Int64N(items[i].Params.Window / 2)
					}
				}
			case 1, 2:
				// The reference's counting: every hit counts.
				items[i].Mode = algorithm.Count
			case 3, 4, 5:
				// Refunds (Envoy's is_negative_hits), up to past what the
				// key could hold.
				items[i].Mode = algorithm.GiveBack
				if rng.IntN(4) == 0 {
					items[i].Cost = rng.Int64N(3*items[i].Params.Limit + 1)
				}
			}
			withHolder(rng, &items[i])
		}
		want := make([]Result, n)
		got := make([]Result, n)
		if err := mem.DecideAt(items, want, now); err != nil {
			t.Fatal(err)
		}
		if err := stores[rng.IntN(len(stores))].DecideAt(ctx, items, got, now); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		for i := range items {
			w, g := want[i], got[i]
			if w.Allowed {
				admitted++
			} else {
				denied++
			}
			// Durations may differ by 1µs: a ceiling of a quotient that
			// lands within a rounding error of a whole µs.
			if g.Allowed != w.Allowed || g.Remaining != w.Remaining || abs(g.RetryAfter-w.RetryAfter) > 1 || abs(g.ResetAfter-w.ResetAfter) > 1 || math.Abs(g.Left-w.Left) > 1e-6 || math.Abs(g.Given-w.Given) > 1e-6 {
				t.Fatalf("step %d item %d (%+v) at %d: lua %+v; memory %+v", step, i, items[i], now, g, w)
			}
		}
	}
	if admitted == 0 || denied == 0 {
		t.Fatalf("admitted %d, denied %d: the sequence must exercise both", admitted, denied)
	}
	t.Logf("%d admitted, %d denied, all equal", admitted, denied)
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// TestDifferentialFusedRequests: a writer fuses the requests queued
// together into one script call. Random batches of requests (keys repeated
// within and across requests, every algorithm, costs, shadow and Force
// items, each request at its own injected time) go through one fused call
// and, one by one, through the in-memory store: the results must agree, as
// if each request had been its own call.
func TestDifferentialFusedRequests(t *testing.T) {
	srv := redistest.Start(t)
	rs, err := NewRedis(RedisOptions{Client: srv.Client(t), InjectTime: true, Timeout: 5e9})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	mem, err := NewMemory(MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	prefix := redistest.Prefix(t)
	rng := rand.New(rand.NewPCG(11, 12))
	var params []algorithm.Params
	for _, kind := range algorithm.Kinds() {
		params = append(params,
			algorithm.Params{Kind: kind, Limit: 5, Window: 3600 * sec, Burst: 4},
			algorithm.Params{Kind: kind, Limit: 40, Window: 7200 * sec, Burst: 40},
			algorithm.Params{Kind: kind, Limit: 6, Window: 5400 * sec, Burst: 6, Origin: 1_779_999_000*sec + 777})
	}
	now := int64(1_780_000_003)*sec + rng.Int64N(sec)
	fused, compared := 0, 0
	for round := 0; round < 300; round++ {
		var batch []ref
		var requests [][]Item
		var want [][]Result
		for range 1 + rng.IntN(10) {
			now += rng.Int64N(sec)
			items := make([]Item, 1+rng.IntN(3))
			for i := range items {
				k := rng.IntN(2 * len(params)) // two keys per limit, so requests collide
				items[i] = Item{Key: Key(prefix, fmt.Sprint(k)), Params: params[k%len(params)], Cost: rng.Int64N(3), Shadow: rng.IntN(8) == 0}
				switch rng.IntN(10) {
				case 0:
					items[i].Mode = algorithm.Force
					items[i].Age = rng.Int64N(3 * sec) // admitted a while ago: algorithm.Record
				case 1:
					items[i].Mode = algorithm.Count
				case 2:
					items[i].Mode = algorithm.GiveBack
				}
				withHolder(rng, &items[i])
			}
			w := make([]Result, len(items))
			if err := mem.DecideAt(items, w, now); err != nil {
				t.Fatal(err)
			}
			requests, want = append(requests, items), append(want, w)
			batch = append(batch, newRef(rs.decideCall(items, now)))
		}
		rs.exec(rs.fuse(batch))
		fused++
		for i, rc := range batch {
			c := rc.c
			if c.err != nil {
				t.Fatalf("round %d request %d: %v", round, i, c.err)
			}
			got := make([]Result, len(requests[i]))
			if _, err := readDecide(c.reply, requests[i], got); err != nil {
				t.Fatal(err)
			}
			for j := range got {
				g, w := got[j], want[i][j]
				compared++
				if g.Allowed != w.Allowed || g.Remaining != w.Remaining || abs(g.RetryAfter-w.RetryAfter) > 1 || abs(g.ResetAfter-w.ResetAfter) > 1 || math.Abs(g.Left-w.Left) > 1e-6 || math.Abs(g.Given-w.Given) > 1e-6 {
					t.Fatalf("round %d request %d item %d (%+v): fused lua %+v; memory %+v", round, i, j, requests[i][j], g, w)
				}
			}
		}
	}
	t.Logf("%d fused calls, %d decisions, all equal", fused, compared)
}

// goStates is pkg/algorithm run directly on a map of states, with the
// expiry a store gives them: the Go side of the refund differential.
//
// Redis expires a key on its own clock, not on the injected one: a key
// set to live a few milliseconds (a bucket nearly full) may be gone there
// when the test's next call comes later in real time than on the injected
// clock, while the model still holds it (a run failed so: Lua answered a
// full bucket, 5, the model 4.996 with 1.6 ms to go). written and ttl say
// which keys Redis may have dropped, so decideLike can drop them too.
type goStates struct {
	m       map[string]algorithm.State
	expires map[string]int64
	written map[string]time.Time     // when the call that last set the key's TTL began
	ttl     map[string]time.Duration // that TTL
	began   time.Time                // when the current call began
}

func newGoStates() *goStates {
	return &goStates{m: map[string]algorithm.State{}, expires: map[string]int64{},
		written: map[string]time.Time{}, ttl: map[string]time.Duration{}}
}

// mayBeGone says whether Redis may have expired key by its own clock.
func (g *goStates) mayBeGone(key string) bool {
	w, ok := g.written[key]
	return ok && time.Since(w) >= g.ttl[key]-time.Millisecond
}

// decideLike is decide, for a call to Redis that began at began and
// answered got: where the answers differ and Redis may have expired some
// of the items' keys on its clock, it decides again with those keys
// dropped from the model, as Redis did. The caller compares the results.
func (g *goStates) decideLike(items []Item, now int64, began time.Time, got []Result) []Result {
	type saved struct {
		s      algorithm.State
		exp    int64
		had    bool
		w      time.Time
		ttl    time.Duration
		hadTTL bool
	}
	before := map[string]saved{}
	for _, it := range items {
		s, had := g.m[it.Key]
		w, hadTTL := g.written[it.Key]
		before[it.Key] = saved{s, g.expires[it.Key], had, w, g.ttl[it.Key], hadTTL}
	}
	gone := map[string]bool{}
	for k := range before {
		gone[k] = g.mayBeGone(k)
	}
	g.began = began
	want := g.decide(items, now)
	if !differ(got, want) {
		return want
	}
	retry := false
	for k, b := range before {
		delete(g.m, k)
		delete(g.expires, k)
		delete(g.written, k)
		delete(g.ttl, k)
		if gone[k] {
			retry = true
			continue
		}
		if b.had {
			g.m[k], g.expires[k] = b.s, b.exp
		}
		if b.hadTTL {
			g.written[k], g.ttl[k] = b.w, b.ttl
		}
	}
	if !retry {
		return want
	}
	return g.decide(items, now)
}

func (g *goStates) state(key string, now int64) algorithm.State {
	if g.expires[key] <= now {
		return algorithm.State{}
	}
	return g.m[key]
}

func (g *goStates) decide(items []Item, now int64) []Result {
	states := make([]algorithm.State, len(items))
	for i := range items {
		states[i] = g.state(items[i].Key, now)
	}
	out := make([]Result, len(items))
	if algorithm.DecideAll(items, states, now, out) {
		for i := range items {
			if algorithm.LastOfKey(items, i) {
				g.m[items[i].Key], g.expires[items[i].Key] = states[i], now+out[i].ResetAfter
				// Lua's TTL: the reset in ms, rounded up.
				g.written[items[i].Key] = g.began
				g.ttl[items[i].Key] = time.Duration((out[i].ResetAfter+999)/1000) * time.Millisecond
			}
		}
	}
	return out
}

// TestDifferentialRefund holds the refund script to algorithm.Refund, for
// every algorithm: random takes, some refunded at once as a request across
// Cluster slots would be, then every key checked on both sides.
func TestDifferentialRefund(t *testing.T) {
	srv := redistest.Start(t)
	// A server storing states as text and one packed, each step's take and
	// refund by either: a refund rewrites a state as it found it.
	stores := []*Redis{
		newRedisStore(t, RedisOptions{Client: srv.Client(t), InjectTime: true}),
		newRedisStore(t, RedisOptions{Client: srv.Client(t), InjectTime: true, PackedState: true}),
	}
	ctx := context.Background()
	for _, kind := range algorithm.Kinds() {
		t.Run(kind.String(), func(t *testing.T) {
			prefix := redistest.Prefix(t)
			rng := rand.New(rand.NewPCG(uint64(kind), 13))
			params := []algorithm.Params{
				{Kind: kind, Limit: 7, Window: 3 * sec, Burst: 5},
				{Kind: kind, Limit: 30, Window: 20 * sec, Burst: 40},
			}
			keys := make([]string, 3)
			for i := range keys {
				keys[i] = Key(prefix, fmt.Sprint(i))
			}
			g := newGoStates()
			now := int64(1_780_000_003)*sec + rng.Int64N(sec)
			refunds := 0
			for step := range 1500 {
				now += rng.Int64N(sec / 5)
				items := make([]Item, 1+rng.IntN(2))
				for i := range items {
					k := rng.IntN(len(keys))
					items[i] = Item{Key: keys[k], Params: params[k%len(params)], Cost: rng.Int64N(4), Shadow: rng.IntN(8) == 0}
					if rng.IntN(12) == 0 {
						// Hits a sidecar admitted, past the limit: a sliding
						// log's debt, which a refund gives back first.
						items[i].Mode, items[i].Cost = algorithm.Force, rng.Int64N(2*items[i].Params.Limit+1)
					}
					withHolder(rng, &items[i])
				}
				got := make([]Result, len(items))
				began := time.Now()
				rs := stores[rng.IntN(len(stores))]
				taken, err := rs.decideGroup(ctx, items, got, now, time.Time{})
				if err != nil {
					t.Fatal(err)
				}
				compare(t, step, items, got, g.decideLike(items, now, began, got))
				if !groupVetoed(items, got) && rng.IntN(3) == 0 {
					for i, it := range items {
						if got[i].Allowed && it.Cost > 0 && it.Mode == algorithm.Take {
							g.m[it.Key] = algorithm.Refund(g.state(it.Key, now), it.Params, now, it.Cost)
						}
					}
					if err := stores[rng.IntN(len(stores))].refundGroup(ctx, items, got, taken, time.Time{}); err != nil {
						t.Fatal(err)
					}
					refunds++
				}
				for k, key := range keys {
					check := []Item{{Key: key, Params: params[k%len(params)]}}
					withHolder(rng, &check[0]) // any: a zero-cost check takes nothing
					got := make([]Result, 1)
					began := time.Now()
					if _, err := rs.decideGroup(ctx, check, got, now, time.Time{}); err != nil {
						t.Fatal(err)
					}
					compare(t, step, check, got, g.decideLike(check, now, began, got))
				}
			}
			if refunds == 0 {
				t.Fatal("no refund exercised")
			}
			t.Logf("%d refunds, all equal", refunds)
		})
	}
}

func compare(t *testing.T, step int, items []Item, got, want []Result) {
	t.Helper()
	for i := range items {
		if differ(got[i:i+1], want[i:i+1]) {
			t.Fatalf("step %d item %d (%+v): lua %+v; go %+v", step, i, items[i], got[i], want[i])
		}
	}
}

// differ says whether two stores' answers differ by more than rounding.
func differ(got, want []Result) bool {
	for i := range got {
		g, w := got[i], want[i]
		if g.Allowed != w.Allowed || g.Remaining != w.Remaining || abs(g.RetryAfter-w.RetryAfter) > 1 || abs(g.ResetAfter-w.ResetAfter) > 1 || math.Abs(g.Given-w.Given) > 1e-6 {
			return true
		}
	}
	return false
}
