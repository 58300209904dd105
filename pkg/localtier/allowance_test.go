package localtier

import (
	"context"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/global"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/share"
)

// TestAsyncAllowanceBinds: on a key its upstream finds tight, an async
// sidecar admits its allowance and refuses the rest until the next answer,
// reporting what it was asked for; a stale allowance admits nothing; a
// key far from its limit is decided on the local bucket as before.
func TestAsyncAllowanceBinds(t *testing.T) {
	m, err := global.NewMemory(global.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	shares, err := share.New(share.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := mustConfig(t)
	up := serveService(t, limiter.Options{Config: func() *config.Config { return cfg }, Decider: limiter.Infallible{Store: m}, Shares: shares})
	clk := newClock()
	reg := prometheus.NewRegistry()
	// Flushes by hand: the interval (the most a report may give) is far
	// longer than the test.
	s, tier := sidecar(t, up, Options{Mode: Async, FlushInterval: share.MaxInterval, BatchSize: 1 << 20, Now: clk.Now, Registerer: reg})

	// 18 of the bucket's 20 an hour from the local bucket, recorded: 2
	// left. The sidecar asked for 18 in an interval, so 2 is less than two
	// intervals of its demand: tight, and alone on the key it gets both.
	if ok := admit(t, s, 18, req("bucket", "tight")); ok != 18 {
		t.Fatalf("admitted %d of 18 from the local bucket", ok)
	}
	tier.flush(nil)
	if n := testutil.ToFloat64(tier.m.upstreamCalls.WithLabelValues("record", "ok")); n != 1 {
		t.Fatalf("%v record calls; want 1", n)
	}
	if got := testutil.ToFloat64(prometheusGauge(t, reg, "sluice_localfilter_allowance_keys")); got != 1 {
		t.Fatalf("allowance keys %v; want 1", got)
	}
	if ok := admit(t, s, 5, req("bucket", "tight")); ok != 2 {
		t.Fatalf("with an allowance of 2: admitted %d of 5", ok)
	}
	resp, err := s.ShouldRateLimit(context.Background(), req("bucket", "tight"))
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("past the allowance: %v, %v; want OVER_LIMIT", resp, err)
	}
	// The 2 admitted are recorded: nothing left, nothing allowed.
	tier.flush(nil)
	if left := remaining(t, up, "bucket", "tight"); left != 0 {
		t.Fatalf("upstream after the second flush: %d left; want 0", left)
	}
	if ok := admit(t, s, 3, req("bucket", "tight")); ok != 0 {
		t.Fatalf("with an allowance of 0: admitted %d", ok)
	}
	// An allowance that lapsed (no answer for three intervals) admits
	// nothing either, although the local bucket has refilled in the hour.
	clk.Advance(time.Hour)
	if ok := admit(t, s, 3, req("bucket", "tight")); ok != 0 {
		t.Fatalf("with a lapsed allowance: admitted %d", ok)
	}

	// Far from its limit: no allowance, the local bucket decides.
	if ok := admit(t, s, 1, req("bucket", "far")); ok != 1 {
		t.Fatal("a fresh key refused")
	}
	tier.flush(nil)
	if ok := admit(t, s, 15, req("bucket", "far")); ok != 15 {
		t.Fatalf("a key far from its limit: admitted %d of 15", ok)
	}
}

func prometheusGauge(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name})
			g.Set(mf.GetMetric()[0].GetGauge().GetValue())
			return g
		}
	}
	t.Fatalf("no metric %s", name)
	return nil
}
