package simulate

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestGenerateDeterministic(t *testing.T) {
	for _, p := range []Pattern{
		{Kind: Bursty, Duration: time.Minute, Rate: 20, Clients: 10, Seed: 7},
		{Kind: Many, Duration: time.Minute, Rate: 2, Clients: 100, Seed: 7},
	} {
		t.Run(p.Kind, func(t *testing.T) {
			a, err := Generate(p)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := Generate(p)
			if len(a) == 0 || !reflect.DeepEqual(a, b) {
				t.Fatalf("two traces of seed 7 differ (%d and %d requests)", len(a), len(b))
			}
			if !slices.IsSortedFunc(a, func(x, y Request) int { return int(x.Time - y.Time) }) {
				t.Error("trace is not in time order")
			}
			if a[len(a)-1].Time >= time.Minute.Microseconds() || a[0].Time < 0 {
				t.Errorf("times %d..%d outside [0, 1m)", a[0].Time, a[len(a)-1].Time)
			}
			p.Seed = 8
			c, _ := Generate(p)
			if reflect.DeepEqual(a, c) {
				t.Error("seeds 7 and 8 gave the same trace")
			}
			// Client i's traffic does not depend on how many others there are.
			p.Seed, p.Clients = 7, p.Clients+5
			d, _ := Generate(p)
			if first := clientTimes(a, "10.0.0.1"); len(first) == 0 || !slices.Equal(first, clientTimes(d, "10.0.0.1")) {
				t.Error("client 10.0.0.1 changed when clients were added")
			}
		})
	}
}

func clientTimes(trace []Request, ip string) []int64 {
	var ts []int64
	for _, r := range trace {
		if r.Entries[0].Value == ip {
			ts = append(ts, r.Time)
		}
	}
	return ts
}

func TestGenerateSteady(t *testing.T) {
	trace, err := Generate(Pattern{Kind: Steady, Duration: 2 * time.Second, Rate: 3, Key: "user"})
	if err != nil {
		t.Fatal(err)
	}
	want := []int64{0, 333_333, 666_667, 1_000_000, 1_333_333, 1_666_667}
	if got := clientTimes(trace, "10.0.0.1"); !slices.Equal(got, want) {
		t.Errorf("times %v; want %v", got, want)
	}
	if trace[0].Entries[0].Key != "user" || trace[0].Cost != 1 {
		t.Errorf("request %+v; want key user, cost 1", trace[0])
	}
}

func TestGenerateBoundary(t *testing.T) {
	// 3 per 10 s over 45 s: attacks at the boundaries 10 s and 30 s, 1 s
	// each side, three requests before and three after.
	trace, err := Generate(Pattern{Kind: Boundary, Duration: 45 * time.Second, Limit: 3, Window: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var want []int64
	for _, b := range []int64{10e6, 30e6} {
		for k := int64(0); k < 6; k++ {
			want = append(want, b-1e6+k*1e6/3)
		}
	}
	if got := clientTimes(trace, "10.0.0.1"); !slices.Equal(got, want) {
		t.Errorf("times %v; want %v", got, want)
	}
}

func TestGenerateMany(t *testing.T) {
	const clients, rate, secs = 400, 1.0, 600
	trace, err := Generate(Pattern{Kind: Many, Duration: secs * time.Second, Rate: rate, Clients: clients, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	perClient := map[string]int{}
	for _, r := range trace {
		perClient[r.Entries[0].Value]++
	}
	// The mean is Rate per client (±10% over 240 000 expected requests,
	// far more than the log-normal's spread at this many clients), and the
	// rates are skewed: some clients over twice the mean, most under it.
	mean := float64(len(trace)) / clients / secs
	var over2, under1 int
	for _, n := range perClient {
		r := float64(n) / secs
		if r > 2*rate {
			over2++
		}
		if r < rate {
			under1++
		}
	}
	if mean < 0.9*rate || mean > 1.1*rate {
		t.Errorf("mean rate %.3f/s; want about %v", mean, rate)
	}
	if over2 < clients/20 || under1 < clients/2 {
		t.Errorf("%d clients over twice the mean, %d under it, of %d; want a skewed spread", over2, under1, clients)
	}
}

func TestGenerateErrors(t *testing.T) {
	for _, tt := range []struct {
		p    Pattern
		want string
	}{
		{Pattern{Kind: "zigzag", Duration: time.Second, Rate: 1}, "unknown pattern"},
		{Pattern{Kind: Steady, Rate: 1}, "duration 0s"},
		{Pattern{Kind: Steady, Duration: time.Second}, "rate 0"},
		{Pattern{Kind: Steady, Duration: time.Second, Rate: 1, Clients: 3}, "sends from one client"},
		{Pattern{Kind: Many, Duration: time.Hour, Rate: 1e6, Clients: 100}, "at most 50000000"},
		{Pattern{Kind: Many, Duration: time.Second, Rate: 1, Clients: MaxClients + 1}, "clients"},
		{Pattern{Kind: Boundary, Duration: time.Minute}, "needs the limit it attacks"},
		{Pattern{Kind: Boundary, Duration: 10 * time.Second, Limit: 3, Window: 10 * time.Second}, "too short"},
	} {
		if _, err := Generate(tt.p); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Generate(%+v) = %v; want an error containing %q", tt.p, err, tt.want)
		}
	}
}
