package localbucket

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

type admission struct {
	at int64 // the bucket's clock: the latest time seen so far
	n  float64
}

// TestNeverAdmitsMoreThanTheLimit drives one key through random sequences of
// requests, with the clock mostly moving forward and sometimes back, and checks
// that
//   - over any run of admitted requests, the tokens admitted never exceed
//     burst + rate·(t_last − t_first), with t the latest time the bucket has
//     seen (a clock that goes back does not give that time back);
//   - a step back in time never increases the tokens;
//   - a denied request that can ever be allowed is allowed after RetryAfter.
func TestNeverAdmitsMoreThanTheLimit(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 0x5eed))
		lim := Limit{
			Rate:  math.Exp(rng.Float64()*12 - 4), // ~0.02 to ~3000 per second
			Burst: 1 + rng.Float64()*50,
		}
		if rng.IntN(4) == 0 {
			lim.Burst = math.Round(lim.Burst)
		}
		b := mustNew(t, Options{MaxKeys: 4})
		t0 := time.Now()
		var clock, latest int64 // nanoseconds after t0
		var admitted []admission
		var retryAt int64 = -1 // when set, the next request repeats a denied one at its retry time
		var retryN float64
		for step := range 400 {
			n := rng.Float64() * lim.Burst * 1.1
			switch {
			case retryAt >= 0:
				clock, n = retryAt, retryN
			case rng.IntN(10) == 0:
				clock -= rng.Int64N(int64(5*float64(time.Second)/lim.Rate) + 1)
			default:
				clock += rng.Int64N(int64(2*float64(time.Second)/lim.Rate) + 1)
			}
			now := t0.Add(time.Duration(clock))
			before := probe(b, "k", lim, t0.Add(time.Duration(latest)))
			if clock < latest {
				if got := probe(b, "k", lim, now); got > before {
					t.Fatalf("seed %d step %d: clock back %v: tokens %v -> %v",
						seed, step, time.Duration(latest-clock), before, got)
				}
			}
			latest = max(latest, clock)
			d := b.AllowN("k", lim, now, n)
			if retryAt >= 0 && !d.Allowed {
				t.Fatalf("seed %d step %d: AllowN(n=%v) at its RetryAfter = %+v; want allowed (limit %+v)",
					seed, step, n, d, lim)
			}
			retryAt = -1
			switch {
			case d.Allowed:
				admitted = append(admitted, admission{at: latest, n: n})
			case n <= lim.Burst && d.RetryAfter != InfDuration && rng.IntN(3) == 0:
				retryAt, retryN = clock+int64(d.RetryAfter), n
			}
		}
		checkAdmitted(t, seed, lim, admitted)
	}
}

// checkAdmitted checks every run admitted[i..j] against burst + rate·span.
func checkAdmitted(t *testing.T, seed uint64, lim Limit, admitted []admission) {
	t.Helper()
	for i := range admitted {
		sum := 0.0
		for j := i; j < len(admitted); j++ {
			sum += admitted[j].n
			span := float64(admitted[j].at-admitted[i].at) / 1e9
			bound := lim.Burst + lim.Rate*span
			if sum > bound*(1+1e-9)+1e-9 {
				t.Fatalf("seed %d: admitted %v tokens over %vs; limit %+v allows %v",
					seed, sum, span, lim, bound)
			}
		}
	}
}
