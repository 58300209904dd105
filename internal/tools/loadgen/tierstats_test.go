package loadgen

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
)

// A tier's counters are read around a run: what moved is the run's
// faults, and a run with any has failed though every request was answered.
func TestTierFaults(t *testing.T) {
	var fallback atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "# TYPE sluice_tier_decisions_total counter\n")
		fmt.Fprintf(w, "sluice_tier_decisions_total{tier=\"local_bucket\",result=\"ok\"} 1000\n")
		fmt.Fprintf(w, "sluice_tier_decisions_total{tier=\"fallback\",result=\"ok\"} %d\n", fallback.Load())
		fmt.Fprintf(w, "# TYPE sluice_localfilter_dropped_hits_total counter\nsluice_localfilter_dropped_hits_total 7\n")
	}))
	defer srv.Close()
	m, err := newMetricsSampler(context.Background(), srv.URL+"/metrics", false)
	if err != nil {
		t.Fatal(err)
	}
	before, err := m.tierSample(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	if d := tierDelta(before, before); d != nil {
		t.Errorf("nothing moved: %v; want nil", d)
	}
	fallback.Store(42)
	after, err := m.tierSample(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	d := tierDelta(before, after)
	if want := map[string]float64{"fallback": 42}; !reflect.DeepEqual(d, want) {
		t.Errorf("delta %v; want %v (the dropped hits did not move)", d, want)
	}
	r := &Result{OK: 10, TierFaults: d}
	if !r.Failed() || !strings.Contains(r.ErrorText(), "fallback=42") {
		t.Errorf("a run with faults: Failed %v, %q; want failed, naming them", r.Failed(), r.ErrorText())
	}

	// An endpoint that is not a tier's is an error, not zero faults.
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "# TYPE up gauge\nup 1\n")
	}))
	defer other.Close()
	m, err = newMetricsSampler(context.Background(), other.URL+"/metrics", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.tierSample(context.Background(), false); err != nil {
		t.Errorf("before a run, an endpoint that decided nothing yet: %v", err)
	}
	if _, err := m.tierSample(context.Background(), true); err == nil {
		t.Error("after a run, an endpoint without sluice_tier_decisions_total: nil error")
	}
}
