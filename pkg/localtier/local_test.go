package localtier

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// unreachable is an upstream for tests of the local pass, which never calls it.
type unreachable struct{}

func (unreachable) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest, ...grpc.CallOption) (*rlsv3.RateLimitResponse, error) {
	panic("the local pass called the upstream")
}

func localTier(t testing.TB) *Tier {
	t.Helper()
	tier, err := New(Options{Upstream: unreachable{}, Mode: Sync})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tier.Close() })
	return tier
}

// TestLocalNeverRejectsWhatGlobalAdmits is the local tier's safety property
// (ARCHITECTURE.md, "Who owns which rule"): at fraction 1 the local bucket, fed the
// admitted sequence, rejects only what the global limit would also reject.
// For every algorithm, random limits and random request sequences (bursts,
// idle gaps, costs of 0 to beyond the limit) go to the global algorithm
// (pkg/algorithm, what the stores run) and through the tier's local pass,
// which gives back the tokens of what the global limit rejects, as Sync
// mode does. Other proxies' traffic reaches the global state only. The
// local pass must admit every request the global limit admits.
func TestLocalNeverRejectsWhatGlobalAdmits(t *testing.T) {
	const sec = int64(1e6)
	for _, kind := range []algorithm.Kind{algorithm.TokenBucket, algorithm.GCRA, algorithm.SlidingWindow, algorithm.FixedWindow, algorithm.SlidingLog} {
		t.Run(kind.String(), func(t *testing.T) {
			admitted, checked := 0, 0
			for seed := range uint64(200) {
				rng := rand.New(rand.NewPCG(seed, uint64(kind)))
				p := algorithm.Params{Kind: kind, Limit: 1 + rng.Int64N(20), Window: (1 + rng.Int64N(60)) * sec}
				p.Burst = p.Limit
				if kind == algorithm.TokenBucket || kind == algorithm.GCRA {
					p.Burst = 1 + rng.Int64N(30)
				}
				tier := localTier(t)
				base := time.Now()
				epoch := int64(1_780_000_000)*sec + rng.Int64N(p.Window) // any phase of the windows
				var g algorithm.State
				var at int64
				others := rng.IntN(2) == 0
				for step := range 400 {
					switch r := rng.IntN(20); {
					case r == 0:
						at += rng.Int64N(2 * p.Window) // idle
					case r < 4:
						at += rng.Int64N(p.Window / 4)
					default:
						at += rng.Int64N(p.Window/max(1, p.Limit)) / 4 // a burst
					}
					cost := 1 + rng.Int64N(3)
					switch rng.IntN(30) {
					case 0:
						cost = 0
					case 1:
						cost = p.Limit + 1 + rng.Int64N(5)
					}
					now := epoch + at
					if others && rng.IntN(3) == 0 {
						// Another proxy's request: the global state only.
						g, _ = algorithm.Decide(g, p, now, cost, algorithm.Take)
						continue
					}
					b := &limiter.Batch{Items: []algorithm.Item{{Key: "k", Params: p, Cost: cost}}, Results: make([]algorithm.Result, 1)}
					localNow := base.Add(time.Duration(at) * time.Microsecond)
					set, local := tier.takeLocal(b, 1, localNow)
					var gr algorithm.Result
					g, gr = algorithm.Decide(g, p, now, cost, algorithm.Take)
					checked++
					if gr.Allowed && !local {
						t.Fatalf("seed %d step %d: %+v, cost %d at +%dµs: the global limit admits, the local pass rejects: %+v",
							seed, step, p, cost, at, b.Results[0])
					}
					if local && !gr.Allowed {
						tier.returnLocal(b, 1, localNow, set)
					}
					if gr.Allowed {
						admitted++
					}
				}
			}
			if admitted == 0 || admitted == checked {
				t.Fatalf("%d of %d admitted: the sequences must exercise both answers", admitted, checked)
			}
			t.Logf("%d of %d requests admitted globally, every one locally too", admitted, checked)
		})
	}
}

// TestTakeLocalAllOrNothing: a request denied by one of its limits takes
// nothing from the others.
func TestTakeLocalAllOrNothing(t *testing.T) {
	tier := localTier(t)
	now := time.Now()
	wide := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 10, Window: 3600e6, Burst: 10}
	narrow := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 1, Window: 3600e6, Burst: 1}
	b := func() *limiter.Batch {
		return &limiter.Batch{Items: []algorithm.Item{
			{Key: "wide", Params: wide, Cost: 1},
			{Key: "narrow", Params: narrow, Cost: 1},
			{Key: "after", Params: wide, Cost: 1},
		}, Results: make([]algorithm.Result, 3)}
	}
	if first := b(); !admits(tier.takeLocal(first, 1, now)) {
		t.Fatalf("first request denied: %+v", first.Results)
	}
	second := b()
	if admits(tier.takeLocal(second, 1, now)) {
		t.Fatal("second request admitted past the narrow limit of 1")
	}
	r := second.Results
	if !r[0].Allowed || r[0].Remaining != 9 || r[1].Allowed || r[1].RetryAfter != 3600e6 || !r[2].Allowed || r[2].Remaining != 9 {
		t.Errorf("results = %+v; want wide allowed with 9 left (nothing taken), narrow denied for an hour, after not taken", r)
	}
	// A shadow limit never vetoes.
	shadow := b()
	shadow.Items[1].Shadow = true
	if !admits(tier.takeLocal(shadow, 1, now)) || shadow.Results[0].Remaining != 8 {
		t.Errorf("with the narrow limit in shadow mode: %+v; want admitted, wide at 8", shadow.Results)
	}
}

func TestLocalLimit(t *testing.T) {
	const hour = 3600e6
	tests := []struct {
		p           algorithm.Params
		share       float64
		rate, burst float64
	}{
		{algorithm.Params{Kind: algorithm.TokenBucket, Limit: 3600, Window: hour, Burst: 100}, 1, 1, 100},
		{algorithm.Params{Kind: algorithm.GCRA, Limit: 3600, Window: hour, Burst: 100}, 0.5, 0.5, 50},
		{algorithm.Params{Kind: algorithm.FixedWindow, Limit: 3600, Window: hour}, 1, 1, 7200},
		{algorithm.Params{Kind: algorithm.SlidingWindow, Limit: 3600, Window: hour}, 1, 1, 3600},
		{algorithm.Params{Kind: algorithm.SlidingLog, Limit: 3600, Window: hour}, 0.25, 0.25, 900},
		{algorithm.Params{Kind: algorithm.TokenBucket, Limit: 1, Window: hour, Burst: 1}, 0.1, 0.1 / 3600, 1}, // at least one request
	}
	for _, tt := range tests {
		got := localLimit(tt.p, tt.share)
		if got.Rate != tt.rate || got.Burst != tt.burst {
			t.Errorf("localLimit(%+v, %v) = %+v; want rate %v burst %v", tt.p, tt.share, got, tt.rate, tt.burst)
		}
	}
}

// The local pass allocates nothing on a key already held.
func TestTakeLocalAllocs(t *testing.T) {
	tier := localTier(t)
	now := time.Now()
	p := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 1e9, Window: 1e6, Burst: 1e9}
	items := make([]algorithm.Item, 3)
	for i := range items {
		items[i] = algorithm.Item{Key: fmt.Sprint("key-", i), Params: p, Cost: 1}
	}
	b := &limiter.Batch{Items: items, Results: make([]algorithm.Result, len(items))}
	if avg := testing.AllocsPerRun(1000, func() { tier.takeLocal(b, 1, now) }); avg != 0 {
		t.Errorf("takeLocal allocates %v times per request; want 0", avg)
	}
}

func admits(_ took, ok bool) bool { return ok }

// TestReturnOnlyWhatWasTaken: giving back a rejected request's tokens
// returns nothing to an item that took none (a shadow limit that was
// already empty).
func TestReturnOnlyWhatWasTaken(t *testing.T) {
	tier := localTier(t)
	now := time.Now()
	one := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 1, Window: 3600e6, Burst: 1}
	ten := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 10, Window: 3600e6, Burst: 10}
	b := func() *limiter.Batch {
		return &limiter.Batch{Items: []algorithm.Item{
			{Key: "shadow", Params: one, Cost: 1, Shadow: true},
			{Key: "real", Params: ten, Cost: 1},
		}, Results: make([]algorithm.Result, 2)}
	}
	tier.takeLocal(b(), 1, now) // the shadow bucket is now empty
	second := b()
	set, ok := tier.takeLocal(second, 1, now)
	if !ok || set != 1<<1 {
		t.Fatalf("second request: admitted %v, took %b; want admitted, only the real limit took", ok, set)
	}
	tier.returnLocal(second, 1, now, set) // the upstream refused it
	check := &limiter.Batch{Items: []algorithm.Item{{Key: "shadow", Params: one}}, Results: make([]algorithm.Result, 1)}
	tier.takeLocal(check, 1, now)
	if check.Results[0].Remaining != 0 {
		t.Errorf("the empty shadow bucket holds %d after the give-back; want 0 (it took nothing)", check.Results[0].Remaining)
	}
}

// TestLocalResultWithinTheLimit: a fixed window's local bucket holds twice
// the limit, but what the reply says is left never exceeds the limit.
func TestLocalResultWithinTheLimit(t *testing.T) {
	tier := localTier(t)
	p := algorithm.Params{Kind: algorithm.FixedWindow, Limit: 100, Window: 60e6}
	b := &limiter.Batch{Items: []algorithm.Item{{Key: "fw", Params: p, Cost: 1}}, Results: make([]algorithm.Result, 1)}
	tier.takeLocal(b, 1, time.Now())
	if r := b.Results[0]; r.Remaining != 100 || r.ResetAfter != 0 {
		t.Errorf("after one of 100 from a bucket of 200: %+v; want 100 left (the limit) and nothing to reset", r)
	}
}

// TestWorth: hits sent on time are recorded in full; hits held past what
// their limit remembers (and past a retry interval) are left out, in
// proportion when only some of them are.
func TestWorth(t *testing.T) {
	tier, err := New(Options{Upstream: unreachable{}, Mode: Sync, RetryInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	now := tier.base.Add(time.Hour)
	at := func(ago time.Duration) int64 { return now.Add(-ago).Sub(tier.base).Nanoseconds() }
	fast := time.Duration(1000 * algorithm.Remembers(algorithm.Params{Kind: algorithm.TokenBucket, Limit: 100, Window: 1e6, Burst: 100})) // 1s
	slow := time.Duration(1000 * algorithm.Remembers(algorithm.Params{Kind: algorithm.FixedWindow, Limit: 100, Window: 3600e6}))          // 1h
	tests := []struct {
		name string
		h    hits
		want uint64
	}{
		{"on time", hits{n: 50, first: at(20 * time.Millisecond), last: at(time.Millisecond), memory: fast.Nanoseconds()}, 50},
		{"held 10 minutes on a 1s memory", hits{n: 60000, first: at(10 * time.Minute), last: at(10 * time.Second), memory: fast.Nanoseconds()}, 0},
		{"held 10 minutes, the last 2s of them remembered", hits{n: 6000, first: at(10 * time.Minute), last: at(time.Millisecond), memory: fast.Nanoseconds()}, 10},
		{"held 10 minutes on a 1h memory", hits{n: 6000, first: at(10 * time.Minute), last: at(time.Second), memory: slow.Nanoseconds()}, 6000},
	}
	for _, tt := range tests {
		if got := tier.worth(tt.h, now); got != tt.want {
			t.Errorf("%s: worth %d of %d; want %d", tt.name, got, tt.h.n, tt.want)
		}
	}
}
