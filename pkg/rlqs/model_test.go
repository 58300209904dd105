package rlqs

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"

	"github.com/sluicehq/sluice/internal/testkit/rlqsenvoy"
	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/global"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/peerauth"
)

const modelLimits = `domain: quota
descriptors:
  - key: name
    value: bucket
    rate_limit: {name: bucket, unit: second, requests_per_unit: 100}
  - key: name
    value: window
    rate_limit: {name: window, unit: minute, requests_per_unit: 6000, algorithm: fixed_window}
  - key: name
    value: bucket1k
    rate_limit: {name: bucket1k, unit: second, requests_per_unit: 1000}
  - key: name
    value: window1k
    rate_limit: {name: window1k, unit: minute, requests_per_unit: 60000, algorithm: fixed_window}
  - key: name
    value: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: name
    value: shadow
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {name: files, unit: second, requests_per_unit: 100}
`

// anyone admits every caller.
type anyone struct{}

func (anyone) Authenticate(context.Context) (string, peerauth.Refusal) { return "envoy", "" }

// clocked is a memory store deciding at the simulation's time.
type clocked struct {
	m   *global.Memory
	now func() time.Time
}

func (c clocked) Decide(_ context.Context, items []algorithm.Item, out []algorithm.Result) error {
	return c.m.DecideAt(items, out, c.now().UnixMicro())
}

// sim is a fleet of model Envoys on one Service, in simulated time: each
// step the Envoys are offered their requests, tick, and get the answers
// (and the pushes) at once.
type sim struct {
	t      *testing.T
	now    time.Time
	svcs   []*Service // the server replicas, the Envoys dealt round them
	svc    *Service   // the first
	envoys []*simEnvoy
	rng    *rand.Rand // nil: evenly spaced requests
	// every is the Envoys' report period; 0: Envoy's own (5 s).
	every time.Duration
	// resplitAt is when the replicas last split again (Service.Run).
	resplitAt time.Time
}

type simEnvoy struct {
	env             *rlqsenvoy.Envoy
	svc             *Service
	ss              *stream
	queue           []*rlqsv3.RateLimitQuotaResponse
	rate, acc       float64 // requests offered a second
	asked, admitted int
	poisson         struct{ mean, limit float64 } // e^-mean, for arrivals
}

type simStream struct {
	s *sim
	e *simEnvoy
}

func (st simStream) Send(m *rlqsv3.RateLimitQuotaUsageReports) error {
	resp, err := st.e.svc.report(context.Background(), st.e.ss, m)
	if err != nil {
		return err
	}
	if len(resp.GetBucketAction()) > 0 {
		st.e.queue = append(st.e.queue, resp)
	}
	return nil
}

func newSim(t *testing.T, start time.Time) *sim { return newReplicas(t, start, 1) }

// memPeers is global.FleetDemand in memory, for replicas in one process.
type memPeers struct {
	now   func() time.Time
	words map[string]map[int]peerWord
}

type peerWord struct {
	d, handed float64
	until     time.Time
}

type peerOf struct {
	p  *memPeers
	id int
}

func (p peerOf) Demand(_ context.Context, ttl time.Duration, words []PeerWord) error {
	now := p.p.now()
	for i := range words {
		w := p.p.words[words[i].Key]
		if w == nil {
			w = map[int]peerWord{}
			p.p.words[words[i].Key] = w
		}
		w[p.id] = peerWord{words[i].Mine, words[i].Handed, now.Add(ttl)}
		words[i].Others, words[i].OthersHanded = 0, 0
		for id, x := range w {
			if id != p.id && x.until.After(now) {
				words[i].Others += x.d
				words[i].OthersHanded += x.handed
			}
		}
	}
	return nil
}

// newReplicas is a sim of n server replicas on one store.
func newReplicas(t *testing.T, start time.Time, n int) *sim {
	t.Helper()
	s := &sim{t: t, now: start}
	cfg, err := config.Parse(map[string][]byte{"q.yaml": []byte(modelLimits)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := global.NewMemory(global.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clock := func() time.Time { return s.now }
	core, err := limiter.New(limiter.Options{Config: func() *config.Config { return cfg }, Decider: limiter.Infallible{Store: clocked{m, clock}}, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	peers := &memPeers{now: clock, words: map[string]map[int]peerWord{}}
	for i := range n {
		o := Options{Config: func() *config.Config { return cfg }, Decider: core, Auth: anyone{}, Now: clock}
		if n > 1 {
			o.Peers = peerOf{peers, i}
		}
		svc, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		s.svcs = append(s.svcs, svc)
	}
	s.svc = s.svcs[0]
	return s
}

func (s *sim) addEnvoy(rate float64) *simEnvoy {
	e := &simEnvoy{rate: rate, svc: s.svcs[len(s.envoys)%len(s.svcs)]}
	every := s.every
	if every == 0 {
		every = rlqsenvoy.ReportInterval
	}
	e.env = rlqsenvoy.NewReporting("quota", func() (rlqsenvoy.Stream, error) {
		e.ss = &stream{id: e.svc.ids.Add(1), buckets: make(map[string]*bucket), pokes: make(chan string, maxPokes)}
		return simStream{s, e}, nil
	}, every)
	s.envoys = append(s.envoys, e)
	return e
}

// run offers the Envoys their rates of requests on bucket for d in steps
// of dt, each request decided also by exact, the same limit alone.
func (s *sim) run(bucket map[string]string, d, dt time.Duration, exact func(time.Time) bool) (admitted, exactAdmitted int) {
	for end := s.now.Add(d); s.now.Before(end); s.now = s.now.Add(dt) {
		for _, e := range s.envoys {
			for e.acc += s.arrivals(e, e.rate*dt.Seconds()); e.acc >= 1; e.acc-- {
				e.asked++
				if e.env.Request(bucket, rlqsenvoy.Settings{}, s.now) {
					e.admitted++
					admitted++
				}
				if exact(s.now) {
					exactAdmitted++
				}
			}
			e.env.Tick(s.now)
		}
		if s.now.Sub(s.resplitAt) >= time.Second {
			// Each replica's Run, once a second.
			for _, svc := range s.svcs {
				svc.resplit(context.Background())
			}
			s.resplitAt = s.now
		}
		s.settle()
	}
	return admitted, exactAdmitted
}

// arrivals is what a step of mean requests adds to e's count:
// mean itself (requests evenly spaced), or with s.rng a Poisson draw
// (independent arrivals).
func (s *sim) arrivals(e *simEnvoy, mean float64) float64 {
	if s.rng == nil {
		return mean
	}
	if e.poisson.mean != mean {
		e.poisson.mean, e.poisson.limit = mean, math.Exp(-mean)
	}
	n, p := 0.0, s.rng.Float64()
	for ; p > e.poisson.limit; p *= s.rng.Float64() {
		n++
	}
	return n
}

// settle pushes what the fleet poked and delivers every answer.
func (s *sim) settle() {
	for _, e := range s.envoys {
		for e.ss != nil && len(e.ss.pokes) > 0 {
			if resp := e.svc.poked(e.ss, <-e.ss.pokes); resp != nil {
				e.queue = append(e.queue, resp)
			}
		}
	}
	for _, e := range s.envoys {
		for _, r := range e.queue {
			e.env.Deliver(r, s.now)
		}
		e.queue = e.queue[:0]
	}
}

// exactLimiter decides one request at a time on a store of its own.
func exactLimiter(t *testing.T, name string) func(time.Time) bool {
	cfg, err := config.Parse(map[string][]byte{"q.yaml": []byte(modelLimits)})
	if err != nil {
		t.Fatal(err)
	}
	lim := cfg.Match("quota", []config.Entry{{Key: "name", Value: name}})
	m, err := global.NewMemory(global.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]algorithm.Result, 1)
	return func(now time.Time) bool {
		if err := m.DecideAt([]algorithm.Item{{Key: "exact", Params: lim.RateLimit.Params(), Cost: 1}}, out, now.UnixMicro()); err != nil {
			t.Fatal(err)
		}
		return out[0].Allowed
	}
}

// fleetCell is a load (times the limit) offered to a fleet whose Envoys
// report every every (0: every 5 s, as Envoy does).
type fleetCell struct {
	load  float64
	every time.Duration
}

// fleetCells are the cells of n Envoys of demand dist: a flood and 1.5×,
// and for a zipf fleet of 100, both again reporting every second.
func fleetCells(n int, dist string) []fleetCell {
	cells := []fleetCell{{10, 0}, {1.5, 0}}
	if n == 100 && dist == "zipf" {
		cells = append(cells, fleetCell{10, time.Second}, fleetCell{1.5, time.Second})
	}
	return cells
}

// zipfCold is the least a zipf fleet of 100 Envoys reporting every 5 s,
// as every Envoy release does, admits of an exact limiter in its first
// minute, from cold, at 1.5× offered: its first 5 s are split equally,
// since no demand is known until Envoy's first periodic reports, and the
// busiest Envoys, holding a hundredth of the limit each, admit about half
// of it (0.943-0.968 measured over the minute, a limit of 1,000 a second
// on one server the least: 55 % of the exact limiter's admissions in
// seconds 0-4, 97-101 % after; the second minute 0.990-1.008). Reporting
// every second (envoyproxy/envoy pull request 47104's reporting_interval),
// the same fleet is held to 0.95.
const zipfCold = 0.94

// TestModelFleets: 10 and 100 model Envoys on one server or dealt round
// two replicas (each told the other's demand), even and zipf demand, on a
// token bucket and a fixed window of 100 and of 1,000 a second (the
// latter at 1.5×, 100 Envoys, one server; all in make soak), requests
// arriving at random (Poisson), two minutes in simulated time: admitted
// within 1.05 of an exact limiter, and at 1.5× offered at least 0.95 in
// either minute, the first from cold (the shares start equal and no
// demand is known until the first reports, 5 s); in the second every
// Envoy with demand gets at least half its fair share (the limit in
// proportion to its demand, capped at its demand).
//
// A zipf fleet of 100 Envoys from cold is held to zipfCold in its first
// minute; the same fleet reporting every second, as Envoy does not yet
// (the cells named /1s), to 0.95.
func TestModelFleets(t *testing.T) {
	start := time.Unix(1_700_000_040, 0) // a minute's start: the window's
	for _, replicas := range []int{1, 2} {
		for _, limit := range []string{"bucket", "window", "bucket1k", "window1k"} {
			for _, n := range []int{10, 100} {
				for _, dist := range []string{"even", "zipf"} {
					for _, cell := range fleetCells(n, dist) {
						load, every := cell.load, cell.every
						if strings.HasSuffix(limit, "1k") && (load == 10 || n == 10 || replicas == 2) && !soak {
							// make soak: floods of 10,000 requests a simulated
							// second, 10 Envoys' shares of 100 a second (as the
							// 100-a-second limit's of 10 a second), two replicas.
							continue
						}
						name := fmt.Sprintf("%d/%s/%d/%s/%gx", replicas, limit, n, dist, load)
						if every != 0 {
							name += "/" + every.String()
						}
						t.Run(name, func(t *testing.T) {
							t.Parallel()
							s := newReplicas(t, start, replicas)
							s.every = every
							s.rng = rand.New(rand.NewPCG(uint64(n), uint64(len(limit))))
							weights, sum := make([]float64, n), 0.0
							for i := range weights {
								weights[i] = 1
								if dist == "zipf" {
									weights[i] = 1 / math.Pow(float64(i+1), 1.1)
								}
								sum += weights[i]
							}
							rate := 100.0 // a second, both limits
							if strings.HasSuffix(limit, "1k") {
								rate = 1000
							}
							for i := range n {
								s.addEnvoy(load * rate * weights[i] / sum)
							}
							least, coldLeast := 0.95, 0.95
							if dist == "zipf" && n == 100 && every == 0 {
								coldLeast = zipfCold
							}
							ex := exactLimiter(t, limit)
							id := map[string]string{"name": limit}
							// The first minute starts cold: no demand is known until
							// the first periodic reports (5 s), and the shares start
							// equal. The second is one fixed window too.
							a0, e0 := s.run(id, time.Minute, 10*time.Millisecond, ex)
							for _, e := range s.envoys {
								e.asked, e.admitted = 0, 0
							}
							admitted, exact := s.run(id, time.Minute, 10*time.Millisecond, ex)
							cold, ratio := float64(a0)/float64(e0), float64(admitted)/float64(exact)
							t.Logf("first minute: admitted %d, exact %d: %.3f; second: %d, %d: %.3f", a0, e0, cold, admitted, exact, ratio)
							if cold > 1.05 || ratio > 1.05 {
								t.Errorf("admitted %.3f of exact in the first minute, %.3f in the second; want at most 1.05", cold, ratio)
							}
							if load == 1.5 && (ratio < least || cold < coldLeast) {
								t.Errorf("at 1.5×, admitted %.3f of exact in the first minute and %.3f in the second; want at least %.2f and %.2f", cold, ratio, coldLeast, least)
							}
							asked := 0
							for _, e := range s.envoys {
								asked += e.asked
							}
							worst := math.Inf(1)
							for i, e := range s.envoys {
								fair := min(float64(e.asked), float64(exact)*float64(e.asked)/float64(asked))
								if e.asked == 0 {
									continue
								}
								worst = min(worst, float64(e.admitted)/fair)
								if float64(e.admitted) < fair/2 {
									t.Errorf("envoy %d: admitted %d of %d asked; want at least half its fair share %.0f", i, e.admitted, e.asked, fair)
								}
							}
							t.Logf("the least served Envoy admitted %.2f of its fair share", worst)
						})
					}
				}
			}
		}
	}
}

// TestModelDemandJumps: 100 Envoys on a limit of 100 a second, whose gain
// rose to make up for what random arrivals waste at 1.5× offered, flooded
// at once (10×): the jump in demand takes their gain back to 1, and they
// admit within 1.05 of an exact limiter over the minute (1.082 and 1.054
// measured while it did not); a flood that falls to 1.5× admits at least
// 0.93 of it (0.945-0.969 measured) while the gain rises again. A token
// bucket's in make test, a fixed window's too in make soak.
func TestModelDemandJumps(t *testing.T) {
	start := time.Unix(1_700_000_040, 0)
	for _, limit := range []string{"bucket", "window"} {
		if limit == "window" && !soak {
			continue // make soak
		}
		for _, loads := range [][2]float64{{1.5, 10}, {10, 1.5}} {
			t.Run(fmt.Sprintf("%s/%gx-%gx", limit, loads[0], loads[1]), func(t *testing.T) {
				t.Parallel()
				s := newSim(t, start)
				s.rng = rand.New(rand.NewPCG(7, uint64(len(limit))))
				for range 100 {
					s.addEnvoy(loads[0]) // a hundredth of 100 a second, times the load
				}
				ex := exactLimiter(t, limit)
				id := map[string]string{"name": limit}
				s.run(id, time.Minute, 10*time.Millisecond, ex)
				for _, e := range s.envoys {
					e.rate = loads[1]
				}
				admitted, exact := s.run(id, time.Minute, 10*time.Millisecond, ex)
				ratio := float64(admitted) / float64(exact)
				t.Logf("the minute after the jump: admitted %d, exact %d: %.3f", admitted, exact, ratio)
				if ratio > 1.05 || (loads[1] == 1.5 && ratio < 0.93) {
					t.Errorf("admitted %.3f of exact in the minute after the jump; want at most 1.05 (and at 1.5×, at least 0.93)", ratio)
				}
			})
		}
	}
}
