package loadgen

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

func TestMetricsSampler(t *testing.T) {
	var trips float64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "# HELP %s x\n# TYPE %s counter\n%s_extra 7\n%s %g\n", RoundTripsMetric, RoundTripsMetric, RoundTripsMetric, RoundTripsMetric, trips)
	}))
	defer srv.Close()
	m, err := newMetricsSampler(context.Background(), srv.URL+"/metrics", false)
	if err != nil {
		t.Fatal(err)
	}
	trips = 1234
	if got, err := m.sample(context.Background()); err != nil || got != 1234 {
		t.Errorf("sample = %v, %v; want 1234", got, err)
	}
	none := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "other_metric 1") }))
	defer none.Close()
	if m, err := newMetricsSampler(context.Background(), none.URL, false); err != nil {
		t.Fatal(err)
	} else if _, err := m.sample(context.Background()); err == nil {
		t.Error("an endpoint without the counter: no error")
	}
	for _, bad := range []string{"ftp://127.0.0.1/metrics", "http:///metrics", "http://192.0.2.1:8080/metrics"} {
		if _, err := newMetricsSampler(context.Background(), bad, false); err == nil {
			t.Errorf("newMetricsSampler(%q) accepted", bad)
		}
	}
}

func TestCPUTime(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Fatalf("no /proc: %v (the CPU figures are Linux only)", err)
	}
	before, err := cpuTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Burn CPU until the process's CPU time has grown by 30ms: a wrong field
	// (a constant, a wall clock) would not.
	deadline := time.Now().Add(10 * time.Second)
	for {
		for range 100_000 {
			_ = strings.Repeat("x", 64)
		}
		after, err := cpuTime(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if after-before >= 30*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CPU time grew from %v to %v in 10s of busy loop", before, after)
		}
	}
	if _, err := cpuTime(1 << 30); err == nil {
		t.Error("cpuTime of a pid that does not exist: no error")
	}
}
