package share

import (
	"cmp"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/algorithm"
)

// model is a flood on one key through n async sidecars, in simulated
// time: each sidecar decides on its local bucket (fraction 1), its flag
// cache and its allowance, and records its hits with the store every flush
// interval at its own phase, the allowance arriving one round trip later,
// less what it spent in that round trip (pkg/localtier), its report saying
// what it still held. Its demand is a share of the offered rate, arriving
// evenly.
type model struct {
	p        algorithm.Params
	weights  []float64 // demand per sidecar, summing to 1
	offered  float64   // × the limit's rate
	interval time.Duration
	rtt      time.Duration
	duration time.Duration
}

type modelSidecar struct {
	tokens, due float64 // local bucket; arrivals not yet served
	updated     int64
	allowance   float64 // -1: none
	until       int64
	flagged     int64 // over limit until then
	hits, asked float64
	admitted    float64
	spent       float64 // units taken from allowances, ever
	phase       int64
	reported    int64   // when it last reported the key
	pending     []grant // answers on their way back
}

type grant struct {
	at, flag int64
	amount   float64
	spent    float64 // the sidecar's spent when it reported
}

// outcome: what the sidecars admitted and what one exact limiter fed the
// same arrivals admits, and per sidecar what it got of its demand's share
// of the exact count.
type outcome struct {
	admitted, exact float64
	worstShare      float64
}

func (m model) run(t *testing.T) outcome {
	t.Helper()
	tr, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	const step = int64(100)                          // µs
	rate := float64(m.p.Limit) / float64(m.p.Window) // per µs
	capacity := float64(algorithm.Capacity(m.p))
	iv := m.interval.Microseconds()
	sc := make([]modelSidecar, len(m.weights))
	for i := range sc {
		sc[i] = modelSidecar{tokens: capacity, allowance: -1, phase: int64(i) * iv / int64(len(sc)) / step * step}
	}
	var global, exactSt algorithm.State
	exact, exactDue := 0.0, 0.0
	start := int64(1_000_000_000) // away from 0: windows aligned anywhere
	end := start + m.duration.Microseconds()
	for now := start; now < end; now += step {
		arrive := m.offered * rate * float64(step)
		exactDue += arrive
		for exactDue >= 1 {
			exactDue--
			var r algorithm.Result
			if exactSt, r = algorithm.Decide(exactSt, m.p, now, 1, algorithm.Take); r.Allowed {
				exact++
			}
		}
		for i := range sc {
			s := &sc[i]
			for len(s.pending) > 0 && s.pending[0].at <= now {
				g := s.pending[0]
				s.pending = s.pending[1:]
				// What it took from its allowance since it reported is not
				// in the pool the answer was taken of.
				amount := g.amount
				if amount >= 0 {
					amount = max(0, amount-(s.spent-g.spent))
				}
				s.allowance, s.until, s.flagged = amount, now+lapse*iv, g.flag
			}
			s.tokens = min(capacity, s.tokens+float64(now-s.updated)*rate)
			s.updated = now
			s.due += arrive * m.weights[i]
			for ; s.due >= 1; s.due-- {
				if now < s.flagged {
					continue // answered from the flag cache, not counted
				}
				s.asked++
				// A lapsed allowance is spent: the key stays bound until the
				// server says it is not tight.
				bound := s.allowance >= 0
				if bound && now >= s.until {
					s.allowance = 0
				}
				if s.tokens < 1 || (bound && s.allowance < 1) {
					if bound && s.tokens >= 1 {
						s.flagged = now + iv // flagged until the next flush, as the sidecar does
					}
					continue
				}
				s.tokens--
				if bound {
					s.allowance--
					s.spent++
				}
				s.hits++
				s.admitted++
			}
			if (now-start-s.phase)%iv != 0 || (s.hits == 0 && s.asked == 0) {
				continue
			}
			// Demand since the last report of the key, at least one interval.
			since := max(iv, now-s.reported)
			s.reported = now
			// The flush: the hits recorded in full, the demand reported.
			var r algorithm.Result
			global, r = algorithm.Decide(global, m.p, now, int64(s.hits), algorithm.Force)
			g := tr.Allot("k", Report{Peer: fmt.Sprint(i), Sidecar: fmt.Sprint(i), Rate: s.asked / (float64(since) / 1e6), Interval: m.interval, Held: max(0, s.allowance), Asked: s.asked},
				float64(r.Remaining), Limit{Rate: rate * 1e6, Capacity: capacity}, time.UnixMicro(now))
			ans := grant{at: now + m.rtt.Microseconds(), amount: g, spent: s.spent}
			if g < 0 && !r.Allowed {
				ans.flag = now + r.RetryAfter // today's flag, on keys not tight
			}
			s.pending = append(s.pending, ans)
			s.hits, s.asked = 0, 0
		}
	}
	o := outcome{exact: exact, worstShare: math.Inf(1)}
	for i := range sc {
		o.admitted += sc[i].admitted
		o.worstShare = min(o.worstShare, sc[i].admitted/(exact*m.weights[i]))
	}
	return o
}

func zipfWeights(n int) []float64 {
	w := make([]float64, n)
	sum := 0.0
	for i := range w {
		w[i] = 1 / math.Pow(float64(i+1), 1.1)
		sum += w[i]
	}
	for i := range w {
		w[i] /= sum
	}
	return w
}

func even(n int) []float64 {
	w := make([]float64, n)
	for i := range w {
		w[i] = 1 / float64(n)
	}
	return w
}

// TestModel runs the rule over many sidecars and demands: what the
// sidecars admit against what one exact limiter admits of the same
// arrivals (at most 1.05 of it in a flood, at least 0.97 at 1.5× the
// limit), and the worst-served sidecar's part of its fair share (its
// demand's share of the exact count).
func TestModel(t *testing.T) {
	sec := int64(time.Second / time.Microsecond)
	kinds := []algorithm.Params{
		{Kind: algorithm.TokenBucket, Limit: 100, Window: sec, Burst: 100},
		{Kind: algorithm.SlidingWindow, Limit: 100, Window: sec},
		{Kind: algorithm.FixedWindow, Limit: 100, Window: sec},
		{Kind: algorithm.SlidingLog, Limit: 100, Window: sec},
	}
	// Up to ten sidecars a key the rule holds the figures; with a
	// hundred, most report a key seldom and their shares of a small pool
	// round to nothing, so the bounds there are what the rule does today,
	// kept from getting worse (README: the overshoot bound).
	cases := []struct {
		name            string
		weights         []float64
		offered         float64
		least, most     float64 // bounds on admitted / exact
		worstShareAbove float64
		rtt             time.Duration // default 1 ms
	}{
		// The tracker rounds at random (roundRandom): the worst-served
		// of three even sidecars gets 0.50–0.66 of its share from run to
		// run (token_bucket, 31 runs; 0.50 failed a bound of 0.5 once).
		{"3 even, flood", even(3), 7, 0.95, 1.05, 0.4, 0},
		{"3 even, 1.5x", even(3), 1.5, 0.97, 1.05, 0.55, 0},
		{"80/10/10, flood", []float64{0.8, 0.1, 0.1}, 7, 0.95, 1.05, 0.6, 0},
		{"10 zipf, flood", zipfWeights(10), 7, 0.95, 1.1, 0.1, 0},
		{"100 zipf, flood", zipfWeights(100), 7, 0.9, 1.7, 0, 0},
		{"100 even, 1.5x", even(100), 1.5, 0.75, 1.3, 0.3, 0},
		// Answers a round trip of two flush intervals away, as on a
		// saturated machine: before answers were taken less what their
		// round trip spent, and allowances given of a larger pool were
		// held back in full, windows and logs took 1.07 × exact here.
		{"3 even, flood, 20 ms round trips", even(3), 7, 0.95, 1.03, 0.4, 20 * time.Millisecond},
		{"80/10/10, flood, 20 ms round trips", []float64{0.8, 0.1, 0.1}, 7, 0.95, 1.03, 0.4, 20 * time.Millisecond},
	}
	for _, p := range kinds {
		for _, c := range cases {
			t.Run(p.Kind.String()+"/"+c.name, func(t *testing.T) {
				rtt := cmp.Or(c.rtt, time.Millisecond)
				o := model{p: p, weights: c.weights, offered: c.offered, interval: 10 * time.Millisecond,
					rtt: rtt, duration: 5 * time.Second}.run(t)
				ratio := o.admitted / o.exact
				t.Logf("admitted %.0f, exact %.0f: %.3f; worst-served sidecar %.2f of its share", o.admitted, o.exact, ratio, o.worstShare)
				if ratio > c.most || ratio < c.least {
					t.Errorf("admitted %.3f of the exact count; want within [%.2f, %.2f]", ratio, c.least, c.most)
				}
				if o.worstShare < c.worstShareAbove {
					t.Errorf("the worst-served sidecar got %.2f of its share; want at least %.2f", o.worstShare, c.worstShareAbove)
				}
			})
		}
	}
}
