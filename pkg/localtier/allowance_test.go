package localtier

import (
	"context"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/global"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/share"
)

// sharingUpstream is an upstream on the in-memory store that hands async
// sidecars their allowances (pkg/share) and takes refunds.
func sharingUpstream(t *testing.T) *countingUpstream {
	t.Helper()
	m, err := global.NewMemory(global.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	shares, err := share.New(share.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := mustConfig(t)
	return serveService(t, limiter.Options{Config: func() *config.Config { return cfg }, Decider: limiter.Infallible{Store: m}, Shares: shares, Refunds: true})
}

// TestAsyncAllowanceBinds: on a key its upstream finds tight, an async
// sidecar admits its allowance and refuses the rest until the next answer,
// reporting what it was asked for; a stale allowance admits nothing; a
// key far from its limit is decided on the local bucket as before.
func TestAsyncAllowanceBinds(t *testing.T) {
	up := sharingUpstream(t)
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
	tier.flush(nil, true)
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
	tier.flush(nil, true)
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
	tier.flush(nil, true)
	if ok := admit(t, s, 15, req("bucket", "far")); ok != 15 {
		t.Fatalf("a key far from its limit: admitted %d of 15", ok)
	}
}

// TestAnswerWithUnitsLiftsTheFlag: a refusal while a key's allowance was
// spent flags the key for a flush interval in the flag cache in front; an
// answer that brings the key units is that refusal's retry time, so it
// lifts the flag (kept, it let a sliding log's waves at 1.5× the limit in
// late by a flush).
func TestAnswerWithUnitsLiftsTheFlag(t *testing.T) {
	up := sharingUpstream(t)
	clk := newClock()
	s, tier := sidecar(t, up, Options{Mode: Async, FlushInterval: share.MaxInterval, BatchSize: 1 << 20, Now: clk.Now})
	// 17 admitted here and 3 by another client: the limit used up, with
	// 3 left in this sidecar's local bucket.
	if ok := admit(t, s, 17, req("bucket", "wave")); ok != 17 {
		t.Fatalf("admitted %d of 17 from the local bucket", ok)
	}
	other := req("bucket", "wave")
	other.Descriptors[0].HitsAddend = wrapperspb.UInt64(3)
	if _, err := up.client.ShouldRateLimit(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	tier.flush(nil, true) // the 17 recorded: an allowance of 0
	if ok := admit(t, s, 2, req("bucket", "wave")); ok != 0 {
		t.Fatalf("with an allowance of 0: admitted %d", ok)
	}
	// Room again upstream (a refund here; a sliding log's units leaving).
	back := req("bucket", "wave")
	back.Descriptors[0].HitsAddend, back.Descriptors[0].IsNegativeHits = wrapperspb.UInt64(3), true
	if _, err := up.client.ShouldRateLimit(context.Background(), back); err != nil {
		t.Fatal(err)
	}
	tier.flush(nil, true) // the refusals' demand reported: an allowance of 3
	if ok := admit(t, s, 5, req("bucket", "wave")); ok != 3 {
		t.Errorf("after an answer of 3: admitted %d of 5; want 3 (the flag lifted)", ok)
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

// TestAnswerLessWhatItsRoundTripSpent: an answer is a share of what the
// limit had left when the report came, which does not hold what the key's
// last allowance admitted after the report's hits were drained; those come
// off the answer (a round trip longer than the flush interval spent the
// rest of the last allowance and all of the new one, 1.07–1.10 × exact).
func TestAnswerLessWhatItsRoundTripSpent(t *testing.T) {
	a := newAllowances(10)
	lapse := int64(time.Second)
	take := oneUnit(a, "k")
	a.set("k", 5, 0, 0, lapse)
	if got := take(3, 1); got != 3 {
		t.Fatalf("took %d of 3 from 5", got)
	}
	drained, held := a.spentOf("k") // the report's hits drained: 3 spent, 2 held
	if drained != 3 || held != 2 {
		t.Fatalf("spentOf: %v spent, %v held; want 3, 2", drained, held)
	}
	if got := take(2, 2); got != 2 {
		t.Fatalf("took %d of 2 from the 2 left", got)
	}
	// The answer, 4, was taken of a pool that still held the 2 spent in
	// flight: 2 are left of it.
	a.set("k", 4, drained, 3, lapse)
	if got := take(5, 4); got != 2 {
		t.Errorf("after an answer of 4 with 2 spent in its round trip: admitted %d; want 2", got)
	}
	// Nothing spent in flight: the answer in full, with what the last one
	// left unused (at most one unit, carryUnits).
	drained, _ = a.spentOf("k")
	a.set("k", 3, drained, 5, lapse)
	if got := take(5, 6); got != 3 {
		t.Errorf("after an answer of 3 with nothing spent in its round trip: admitted %d; want 3", got)
	}
	// More spent in flight than the answer: none, never below.
	drained, _ = a.spentOf("k")
	a.set("k", 4, drained, 7, lapse)
	take(4, 8)
	a.set("k", 1, drained, 9, lapse)
	if got := take(2, 10); got != 0 {
		t.Errorf("after an answer of 1 with 4 spent in its round trip: admitted %d; want 0", got)
	}
}

// TestAnswerAfterTheEntryWasDropped: a report drained while the key had
// an allowance, answered after its entry was dropped (a second without an
// answer) and made anew: the answer is taken as given, never enlarged by
// what the old entry had spent.
func TestAnswerAfterTheEntryWasDropped(t *testing.T) {
	a := newAllowances(10)
	lapse := int64(time.Second)
	take := oneUnit(a, "k")
	a.set("k", 50, 0, 0, lapse)
	take(40, 1)
	drained, _ := a.spentOf("k") // 40
	a.prune(int64(allowanceKept) + 1)
	a.set("k", 0, 0, 3, lapse) // tight again, nothing left
	a.set("k", 2, drained, 4, lapse)
	if ok := take(10, 5); ok != 2 {
		t.Errorf("an answer of 2 after the key's entry was made anew: admitted %d; want 2", ok)
	}
}

// TestLooseThenTight: an answer that finds a bound key not tight lets it
// admit as before, still counting what it admits; the answer that binds it
// again is taken less what it admitted while that answer was on its way
// (a flood's key is loose for a cycle at each window's start).
func TestLooseThenTight(t *testing.T) {
	a := newAllowances(10)
	lapse := int64(time.Second)
	take := oneUnit(a, "k")
	a.set("k", 0, 0, 0, lapse)
	if got := take(3, 1); got != 0 {
		t.Fatalf("bound with nothing: admitted %d", got)
	}
	a.set("k", -1, 0, 2, lapse) // a new window: loose
	if got := take(20, 3); got != 20 {
		t.Fatalf("loose: admitted %d of 20", got)
	}
	drained, held := a.spentOf("k") // a report: 20 spent, nothing held (loose)
	if drained != 20 || held != 0 {
		t.Fatalf("spentOf a loose key: %v, %v; want 20, 0", drained, held)
	}
	if got := take(15, 4); got != 15 {
		t.Fatalf("loose: admitted %d of 15", got)
	}
	// Its answer: tight, 30 of the 80 left; 15 were admitted on its way.
	a.set("k", 30, drained, 5, lapse)
	if got := take(40, 6); got != 15 {
		t.Errorf("an answer of 30 with 15 admitted on its way: admitted %d; want 15", got)
	}
}

// oneUnit returns a function that asks a's allowance for key n times, a
// unit each, at now (ns), and returns how many it admitted.
func oneUnit(a *allowances, key string) func(n int, now int64) int {
	b := &limiter.Batch{Items: []algorithm.Item{{Key: key, Cost: 1}}}
	return func(n int, now int64) int {
		ok := 0
		for range n {
			var short took
			if a.take(b, now, &short) {
				ok++
			}
		}
		return ok
	}
}

// A refund unbinds its key's allowance: the allowance was taken of a pool
// without the units given back, so until the next answer the key is
// decided on the local bucket, as a loose key is (a cached server refused
// the charge after a refund so, e2e TestRefunds/tier_cached).
func TestRefundUnbindsAllowance(t *testing.T) {
	a := newAllowances(10)
	take := oneUnit(a, "k")
	a.set("k", 0, 0, 1, int64(time.Hour))
	if got := take(3, 2); got != 0 {
		t.Fatalf("an allowance of 0: admitted %d of 3", got)
	}
	a.unbind("k")
	if got := take(3, 3); got != 3 {
		t.Errorf("after a refund: admitted %d of 3; want 3 (the local bucket decides)", got)
	}
	a.set("k", 1, 3, 4, int64(time.Hour)) // the next answer binds it again
	if got := take(3, 5); got != 1 {
		t.Errorf("after the next answer of 1: admitted %d of 3; want 1", got)
	}
}
