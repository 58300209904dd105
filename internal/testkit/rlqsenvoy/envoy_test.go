package rlqsenvoy

import (
	"errors"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Envoy's own scenarios (test/extensions/filters/http/rate_limit_quota/
// at 28cb0f71a90d), ported: the file and line of each test named.

// recorder is a stream that keeps what is sent, or fails.
type recorder struct {
	sent []*rlqsv3.RateLimitQuotaUsageReports
	fail bool
}

func (r *recorder) Send(m *rlqsv3.RateLimitQuotaUsageReports) error {
	if r.fail {
		return errors.New("stream closed")
	}
	r.sent = append(r.sent, m)
	return nil
}

var t0 = time.Unix(1_700_000_000, 0)

func id(v string) map[string]string { return map[string]string{"name": v} }

func action(v string, st *typev3.RateLimitStrategy, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse {
	return &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{{
		BucketId: &rlqsv3.BucketId{Bucket: id(v)},
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
			AssignmentTimeToLive: durationpb.New(ttl), RateLimitStrategy: st,
		}},
	}}}
}

func blanket(r typev3.RateLimitStrategy_BlanketRule) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: r}}
}

func bucketOf(max, perFill uint32, every time.Duration) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens: max, TokensPerFill: wrapperspb.UInt32(perFill), FillInterval: durationpb.New(every),
	}}}
}

func newEnvoy(r *recorder) *Envoy {
	return New("d", func() (Stream, error) {
		if r.fail {
			return nil, errors.New("refused")
		}
		return r, nil
	})
}

// client_test.cc:290 TestInitialCreation, :343 TestCreationWithDefaultDeny,
// integration_test.cc:534 BasicFlowMultiSameRequest: a new bucket's first
// request is reported at once alone, allowed unless the default denies;
// later ones wait for the tick.
func TestInitialReport(t *testing.T) {
	r := &recorder{}
	e := newEnvoy(r)
	deny := Settings{NoAssignment: blanket(typev3.RateLimitStrategy_DENY_ALL)}
	if !e.Request(id("a"), Settings{}, t0) || e.Request(id("b"), deny, t0) {
		t.Fatal("first requests: want a allowed (ALLOW_ALL default), b denied (DENY_ALL)")
	}
	e.Request(id("a"), Settings{}, t0)
	if len(r.sent) != 2 {
		t.Fatalf("%d reports; want one per new bucket", len(r.sent))
	}
	for i, want := range []struct{ allowed, denied uint64 }{{1, 0}, {0, 1}} {
		u := r.sent[i].GetBucketQuotaUsages()
		if len(u) != 1 || u[0].GetNumRequestsAllowed() != want.allowed || u[0].GetNumRequestsDenied() != want.denied || u[0].GetTimeElapsed().AsDuration() != 0 {
			t.Errorf("report %d: %v; want one usage, %v, 0 s elapsed", i, u, want)
		}
	}
}

// client_test.cc:397 BasicUsageReporting, integration_test.cc:1045
// BasicFlowPeriodicalReport: every 5 s one report of every bucket, with
// the counts since the last and whole seconds elapsed; every second with
// the report period pull request 47104 makes configurable.
func TestPeriodicReport(t *testing.T) {
	for _, every := range []time.Duration{ReportInterval, time.Second} {
		t.Run(every.String(), func(t *testing.T) {
			r := &recorder{}
			e := newEnvoy(r)
			if every != ReportInterval {
				e = NewReporting("d", func() (Stream, error) { return r, nil }, every)
			}
			e.Request(id("a"), Settings{}, t0)
			for range 3 {
				e.Request(id("a"), Settings{}, t0.Add(every/2))
			}
			e.Tick(t0.Add(every - 100*time.Millisecond))
			if len(r.sent) != 1 {
				t.Fatalf("before %v: %d reports; want only the first", every, len(r.sent))
			}
			e.Tick(t0.Add(every))
			u := r.sent[1].GetBucketQuotaUsages()
			if len(u) != 1 || u[0].GetNumRequestsAllowed() != 3 || u[0].GetTimeElapsed().AsDuration() != every {
				t.Fatalf("periodic report: %v; want 3 allowed over %v", u, every)
			}
			e.Tick(t0.Add(2 * every))
			if u := r.sent[2].GetBucketQuotaUsages(); u[0].GetNumRequestsAllowed() != 0 {
				t.Errorf("the next: %v; want the counts reset", u)
			}
		})
	}
}

// client_test.cc:436 TestStreamCreationFailures, :485
// TestStreamFailureMidUse: a report that cannot be sent is lost, its
// counts reset; the next tick opens a stream again.
func TestLostReports(t *testing.T) {
	r := &recorder{fail: true}
	e := newEnvoy(r)
	e.Request(id("a"), Settings{}, t0)
	e.Request(id("a"), Settings{}, t0.Add(time.Second))
	e.Tick(t0.Add(5 * time.Second))
	if e.Lost != 2 {
		t.Fatalf("%d reports lost; want 2", e.Lost)
	}
	r.fail = false
	e.Request(id("a"), Settings{}, t0.Add(6*time.Second))
	e.Tick(t0.Add(10 * time.Second))
	if len(r.sent) != 1 || r.sent[0].GetBucketQuotaUsages()[0].GetNumRequestsAllowed() != 1 {
		t.Fatalf("after the stream returns: %v; want one report of the one request since", r.sent)
	}
}

// client_test.cc:562 TestBasicResponseProcessing, :758
// TestResponseProcessingForNonExistentBucket, :814 TestResponseEdgeCases:
// blanket rules apply; an action for an unknown bucket and the
// requests_per_time_unit strategy are dropped.
func TestAssignments(t *testing.T) {
	e := newEnvoy(&recorder{})
	e.Request(id("a"), Settings{}, t0)
	e.Deliver(action("a", blanket(typev3.RateLimitStrategy_DENY_ALL), time.Minute), t0)
	if e.Request(id("a"), Settings{}, t0) {
		t.Error("after DENY_ALL: allowed")
	}
	e.Deliver(action("unknown", blanket(typev3.RateLimitStrategy_DENY_ALL), time.Minute), t0)
	if e.Buckets() != 1 {
		t.Error("an action for an unknown bucket made one")
	}
	rptu := &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_RequestsPerTimeUnit_{RequestsPerTimeUnit: &typev3.RateLimitStrategy_RequestsPerTimeUnit{RequestsPerTimeUnit: 1}}}
	e.Deliver(action("a", rptu, time.Minute), t0)
	if e.Request(id("a"), Settings{}, t0) {
		t.Error("requests_per_time_unit replaced DENY_ALL; want it dropped")
	}
}

// integration_test.cc:1391 MultiRequestWithTokenBucketReplacement,
// client_test.cc:671 TestDuplicateTokenBucket: an equal bucket keeps its
// tokens; a changed one starts at the old one's ratio, rounded down.
func TestTokenBucketReplacement(t *testing.T) {
	e := newEnvoy(&recorder{})
	e.Request(id("a"), Settings{}, t0)
	e.Deliver(action("a", bucketOf(2, 1, time.Second), time.Minute), t0)
	if !e.Request(id("a"), Settings{}, t0) {
		t.Fatal("a full bucket of 2: refused")
	}
	// Equal, at 1.5 tokens: kept, so at 1 s it holds 2 (a new one would
	// start at 1, rounded down, and hold 1.5).
	e.Deliver(action("a", bucketOf(2, 1, time.Second), time.Minute), t0.Add(500*time.Millisecond))
	at := t0.Add(time.Second)
	if !e.Request(id("a"), Settings{}, at) || !e.Request(id("a"), Settings{}, at) || e.Request(id("a"), Settings{}, at) {
		t.Fatal("the same bucket again: want its tokens kept (2 at 1 s)")
	}
	// 1 of 2 left, then a bucket of 6: starts at 3.
	e2 := newEnvoy(&recorder{})
	e2.Request(id("a"), Settings{}, t0)
	e2.Deliver(action("a", bucketOf(2, 1, time.Hour), time.Minute), t0)
	e2.Request(id("a"), Settings{}, t0)
	e2.Deliver(action("a", bucketOf(6, 1, time.Hour), time.Minute), t0)
	n := 0
	for e2.Request(id("a"), Settings{}, t0) {
		n++
	}
	if n != 3 {
		t.Errorf("a bucket of 6 after one of 2 at half: %d tokens; want 3", n)
	}
	// Only fill_interval's seconds differ: Envoy takes it for the same.
	e3 := newEnvoy(&recorder{})
	e3.Request(id("a"), Settings{}, t0)
	e3.Deliver(action("a", bucketOf(1, 1, time.Hour), time.Minute), t0)
	e3.Request(id("a"), Settings{}, t0)
	e3.Deliver(action("a", bucketOf(1, 1, time.Second), time.Minute), t0)
	if e3.Request(id("a"), Settings{}, t0.Add(2*time.Second)) {
		t.Error("a bucket differing in fill_interval seconds only: refilled at the new rate; Envoy keeps the old")
	}
}

// client_test.cc:903 TestExpirationAndFallback, integration_test.cc:1751
// MultiSameRequestWithExpirationToDefaultDeny: on expiry the fallback
// holds for its whole seconds, then the default.
func TestExpiry(t *testing.T) {
	e := newEnvoy(&recorder{})
	s := Settings{Expired: blanket(typev3.RateLimitStrategy_DENY_ALL), ExpiredFor: 15 * time.Second}
	e.Request(id("a"), s, t0)
	e.Deliver(action("a", blanket(typev3.RateLimitStrategy_ALLOW_ALL), 10*time.Second+900*time.Millisecond), t0)
	if !e.Request(id("a"), s, t0.Add(9*time.Second)) {
		t.Error("within the TTL: refused")
	}
	if e.Request(id("a"), s, t0.Add(10*time.Second)) {
		t.Error("after 10 s (the TTL's whole seconds): allowed; want the DENY_ALL fallback")
	}
	if !e.Request(id("a"), s, t0.Add(25*time.Second)) {
		t.Error("after the fallback's 15 s: refused; want the ALLOW_ALL default")
	}
}

// client_test.cc:1222 TestAbandonAction, integration_test.cc:1880
// MultiSameRequestWithAbandonAction: abandon erases the bucket; its next
// request makes it anew, reported at once.
func TestAbandon(t *testing.T) {
	r := &recorder{}
	e := newEnvoy(r)
	e.Request(id("a"), Settings{}, t0)
	e.Deliver(&rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{{
		BucketId:     &rlqsv3.BucketId{Bucket: id("a")},
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}},
	}}}, t0)
	if e.Buckets() != 0 {
		t.Fatal("abandoned, still held")
	}
	e.Request(id("a"), Settings{}, t0.Add(time.Second))
	if len(r.sent) != 2 {
		t.Errorf("%d reports; want a new first report", len(r.sent))
	}
}
