package rlqs

import (
	"context"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// FuzzReport: any report, however built, is answered or refused with
// InvalidArgument or ResourceExhausted; never a panic, and every action
// names a bucket of the report.
func FuzzReport(f *testing.F) {
	f.Add("quota", "name", "bucket", "", "", uint64(3), uint64(1), int64(5))
	f.Add("quota", "name", "window", "tenant", "a\x00b", uint64(1<<63), uint64(1<<63), int64(-1))
	f.Add("", "", "", "", "", uint64(0), uint64(0), int64(0))
	f.Add("quota", "name", "bucket", "name", "window", uint64(0), uint64(0), int64(1<<40))
	f.Fuzz(func(t *testing.T, domain, k1, v1, k2, v2 string, allowed, denied uint64, elapsed int64) {
		s := newSim(t, time.Unix(1_700_000_040, 0))
		ss := &stream{id: s.svc.ids.Add(1), buckets: make(map[string]*bucket), pokes: make(chan string, maxPokes)}
		id := map[string]string{k1: v1}
		if k2 != "" {
			id[k2] = v2
		}
		m := &rlqsv3.RateLimitQuotaUsageReports{Domain: domain, BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
			BucketId: &rlqsv3.BucketId{Bucket: id}, TimeElapsed: &durationpb.Duration{Seconds: elapsed},
			NumRequestsAllowed: allowed, NumRequestsDenied: denied,
		}, {}}}
		for range 2 { // a first report, then a periodic one
			resp, err := s.svc.report(context.Background(), ss, m)
			if err != nil {
				if c := status.Code(err); c != codes.InvalidArgument && c != codes.ResourceExhausted {
					t.Fatalf("refused with %v; want InvalidArgument or ResourceExhausted", err)
				}
				return
			}
			for _, a := range resp.GetBucketAction() {
				if len(a.GetBucketId().GetBucket()) == 0 {
					t.Fatalf("an action for no bucket: %v", a)
				}
			}
			if r := s.svc.poked(ss, "no such key"); r != nil {
				t.Fatalf("a poke of an unknown key answered %v", r)
			}
		}
	})
}
