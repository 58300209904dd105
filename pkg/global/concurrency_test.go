package global

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/pkg/algorithm"
)

// holderNames are the holders the differential tests' concurrency items
// take and give back by: few, so that they take again and give back what
// they hold, some with glob characters, some another's prefix, so that
// the Lua finds a holder's units (ZSCAN MATCH) as Go does.
var holderNames = []string{"a", "ab", "b*", "[c]?", `d\`, "req-7f3a"}

// withHolder names the holder of a concurrency item (the other kinds have
// none): one of holderNames, or for one refund in four a holder that never
// takes, whose refund frees nothing.
func withHolder(rng *rand.Rand, it *Item) {
	if it.Params.Kind != algorithm.Concurrency {
		return
	}
	it.Params.Holder = holderNames[rng.IntN(len(holderNames))]
	if it.Mode == algorithm.GiveBack && rng.IntN(4) == 0 {
		it.Params.Holder = "nobody"
	}
}

// TestConcurrencyOnRedis: a concurrency limit's units are a sorted set of
// algorithm.SlotMember names scored by the time they were taken; a refund
// frees its holder's newest, nothing of another's; and the key lives as
// long as its newest unit's TTL, no longer.
func TestConcurrencyOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	rs := newRedisStore(t, RedisOptions{Client: client, InjectTime: true})
	ctx := context.Background()
	key := Key(redistest.Prefix(t), "inflight")
	const ttl = 300_000 // µs
	t0 := int64(1_780_000_000)*sec + 123
	decide := func(holder string, at, cost int64, mode algorithm.Mode) Result {
		t.Helper()
		p := algorithm.Params{Kind: algorithm.Concurrency, Limit: 3, Window: ttl, Holder: holder}
		out := make([]Result, 1)
		if err := rs.DecideAt(ctx, []Item{{Key: key, Params: p, Cost: cost, Mode: mode}}, out, at); err != nil {
			t.Fatal(err)
		}
		return out[0]
	}
	members := func() []redis.Z {
		t.Helper()
		z, err := client.ZRangeWithScores(ctx, key, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		return z
	}

	start := time.Now()
	if r := decide("a", t0, 2, algorithm.Take); !r.Allowed || r.Remaining != 1 || r.ResetAfter != ttl {
		t.Fatalf("a takes 2 of 3: %+v; want admitted, 1 left, reset %d", r, ttl)
	}
	pttl := client.PTTL(ctx, key).Val()
	if pttl > ttl*time.Microsecond || pttl < ttl*time.Microsecond-time.Since(start)-time.Millisecond {
		t.Errorf("PTTL %v %v after the take; want the TTL, %v", pttl, time.Since(start), ttl*time.Microsecond)
	}
	// And the set's bound on unit numbers, 2, below every unit (lua/concurrency.lua).
	mark := redis.Z{Score: -(1 << 52) - 2, Member: ""}
	want := []redis.Z{mark, {Score: float64(t0), Member: "a"}, {Score: float64(t0), Member: "a\x002"}}
	if z := members(); !slices.Equal(z, want) {
		t.Fatalf("stored %#v; want %#v", z, want)
	}
	if r := decide("b", t0+1, 2, algorithm.Take); r.Allowed || r.RetryAfter != ttl-1 {
		t.Fatalf("b takes 2 with 1 left: %+v; want refused until a's units expire (%d µs)", r, ttl-1)
	}
	if r := decide("b", t0+2, 5, algorithm.GiveBack); r.Remaining != 1 {
		t.Fatalf("b, holding nothing, gives 5 back: %+v; want still 1 left", r)
	}
	if r := decide("a", t0+3, 1, algorithm.GiveBack); r.Remaining != 2 {
		t.Fatalf("a gives 1 back: %+v; want 2 left", r)
	}
	want = want[:2] // its newest unit, the highest number of equal times, went
	if z := members(); !slices.Equal(z, want) {
		t.Fatalf("stored %#v; want %#v", z, want)
	}
	// Nothing frees a's last unit: the key goes with its TTL, on Redis's clock.
	for deadline := time.Now().Add(10 * time.Second); client.Exists(ctx, key).Val() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the key still holds %#v, PTTL %v, 10 s after its TTL of %v", members(), client.PTTL(ctx, key).Val(), ttl*time.Microsecond)
		}
	}
}

// TestConcurrencyHoldersFollowTheirRequests: a fused call carries the
// holders of its requests' concurrency items after the packed requests;
// each item reads its own, past items that carry none and past a request
// that fails.
func TestConcurrencyHoldersFollowTheirRequests(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	rs := newRedisStore(t, RedisOptions{Client: client, InjectTime: true})
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	key, bad := Key(prefix, "inflight"), Key(prefix, "bad")
	if err := client.Set(ctx, bad, "x", 0).Err(); err != nil { // a string where a sorted set belongs
		t.Fatal(err)
	}
	conc := func(holder string) algorithm.Params {
		return algorithm.Params{Kind: algorithm.Concurrency, Limit: 10, Window: 3600 * sec, Holder: holder}
	}
	bucket := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 10, Window: sec, Burst: 10}
	requests := [][]Item{
		{{Key: Key(prefix, "bucket"), Params: bucket, Cost: 1}, {Key: key, Params: conc("x"), Cost: 1}},
		{{Key: bad, Params: conc("y"), Cost: 1}},
		{{Key: key, Params: conc("z"), Cost: 2}, {Key: Key(prefix, "bucket"), Params: bucket, Cost: 1}},
		{{Key: key, Params: conc("x"), Cost: 1, Mode: algorithm.GiveBack}},
	}
	now := int64(1_780_000_000) * sec
	var batch []ref
	for _, items := range requests {
		batch = append(batch, newRef(rs.decideCall(items, now)))
	}
	if groups := rs.fuse(batch); len(groups) != 1 {
		t.Fatalf("%d script calls; want the requests fused into one", len(groups))
	} else {
		rs.exec(groups)
	}
	for i, rc := range batch {
		out := make([]Result, len(requests[i]))
		err := rc.c.err
		if err == nil {
			_, err = readDecide(rc.c.reply, requests[i], out)
		}
		if (i == 1) != (err != nil) {
			t.Errorf("request %d: error %v; want an error for request 1 only", i, err)
		}
	}
	z, err := client.ZRange(ctx, key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"", "z", "z\x002"}; !slices.Equal(z, want) {
		t.Errorf("held %q; want %q: x took and gave back, z took 2 (and the bound on numbers)", z, want)
	}
}

// TestConcurrencyRefundKeepsTheFirstUnits: a cross-slot refund of part of
// a holder's take frees the units Go's would, its newest: the highest
// numbers, so that the holder's next take is numbered as in Go.
func TestConcurrencyRefundKeepsTheFirstUnits(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	rs := newRedisStore(t, RedisOptions{Client: client, InjectTime: true})
	ctx := context.Background()
	key := Key(redistest.Prefix(t), "inflight")
	p := algorithm.Params{Kind: algorithm.Concurrency, Limit: 10, Window: 3600 * sec, Holder: "r"}
	res := make([]Result, 1)
	taken, err := rs.decideGroup(ctx, []Item{{Key: key, Params: p, Cost: 3}}, res, int64(1_780_000_000)*sec, time.Time{})
	if err != nil || !res[0].Allowed {
		t.Fatalf("take 3: %+v, %v", res, err)
	}
	if err := rs.refundGroup(ctx, []Item{{Key: key, Params: p, Cost: 2}}, res, taken, time.Time{}); err != nil {
		t.Fatal(err)
	}
	s, _ := algorithm.Decide(algorithm.State{}, p, taken, 3, algorithm.Take)
	s = algorithm.Refund(s, p, taken, 2)
	z, err := client.ZRange(ctx, key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Slots) != 1 || !slices.Equal(z, []string{"", s.Slots[0].Member}) {
		t.Errorf("after refunding 2 of 3: held %q (and the bound on numbers); Go holds %+v", z, s.Slots)
	}
}

// TestConcurrencyLargeKey: a key far past Redis's small encoding (a
// hashed set, which ZSCAN walks with a cursor) and writes of more units
// than one call's arguments hold: a force of 2^32 on a limit of 2,000
// holds 4,000 units (the debt cap), then refunds and takes by its holder
// and another agree with Go's.
func TestConcurrencyLargeKey(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	rs := newRedisStore(t, RedisOptions{Client: client, InjectTime: true})
	mem, err := NewMemory(MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := Key(redistest.Prefix(t), "inflight")
	now := int64(1_780_000_000) * sec
	for i, step := range []struct {
		holder string
		cost   int64
		mode   algorithm.Mode
		held   int64
	}{
		{"h", 1 << 32, algorithm.Force, 4000},
		{"g", 1, algorithm.Take, 4000},
		{"h", 1500, algorithm.GiveBack, 2500},
		{"g", 10, algorithm.Take, 2500},
		{"h", 5, algorithm.Take, 2500},
		{"h", 600, algorithm.GiveBack, 1900},
		{"g", 10, algorithm.Take, 1910},
		{"g", 1 << 32, algorithm.GiveBack, 1900},
		{"h", 1 << 32, algorithm.GiveBack, 0},
	} {
		now += sec
		p := algorithm.Params{Kind: algorithm.Concurrency, Limit: 2000, Window: 3600 * sec, Holder: step.holder}
		items := []Item{{Key: key, Params: p, Cost: step.cost, Mode: step.mode}}
		got, want := make([]Result, 1), make([]Result, 1)
		if err := rs.DecideAt(ctx, items, got, now); err != nil {
			t.Fatal(err)
		}
		if err := mem.DecideAt(items, want, now); err != nil {
			t.Fatal(err)
		}
		if got[0] != want[0] {
			t.Fatalf("step %d (%s: %d, mode %d): lua %+v; go %+v", i, step.holder, step.cost, step.mode, got[0], want[0])
		}
		members := step.held
		if members > 0 {
			members++ // the bound on unit numbers
		}
		if n := client.ZCard(ctx, key).Val(); n != members {
			t.Fatalf("step %d: %d members stored; want %d", i, n, members)
		}
	}
	if n := client.Exists(ctx, key).Val(); n != 0 {
		t.Errorf("every unit given back, the key remains (%d)", n)
	}
}
