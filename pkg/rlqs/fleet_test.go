package rlqs

import (
	"context"
	"math"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestDemandIgnoresCountingNoise: a quiet Envoy's whole-request counts
// (1 or 2 in 5 s at 0.3 a second) leave its demand where its first reports
// put it, since each move would push it a new bucket and cost it up to a
// token; a real change moves it.
func TestDemandIgnoresCountingNoise(t *testing.T) {
	f := newFleet(10)
	lim := shape{rate: 100, burst: 100}
	now := time.Unix(1_700_000_000, 0)
	demand := func() float64 { return f.keys["k"].members[1].demand }
	report := func(n float64) {
		now = now.Add(ReportInterval)
		if _, _, ok := f.observe("k", 1, n, n, ReportInterval.Seconds(), lim, now, nil); !ok {
			t.Fatal("fleet full")
		}
	}
	for _, n := range []float64{2, 1, 2} {
		report(n)
	}
	kept := demand()
	for i, n := range []float64{1, 2, 1, 1, 2, 2, 1} {
		if report(n); demand() != kept {
			t.Fatalf("report %d of %v requests moved the demand from %.3f to %.3f", i, n, kept, demand())
		}
	}
	for range demandReports {
		report(10)
	}
	if d := demand(); d < 1.9 || d > 2.1 {
		t.Errorf("after reports of 10 in 5 s the demand is %.3f; want 2", d)
	}
}

// TestDemandOnTheServersClock: a bucket's demand is its requests over the
// time this server saw between its reports, not Envoy's time_elapsed,
// which is whole seconds truncated (2.9 s reads as 2).
func TestDemandOnTheServersClock(t *testing.T) {
	s := newSim(t, time.Unix(1_700_000_040, 0))
	ss := &stream{id: s.svc.ids.Add(1), buckets: make(map[string]*bucket), pokes: make(chan string, maxPokes)}
	id := map[string]string{"name": "bucket"}
	send := func(n uint64, elapsed time.Duration) {
		t.Helper()
		_, err := s.svc.report(context.Background(), ss, &rlqsv3.RateLimitQuotaUsageReports{Domain: "quota",
			BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
				BucketId: &rlqsv3.BucketId{Bucket: id}, TimeElapsed: durationpb.New(elapsed), NumRequestsAllowed: n,
			}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	send(1, 0) // the subscription
	s.now = s.now.Add(2900 * time.Millisecond)
	send(29, 2*time.Second)
	b := ss.buckets[mustCanonical(t, id)]
	// The subscription's request and 29 over 2.9 s; Envoy's 2 s said 15.
	if d, want := s.svc.fleet.keys[b.key].members[ss.id].demand, 30/2.9; math.Abs(d-want) > 0.01 {
		t.Errorf("29 requests in 2.9 s (Envoy says 2 s): demand %.2f; want %.2f", d, want)
	}
}

// TestRapidReportsClaimNoMore: a stream that repeats one bucket a
// thousand times in a report, with the most requests a count may carry,
// and reports again a millisecond later (the server's clock now times its
// demand: 0 s between the repeats), gets at most the limit: never more
// than the whole rate, never a share read as infinite or NaN.
func TestRapidReportsClaimNoMore(t *testing.T) {
	s := newSim(t, time.Unix(1_700_000_040, 0))
	ss := &stream{id: s.svc.ids.Add(1), buckets: make(map[string]*bucket), pokes: make(chan string, maxPokes)}
	id := map[string]string{"name": "bucket"} // 100 a second, burst 100
	usage := &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqsv3.BucketId{Bucket: id},
		TimeElapsed: durationpb.New(time.Second), NumRequestsAllowed: math.MaxUint64, NumRequestsDenied: math.MaxUint64}
	m := &rlqsv3.RateLimitQuotaUsageReports{Domain: "quota"}
	for range 1000 {
		m.BucketQuotaUsages = append(m.BucketQuotaUsages, usage)
	}
	for i := range 5 {
		resp, err := s.svc.report(context.Background(), ss, m)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range resp.GetBucketAction() {
			tb := a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
			rate := float64(tb.GetTokensPerFill().GetValue()) / tb.GetFillInterval().AsDuration().Seconds()
			if tb == nil || rate > 100 || math.IsNaN(rate) || tb.GetMaxTokens() > 100 {
				t.Fatalf("report %d: assigned %v (%.1f a second); want a token bucket within the limit", i, tb, rate)
			}
		}
		s.now = s.now.Add(time.Millisecond)
	}
}

// TestSharedValuesOneFleet: buckets whose values a share_threshold
// wildcard counts on one counter split that counter's limit between their
// Envoys, as the store counts them, rather than each taking all of it.
func TestSharedValuesOneFleet(t *testing.T) {
	s := newSim(t, time.Unix(1_700_000_040, 0))
	rate := func(ss *stream, file string) float64 {
		t.Helper()
		resp, err := s.svc.report(context.Background(), ss, &rlqsv3.RateLimitQuotaUsageReports{Domain: "quota",
			BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
				BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"files": file}}, TimeElapsed: durationpb.New(5 * time.Second), NumRequestsAllowed: 500,
			}}})
		if err != nil {
			t.Fatal(err)
		}
		tb := resp.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
		return float64(tb.GetTokensPerFill().GetValue()) / tb.GetFillInterval().AsDuration().Seconds()
	}
	a := &stream{id: s.svc.ids.Add(1), buckets: make(map[string]*bucket), pokes: make(chan string, maxPokes)}
	b := &stream{id: s.svc.ids.Add(1), buckets: make(map[string]*bucket), pokes: make(chan string, maxPokes)}
	rate(a, "files/a")
	if got := rate(b, "files/b"); got > 55 {
		t.Errorf("files/b beside files/a, both asking 100 a second of one shared 100: %.1f a second; want about half", got)
	}
}

// TestBlanketLimits: a limit of 0 is assigned DENY_ALL, as ShouldRateLimit
// refuses every request of it (not a token bucket of 2); a shadow-mode
// limit is assigned ALLOW_ALL, as ShouldRateLimit admits every request of
// it, and its counts are still recorded.
func TestBlanketLimits(t *testing.T) {
	s := newSim(t, time.Unix(1_700_000_040, 0))
	ss := &stream{id: s.svc.ids.Add(1), buckets: make(map[string]*bucket), pokes: make(chan string, maxPokes)}
	for _, c := range []struct{ name, want string }{{"blocked", "DENY_ALL"}, {"shadow", "ALLOW_ALL"}} {
		resp, err := s.svc.report(context.Background(), ss, &rlqsv3.RateLimitQuotaUsageReports{Domain: "quota",
			BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
				BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"name": c.name}}, TimeElapsed: durationpb.New(5 * time.Second), NumRequestsAllowed: 50,
			}}})
		if err != nil {
			t.Fatal(err)
		}
		st := resp.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy()
		if got := st.GetBlanketRule().String(); st.GetTokenBucket() != nil || got != c.want {
			t.Errorf("%s: assigned %v; want %s", c.name, st, c.want)
		}
	}
	if n := testutil.ToFloat64(s.svc.m.recorded.WithLabelValues("ok")); n != 100 {
		t.Errorf("recorded %v requests; want both buckets' 50", n)
	}
}
