package simulate

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/sluicehq/sluice/pkg/config"
)

// The generated patterns.
const (
	// Steady is one client sending at a fixed Rate, evenly spaced.
	Steady = "steady"
	// Bursty is Clients clients alternating bursts at Rate with silences,
	// burst and gap lengths drawn from exponential distributions (means On
	// and Off), so their average rate is Rate·On/(On+Off).
	Bursty = "bursty"
	// Boundary is one client sending Limit requests just before and Limit
	// just after a window boundary (within a tenth of the window, at most
	// a second, each side), at every other boundary: the 2× burst a fixed
	// window lets through, and no other algorithm does.
	Boundary = "boundary"
	// Many is Clients clients, each with Poisson arrivals at its own rate,
	// drawn from a log-normal distribution (σ = 1) with mean Rate: skewed,
	// about a third of clients above the mean and one in nine above twice
	// it, as a few heavy clients dominate real traffic.
	Many = "many"
)

// Patterns returns the pattern names, for flags and messages.
func Patterns() []string { return []string{Steady, Bursty, Boundary, Many} }

// Bounds on what Generate will build: beyond them a typo in a flag would
// exhaust memory rather than simulate something.
// Defaults of Pattern's On and Off (bursty).
const (
	DefaultOn  = 2 * time.Second
	DefaultOff = 8 * time.Second
)

const (
	MaxClients  = 1 << 20
	MaxRequests = 50_000_000
	MaxDuration = 366 * 24 * time.Hour
)

const (
	manySigma   = 1.0
	boundaryGap = time.Second // the most each side of a boundary
	// streamSalt offsets the clients' PCG streams from those other tools
	// derive from the same seed (loadgen's caller i uses stream i).
	streamSalt   = 0x736c75696365
	defaultEntry = "remote_address"
)

// Pattern describes a generated trace. Requests carry one entry, Key set
// to the client's address (10.0.0.1 for the first client), cost 1, and
// start at time zero, on a window boundary.
type Pattern struct {
	Kind     string        // Steady, Bursty, Boundary or Many
	Duration time.Duration // requests are sent in [0, Duration)
	// Rate is requests per second: the client's (Steady), each client's
	// during a burst (Bursty), the clients' mean (Many). Boundary ignores it.
	Rate float64
	// Clients is the number of clients of Bursty and Many (zero: 1).
	Clients int
	// Seed makes Bursty and Many reproducible: each client draws from its
	// own PCG stream of Seed, so adding clients leaves the others' traffic
	// as it was.
	Seed uint64
	// Key is the descriptor key; empty means remote_address.
	Key string
	// Limit and Window are the limit Boundary attacks.
	Limit  int64
	Window time.Duration
	// On and Off are Bursty's mean burst and gap; zero means 2s and 8s.
	On, Off time.Duration
}

// Generate builds p's trace, in time order. The same Pattern always gives
// the same trace. Requests of one client share one Entries slice.
func Generate(p Pattern) ([]Request, error) {
	if p.Key == "" {
		p.Key = defaultEntry
	}
	if p.Clients == 0 {
		p.Clients = 1
	}
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("pattern %s: %w", p.Kind, err)
	}
	switch p.Kind {
	case Steady:
		return steady(p, ClientEntries(p.Key, 0)), nil
	case Bursty:
		return perClient(p, bursty)
	case Boundary:
		return boundary(p, ClientEntries(p.Key, 0)), nil
	default:
		return perClient(p, many)
	}
}

func (p Pattern) validate() error {
	switch {
	case !slices.Contains(Patterns(), p.Kind):
		return fmt.Errorf("unknown pattern (want one of %v)", Patterns())
	case p.Duration <= 0 || p.Duration > MaxDuration:
		return fmt.Errorf("duration %v: want more than 0 and at most %v", p.Duration, MaxDuration)
	case p.Clients < 1 || p.Clients > MaxClients:
		return fmt.Errorf("clients %d: want 1 to %d", p.Clients, MaxClients)
	case p.On < 0 || p.Off < 0:
		return errors.New("burst and gap lengths must not be negative")
	}
	if (p.Kind == Steady || p.Kind == Boundary) && p.Clients != 1 {
		return fmt.Errorf("clients %d: this pattern sends from one client", p.Clients)
	}
	if p.Kind == Boundary {
		if p.Limit < 1 || p.Window <= 0 {
			return fmt.Errorf("needs the limit it attacks: limit %d per %v", p.Limit, p.Window)
		}
		attacks := int64(p.Duration/p.Window)/2 + 1
		switch {
		case p.Limit > MaxRequests/(2*attacks):
			return fmt.Errorf("limit %d over %d boundaries: more than %d requests", p.Limit, attacks, MaxRequests)
		case p.Duration < p.Window+boundarySpread(p.Window):
			return fmt.Errorf("duration %v is too short to cross a boundary of a %v window", p.Duration, p.Window)
		}
		return nil
	}
	if !(p.Rate > 0) || math.IsInf(p.Rate, 0) {
		return fmt.Errorf("rate %v: want a positive number of requests per second", p.Rate)
	}
	if n := p.Rate * p.Duration.Seconds() * float64(p.Clients); n > MaxRequests {
		return fmt.Errorf("about %.0f requests: at most %d", n, MaxRequests)
	}
	return nil
}

// ClientEntries is the descriptor of a generated pattern's client i (from
// 0): one entry of key, an address in 10.0.0.0/8 (10.0.0.1 for client 0).
func ClientEntries(key string, i int) []config.Entry {
	n := i + 1
	return []config.Entry{{Key: key, Value: fmt.Sprintf("10.%d.%d.%d", n>>16&255, n>>8&255, n&255)}}
}

// microsFromSeconds converts seconds to microseconds, rounded.
func microsFromSeconds(sec float64) int64 { return int64(math.Round(sec * 1e6)) }

func steady(p Pattern, e []config.Entry) []Request {
	end := p.Duration.Microseconds()
	var trace []Request
	// Times are k/rate, not a running sum, so rounding does not drift.
	for k := 0; ; k++ {
		t := microsFromSeconds(float64(k) / p.Rate)
		if t >= end {
			return trace
		}
		trace = append(trace, Request{Time: t, Entries: e, Cost: 1})
	}
}

// boundarySpread is how close to a boundary the attack sends.
func boundarySpread(w time.Duration) time.Duration { return min(w/10, boundaryGap) }

func boundary(p Pattern, e []config.Entry) []Request {
	w, end := p.Window.Microseconds(), p.Duration.Microseconds()
	spread := boundarySpread(p.Window).Microseconds()
	var trace []Request
	// Every other boundary, so that each attack starts from an idle
	// window and the trace shows the same attack again and again.
	for b := w; b+spread <= end; b += 2 * w {
		for k := int64(0); k < 2*p.Limit; k++ {
			// The k-th of 2L evenly spaced times in [b-spread, b+spread).
			t := b - spread + k*spread/p.Limit
			trace = append(trace, Request{Time: t, Entries: e, Cost: 1})
		}
	}
	return trace
}

// perClient builds each client's requests from its own PCG stream and
// merges them in time order, ties in client order.
func perClient(p Pattern, client func(Pattern, *rand.Rand, []config.Entry, []Request) ([]Request, error)) ([]Request, error) {
	var trace []Request
	for i := 0; i < p.Clients; i++ {
		rng := rand.New(rand.NewPCG(p.Seed, streamSalt+uint64(i)))
		var err error
		if trace, err = client(p, rng, ClientEntries(p.Key, i), trace); err != nil {
			return nil, err
		}
	}
	slices.SortStableFunc(trace, func(a, b Request) int { return cmp.Compare(a.Time, b.Time) })
	return trace, nil
}

var errTooMany = fmt.Errorf("more than %d requests", MaxRequests)

func bursty(p Pattern, rng *rand.Rand, e []config.Entry, trace []Request) ([]Request, error) {
	on, off := p.On, p.Off
	if on == 0 {
		on = DefaultOn
	}
	if off == 0 {
		off = DefaultOff
	}
	end := p.Duration.Microseconds()
	// A random phase, so that clients do not all burst at time zero.
	t := rng.Float64() * (on + off).Seconds()
	for microsFromSeconds(t) < end {
		burst := rng.ExpFloat64() * on.Seconds()
		for k := 0; ; k++ {
			s := t + float64(k)/p.Rate
			if s >= t+burst || microsFromSeconds(s) >= end {
				break
			}
			if len(trace) >= MaxRequests {
				return nil, errTooMany
			}
			trace = append(trace, Request{Time: microsFromSeconds(s), Entries: e, Cost: 1})
		}
		t += burst + rng.ExpFloat64()*off.Seconds()
	}
	return trace, nil
}

func many(p Pattern, rng *rand.Rand, e []config.Entry, trace []Request) ([]Request, error) {
	// exp(σZ − σ²/2) has mean 1, so Rate is the clients' mean rate.
	rate := p.Rate * math.Exp(manySigma*rng.NormFloat64()-manySigma*manySigma/2)
	end := p.Duration.Microseconds()
	for t := rng.ExpFloat64() / rate; microsFromSeconds(t) < end; t += rng.ExpFloat64() / rate {
		if len(trace) >= MaxRequests {
			return nil, errTooMany
		}
		trace = append(trace, Request{Time: microsFromSeconds(t), Entries: e, Cost: 1})
	}
	return trace, nil
}
