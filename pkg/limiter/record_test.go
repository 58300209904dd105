package limiter

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/share"
)

// record decides r as hits a sidecar already admitted, with o's paths,
// ages and demand.
func (h *harness) record(t *testing.T, r Request, o DecideOptions) *Answer {
	t.Helper()
	o.Record = true
	a, err := h.svc.Decide(context.Background(), r, o)
	if err != nil {
		t.Fatalf("recording %v: %v", r, err)
	}
	return a
}

// left is what per-client has left for value v, asked without consuming.
func (h *harness) left(t *testing.T, v string) uint32 {
	t.Helper()
	return h.decide(t, edge(desc("remote_address", v).costing(0))).Statuses[0].Remaining
}

// TestRecord: hits a sidecar already admitted are recorded in full, past
// the limit; a status is over limit when its limit is used up, with the
// time the debt takes to pay, and the debt holds back later requests.
func TestRecord(t *testing.T) {
	h := start(t, Options{})
	r := edge(desc("remote_address", "debtor"), desc("nothing", "x"))
	r.cost = 5
	a := h.record(t, r, DecideOptions{})
	if verdict(a) != "OVER_LIMIT:OVER_LIMIT,OK" || a.Statuses[0].RetryAfter != 45*time.Second || a.Statuses[1].RetryAfter != 0 {
		t.Fatalf("recording 5 hits on a limit of 3: %s, %+v; want OVER_LIMIT, a retry in 45s", verdict(a), a.Statuses)
	}
	if a := h.decide(t, edge(desc("remote_address", "debtor"))); a.Overall != OverLimit {
		t.Errorf("after the recorded hits: %s; want OVER_LIMIT", verdict(a))
	}
}

// TestRecordPaths: a sidecar names per descriptor the limit it matched:
// the hits are recorded on it; "" records on none; a path this config
// does not know, or paths not one per descriptor, are matched as usual;
// and no recorded limit replaces another.
func TestRecordPaths(t *testing.T) {
	for _, tt := range []struct {
		name  string
		paths []string
		left  uint32 // per-client's, after one hit
	}{
		{"the matched limit", []string{"edge.remote_address"}, 2},
		{"another limit", []string{"edge.api_key"}, 3},
		{"none", []string{""}, 3},
		{"unknown: matched", []string{"edge.gone"}, 2},
		{"one path too many: matched", []string{"edge.api_key", "edge.api_key"}, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, Options{})
			h.record(t, edge(desc("remote_address", "p")), DecideOptions{Paths: tt.paths})
			if got := h.left(t, "p"); got != tt.left {
				t.Errorf("per-client has %d left; want %d", got, tt.left)
			}
		})
	}
	h := start(t, Options{})
	a := h.record(t, edge(desc("plan", "free"), desc("plan", "vip")), DecideOptions{Paths: []string{"edge.plan_free", "edge.plan_vip"}})
	if !a.Statuses[0].Limited || !a.Statuses[1].Limited {
		t.Errorf("recorded on free-plan and vip-plan: %+v; want both recorded", a.Statuses)
	}
}

// TestRecordAges: hits recorded with their age land in the window that
// held them: a fixed window that closed with room takes them, and only
// what it could not have admitted is carried into the current one. Ages
// not one per descriptor are ignored: the hits are charged now.
func TestRecordAges(t *testing.T) {
	minute := 60 * second
	for _, tt := range []struct {
		name string
		ages []int64
		left uint32
	}{
		{"aged into the closed window", []int64{2 * second}, 1}, // 2 + 3 over 3: 2 carried
		{"no ages: charged now", nil, 0},
		{"ages not one per descriptor: charged now", []int64{2 * second, 0}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, Options{})
			h.store.now.Store(t0 - t0%minute + second) // a second into a minute
			h.decide(t, edge(desc("remote_address", "aged")))
			h.decide(t, edge(desc("remote_address", "aged"))) // 2 of 3 in this minute
			h.store.now.Add(minute)
			r := edge(desc("remote_address", "aged"))
			r.cost = 3
			h.record(t, r, DecideOptions{Ages: tt.ages})
			if got := h.left(t, "aged"); got != tt.left {
				t.Errorf("after 3 hits admitted 2 s ago, a second into the next minute: %d left; want %d", got, tt.left)
			}
		})
	}
}

// TestRecordDemand: a sidecar's demand, with its recorded hits, is
// answered per descriptor with an allowance on a tight key, none (-1)
// elsewhere: an unmatched or shadow descriptor, a demand not one rate per
// descriptor, a service that hands out no shares.
func TestRecordDemand(t *testing.T) {
	tr, err := share.New(share.Options{})
	if err != nil {
		t.Fatal(err)
	}
	demand := func(rates ...float64) *Demand {
		return &Demand{Peer: "p", Sidecar: "sidecar-a", Interval: 10 * time.Millisecond, Rates: rates}
	}
	r := edge(desc("remote_address", "tight"), desc("nothing", "x"), desc("generic_key", "shadowed"))
	r.cost = 2
	for _, tt := range []struct {
		name   string
		shares *share.Tracker
		demand *Demand
		want   []float64
	}{
		// per-client has 1 left after the 2 hits; asked for 1,000 a second,
		// the sidecar alone on the key gets all that is left.
		{"a tight key", tr, demand(1000, 5, 5), []float64{1, -1, -1}},
		{"rates not one per descriptor", tr, demand(1000), []float64{-1, -1, -1}},
		{"no shares", nil, demand(1000, 5, 5), []float64{-1, -1, -1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, Options{Shares: tt.shares})
			a := h.record(t, r, DecideOptions{Demand: tt.demand})
			for i, st := range a.Statuses {
				if st.Allowance != tt.want[i] {
					t.Errorf("status %d: allowance %v; want %v", i, st.Allowance, tt.want[i])
				}
			}
		})
	}
}

// TestRefillAhead: on a sliding log, a sidecar asked for a key no faster
// than the limit's rate is allowed its share of what is left and of what
// frees within two of its reporting intervals; a flooding sidecar, or one
// reporting on a key in debt, only of what is left.
func TestRefillAhead(t *testing.T) {
	cfg := configOf(t, "domain: edge\ndescriptors:\n  - key: client\n    rate_limit: {unit: second, requests_per_unit: 100, name: log, algorithm: sliding_log}\n")
	for _, tt := range []struct {
		name       string
		hits, rate float64
		want       float64
	}{
		// 2 left; 100 a second over 10 ms intervals is 1 unit (tight under
		// 8), and two intervals of the refill are 2 more.
		{"asked at the limit's rate", 98, 100, 4},
		{"flooding", 98, 1000, 2},
		{"in debt", 101, 100, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := share.New(share.Options{})
			if err != nil {
				t.Fatal(err)
			}
			h := start(t, Options{Shares: tr, Config: cfg})
			d := &Demand{Peer: "p", Sidecar: "a", Interval: 10 * time.Millisecond, Rates: []float64{tt.rate}}
			a := h.record(t, edge(desc("client", "k").costing(uint64(tt.hits))), DecideOptions{Demand: d})
			if got := a.Statuses[0].Allowance; got != tt.want {
				t.Errorf("allowance %v; want %v", got, tt.want)
			}
		})
	}
}
