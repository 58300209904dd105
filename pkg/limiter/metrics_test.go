package limiter

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/pkg/topkeys"
)

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

// TestRequestCounts: sluice_requests_total counts every request by
// outcome, and sluice_tier_decisions_total those a source decided, by what
// decided them; a request no limit applies to, or that was not decided, is
// counted by outcome only.
func TestRequestCounts(t *testing.T) {
	for _, tt := range []struct {
		name     string
		req      Request
		times    int
		storeErr error
		codes    map[string]float64 // sluice_requests_total by code
		tiers    map[string]float64 // sluice_tier_decisions_total by tier/result
	}{
		{"admitted by the store", edge(desc("api_key", "k")), 1, nil, map[string]float64{"ok": 1}, map[string]float64{"store/ok": 1}},
		{"refused by the store", edge(desc("remote_address", "x")), 4, nil,
			map[string]float64{"ok": 3, "over_limit": 1}, map[string]float64{"store/ok": 3, "store/over_limit": 1}},
		{"blocked by the config", edge(desc("banned", "x")), 1, nil, map[string]float64{"over_limit": 1}, map[string]float64{"config/over_limit": 1}},
		{"no limit applies", edge(desc("nothing", "x")), 1, nil, map[string]float64{"ok": 1}, nil},
		{"invalid", one(""), 1, nil, map[string]float64{"invalid": 1}, nil},
		{"store unavailable, failure mode error", edge(desc("api_key", "k")), 1, errors.New("connection refused"), map[string]float64{"error": 1}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, Options{})
			h.store.err = tt.storeErr
			for range tt.times {
				h.svc.Decide(context.Background(), tt.req, DecideOptions{Content: true})
			}
			totals := h.metrics.RequestTotals()
			for i, code := range RequestCodes() {
				if totals[i] != tt.codes[code] {
					t.Errorf("sluice_requests_total{code=%s} = %v; want %v", code, totals[i], tt.codes[code])
				}
			}
			got := map[string]float64{}
			families, err := h.reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range families {
				if f.GetName() != "sluice_tier_decisions_total" {
					continue
				}
				for _, m := range f.GetMetric() {
					labels := map[string]string{}
					for _, l := range m.GetLabel() {
						labels[l.GetName()] = l.GetValue()
					}
					got[labels["tier"]+"/"+labels["result"]] = m.GetCounter().GetValue()
				}
			}
			if !maps.Equal(got, tt.tiers) {
				t.Errorf("sluice_tier_decisions_total = %v; want %v", got, tt.tiers)
			}
		})
	}
	if got := (*Metrics)(nil).RequestTotals(); len(got) != len(RequestCodes()) || got[0] != 0 {
		t.Errorf("a nil *Metrics reads %v; want a zero per code", got)
	}
}

// TestMetricLabels: a limit's decisions are labelled as the reference
// names its metric keys: detailed_metric by the request's entries,
// key_value each; value_to_metric by the request's value only where the
// descriptor does not fix it (a wildcard is named as configured unless it
// sets value_to_metric itself, a key alone by the key); the reference's
// own metrics split that key after the domain. Refusals reach the top
// keys as key=value pairs.
func TestMetricLabels(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	m.EnableReferenceMetrics(prometheus.NewRegistry())
	top := topkeys.New(topkeys.Options{})
	h := start(t, Options{Metrics: m, TopKeys: top, Config: configOf(t, `domain: shop
descriptors:
  - key: route
    value: api/*
    descriptors:
      - key: method
        value_to_metric: true
        rate_limit: {unit: minute, requests_per_unit: 1, name: by-method, algorithm: fixed_window}
  - key: client
    descriptors:
      - key: path
        value_to_metric: true
        rate_limit: {unit: minute, requests_per_unit: 5, name: by-path}
  - key: tenant
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5, name: by-tenant}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 5, name: plain}
`)})
	for _, tt := range []struct {
		d                    descriptor
		limit, label, k1, k2 string // label "": no detailed series
	}{
		{desc("route", "api/users", "method", "GET"), "by-method", "route_api/*.method_GET", "route_api/*", "method_GET"},
		{desc("client", "c1", "path", "/x"), "by-path", "client.path_/x", "client", "path_/x"},
		{desc("tenant", "acme"), "by-tenant", "tenant_acme", "tenant_acme", ""},
		{desc("plain", "p"), "plain", "", "plain", ""},
	} {
		r := &testRequest{domain: "shop", descs: []descriptor{tt.d}}
		h.decide(t, r)
		if tt.label != "" {
			if got := testutil.ToFloat64(m.detailed.WithLabelValues("shop", tt.limit, tt.label, "ok")); got != 1 {
				t.Errorf("%s: sluice_detailed_decisions_total{descriptor=%q} = %v; want 1", tt.limit, tt.label, got)
			}
		}
		if got := testutil.ToFloat64(m.reference.total.WithLabelValues("shop", tt.k1, tt.k2)); got != 1 {
			t.Errorf("%s: total_hits{key1=%q,key2=%q} = %v; want 1", tt.limit, tt.k1, tt.k2, got)
		}
	}
	if n := testutil.CollectAndCount(m.detailed); n != 3 {
		t.Errorf("%d detailed series; want 3 (none for the plain limit)", n)
	}
	h.decide(t, &testRequest{domain: "shop", descs: []descriptor{desc("route", "api/users", "method", "GET")}})
	found := false
	for _, l := range top.Top(10) {
		for _, k := range l.Keys {
			found = found || l.Limit == "by-method" && k.Key == "route=api/users;method=GET"
		}
	}
	if !found {
		t.Errorf("top keys %+v; want by-method refusing route=api/users;method=GET", top.Top(10))
	}
}
