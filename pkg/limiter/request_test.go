package limiter

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/pkg/config"
)

// descriptor is one descriptor of a testRequest: its entries, and its own
// hits_addend and limit override when set.
type descriptor struct {
	entries  []config.Entry
	cost     *uint64
	override *Override
	refund   bool
}

// testRequest is a Request held in Go values, as an adapter's view would
// read its wire form.
type testRequest struct {
	domain string
	cost   uint32
	descs  []descriptor
}

func (r *testRequest) Domain() string    { return r.domain }
func (r *testRequest) Cost() uint32      { return r.cost }
func (r *testRequest) Len() int          { return len(r.descs) }
func (r *testRequest) Entries(i int) int { return len(r.descs[i].entries) }
func (r *testRequest) Entry(i, j int) (string, string) {
	e := r.descs[i].entries[j]
	return e.Key, e.Value
}
func (r *testRequest) DescriptorCost(i int) (uint64, bool) {
	if c := r.descs[i].cost; c != nil {
		return *c, true
	}
	return 0, false
}
func (r *testRequest) Refund(i int) bool { return r.descs[i].refund }
func (r *testRequest) Override(i int) (Override, bool) {
	if o := r.descs[i].override; o != nil {
		return *o, true
	}
	return Override{}, false
}

// desc is a descriptor of entries key, value, key, value...
func desc(kv ...string) descriptor {
	var d descriptor
	for i := 0; i+1 < len(kv); i += 2 {
		d.entries = append(d.entries, config.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// costing is d with its own hits_addend.
func (d descriptor) costing(n uint64) descriptor {
	d.cost = &n
	return d
}

// overridden is d with Envoy's per-request limit: rpu per mult × unit.
func (d descriptor) overridden(rpu uint32, unit config.Unit, mult uint32) descriptor {
	d.override = &Override{RequestsPerUnit: rpu, Unit: unit, Multiplier: mult}
	return d
}

// edge is a request in domain edge of descs.
func edge(descs ...descriptor) *testRequest { return &testRequest{domain: "edge", descs: descs} }

// one is a request with one descriptor of entries key, value, key, value...
func one(domain string, kv ...string) *testRequest {
	return &testRequest{domain: domain, descs: []descriptor{desc(kv...)}}
}

// TestBadRequests: a request past the caps, or with an override past the
// config files' rules, is an InvalidError naming what is wrong, counted as
// invalid, and never reaches the store.
func TestBadRequests(t *testing.T) {
	many := edge()
	for range MaxDescriptors + 1 {
		many.descs = append(many.descs, desc("k", "v"))
	}
	var wide descriptor
	for range MaxEntries + 1 {
		wide.entries = append(wide.entries, config.Entry{Key: "k", Value: "v"})
	}
	api := desc("api_key", "x")
	tests := []struct {
		name string
		req  Request
		msg  string
	}{
		{"empty domain", one("", "api_key", "x"), "domain is empty"},
		{"long domain", one(strings.Repeat("d", MaxDomainLen+1), "api_key", "x"), "domain is 257 bytes; at most 256"},
		{"no entries", edge(descriptor{}), "descriptor 0: no entries"},
		{"empty key", edge(api, desc("", "v")), "descriptor 1: entry 0: empty key"},
		{"long key", edge(desc(strings.Repeat("k", MaxKeyLen+1), "v")), "key is 257 bytes; at most 256"},
		{"too many descriptors", many, "65 descriptors; at most 64"},
		{"too many entries", edge(wide), "17 entries; at most 16"},
		{"descriptor cost past MaxCost", edge(api.costing(MaxCost + 1)), "hits_addend 4294967297; at most 4294967296"},
		{"override without a unit", edge(api.overridden(5, 0, 1)), "limit override: not a unit"},
		{"override multiplier 0", edge(api.overridden(5, config.UnitSecond, 0)), "unit_multiplier must be at least 1"},
		{"override of 101 years", edge(api.overridden(5, config.UnitYear, 101)), "longer than the maximum"},
		{"override of 2^32−1 years", edge(api.overridden(5, config.UnitYear, 1<<32-1)), "longer than the maximum"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, Options{})
			_, err := h.svc.Decide(context.Background(), tt.req, DecideOptions{Content: true})
			var bad *InvalidError
			if !errors.As(err, &bad) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("Decide = %v; want an InvalidError containing %q", err, tt.msg)
			}
			if n := h.store.calls.Load(); n != 0 {
				t.Errorf("a bad request made %d store calls", n)
			}
			if got := h.requests("invalid"); got != 1 {
				t.Errorf("sluice_requests_total{code=invalid} = %v; want 1", got)
			}
		})
	}
	// At the caps, the request is decided.
	h := start(t, Options{})
	atCaps := &testRequest{domain: strings.Repeat("d", MaxDomainLen), descs: []descriptor{desc(strings.Repeat("k", MaxKeyLen), "v").costing(MaxCost)}}
	if _, err := h.svc.Decide(context.Background(), atCaps, DecideOptions{}); err != nil {
		t.Errorf("a request at every cap: %v; want it decided", err)
	}
}

// refunding is d giving its hits back (Envoy's is_negative_hits).
func (d descriptor) refunding() descriptor {
	d.refund = true
	return d
}

// TestRefundsApplyWhateverRefuses: a refund applies in a request that
// another limit refuses, by the store or by a limit of 0 (the config,
// which asks the store nothing else), and clears its key's flag; a
// refund on a limit of 0 is answered OK; and a service whose decider does
// not apply refunds refuses them as invalid.
func TestRefundsApplyWhateverRefuses(t *testing.T) {
	h := start(t, Options{Refunds: true})
	client := edge(desc("remote_address", "203.0.113.7"))
	for range 4 { // 3 a minute: the 4th refused and flagged
		h.decide(t, client)
	}
	refund := desc("remote_address", "203.0.113.7").costing(2).refunding()
	for _, c := range []struct {
		name string
		req  *testRequest
		want string
	}{
		{"beside a limit of 0", edge(refund, desc("banned", "x")), "OVER_LIMIT:OK,OVER_LIMIT"},
		{"alone, the key flagged before", edge(refund), "OK:OK"},
	} {
		a := h.decide(t, c.req)
		if got := verdict(a); got != c.want {
			t.Fatalf("%s: %s; want %s", c.name, got, c.want)
		}
	}
	// 3 used, 2 and 2 back (at most what was consumed): 3 left, so 3 more.
	for i := range 3 {
		if got := verdict(h.decide(t, client)); got != "OK:OK" {
			t.Fatalf("request %d after the refunds: %s; want OK", i+1, got)
		}
	}
	if got := verdict(h.decide(t, edge(desc("banned", "y").costing(1).refunding()))); got != "OK:OK" {
		t.Errorf("a refund on a limit of 0: %s; want OK", got)
	}
	plain := start(t, Options{})
	if _, err := plain.svc.Decide(context.Background(), edge(refund), DecideOptions{Content: true}); !isInvalid(err) || !strings.Contains(err.Error(), "is_negative_hits") {
		t.Errorf("a refund where refunds are not applied: %v; want invalid, naming is_negative_hits", err)
	}
}
