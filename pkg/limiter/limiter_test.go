package limiter

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/global"
)

// descriptor is one descriptor of a testRequest.
type descriptor struct {
	entries  []config.Entry
	cost     *uint64
	override *Override
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
func (r *testRequest) Override(i int) (Override, bool) {
	if o := r.descs[i].override; o != nil {
		return *o, true
	}
	return Override{}, false
}

// one is a request with one descriptor of entries key, value, key, value...
func one(domain string, kv ...string) *testRequest {
	var d descriptor
	for i := 0; i+1 < len(kv); i += 2 {
		d.entries = append(d.entries, config.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return &testRequest{domain: domain, descs: []descriptor{d}}
}

// newService is a Service on an in-memory store and config src.
func newService(t *testing.T, src string, opts Options) *Service {
	t.Helper()
	cfg, err := config.Parse(map[string][]byte{"test.yaml": []byte(src)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := global.NewMemory(global.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	opts.Config = func() *config.Config { return cfg }
	if opts.Decider == nil {
		opts.Decider = Infallible{Store: m}
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestDetailedSeriesBounded: a detailed_metric limit labels decisions with
// request values, but a client sending ever new ones cannot grow the
// series past MaxDetailedSeries, nor a label past MaxDetailedLabel bytes.
func TestDetailedSeriesBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	s := newService(t, `domain: edge
descriptors:
  - key: tenant
    detailed_metric: true
    rate_limit: {unit: second, requests_per_unit: 1000}
`, Options{Metrics: m})
	if _, err := s.Decide(context.Background(), one("edge", "tenant", strings.Repeat("t", 1000)), DecideOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range MaxDetailedSeries + 50 {
		m.decision("edge", "edge.tenant", "ok", true, []string{fmt.Sprint("tenant_", i)})
	}
	if n := testutil.CollectAndCount(reg, "sluice_detailed_decisions_total"); n != MaxDetailedSeries+1 {
		t.Fatalf("%d series; want %d and the overflow", n, MaxDetailedSeries)
	}
	families, _ := reg.Gather()
	for _, f := range families {
		for _, metric := range f.GetMetric() {
			for _, l := range metric.GetLabel() {
				if len(l.GetValue()) > MaxDetailedLabel+len("sha256:")+64 {
					t.Errorf("label %s is %d bytes", l.GetName(), len(l.GetValue()))
				}
			}
		}
	}
}
