package rls

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/peerauth"
	"github.com/sluicehq/sluice/pkg/share"
)

const (
	goodToken = "good-sidecar-token-0123456789"
	evilToken = "evil-sidecar-token-0123456789"
)

// tokens serves the service with two sidecars known by token, good and
// evil (over plaintext: the harness's gRPC is), and returns the option and
// the registry counting refusals.
func tokens(t *testing.T) (ServiceOption, *prometheus.Registry) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte("good "+goodToken+"\nevil "+evilToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := peerauth.New(peerauth.Options{TokenFile: path, PlaintextTokens: true})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	return WithProxies(a, slog.New(slog.DiscardHandler), reg), reg
}

func marked(token string, kv ...string) context.Context {
	kv = append([]string{SidecarKey, SidecarRecord}, kv...)
	if token != "" {
		kv = append(kv, peerauth.TokenKey, "Bearer "+token)
	}
	return metadata.AppendToOutgoingContext(context.Background(), kv...)
}

// TestRecordMarkerFromStrangers: the record marker and a demand report
// from a caller the service does not know as a sidecar are answered as an
// ordinary request (its 2^32 hits refused, nothing recorded, no
// allowance), counted and said in RefusedKey; the victim's key is
// untouched. Before sidecars were authenticated, this one call put a 3 a
// minute key 1.4 billion hits into debt (the Retry-After: 72 on a
// 5 a minute limit).
func TestRecordMarkerFromStrangers(t *testing.T) {
	tr, _ := share.New(share.Options{})
	for _, c := range []struct {
		name, token, reason string
		known               bool // sidecars known by token
	}{
		{"no sidecar configured", "", string(peerauth.NotConfigured), false},
		{"no credentials", "", string(peerauth.NoCredentials), true},
		{"a wrong token", goodToken + "x", string(peerauth.BadToken), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var opts []ServiceOption
			reg := prometheus.NewRegistry()
			if c.known {
				var auth ServiceOption
				auth, reg = tokens(t)
				opts = append(opts, auth)
			}
			h := start(t, limiter.Options{Shares: tr}, opts...)
			req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
				Entries: desc("remote_address", "victim").Entries, HitsAddend: wrapperspb.UInt64(1 << 32),
			}}}
			ctx := marked(c.token, SidecarIDKey, "evil", IntervalKey, "10000000", DemandKey, "1e9")
			var md metadata.MD
			resp, err := h.client.ShouldRateLimit(ctx, req, grpc.Header(&md))
			if err != nil {
				t.Fatal(err)
			}
			if got := md.Get(RefusedKey); len(got) != 1 || got[0] != c.reason {
				t.Errorf("%s = %q; want %q", RefusedKey, got, c.reason)
			}
			if len(md.Get(AllowanceKey)) != 0 || len(md.Get(RetryAfterKey)) != 0 {
				t.Errorf("a stranger got sidecar answers: %v", md)
			}
			if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || len(resp.ResponseHeadersToAdd) == 0 {
				t.Errorf("2^32 hits from a stranger: %v; want OVER_LIMIT with a client's headers", resp)
			}
			victim := h.call(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("remote_address", "victim")}})
			if victim.OverallCode != rlsv3.RateLimitResponse_OK || victim.Statuses[0].LimitRemaining != 2 {
				t.Errorf("the victim after the stranger's call: %v; want OK with 2 of 3 left", victim)
			}
			if n := counterValue(t, reg, "sluice_sidecar_refusals_total", c.reason); c.known && n != 1 {
				t.Errorf("sluice_sidecar_refusals_total{reason=%s} = %v; want 1", c.reason, n)
			}
		})
	}
}

// TestSidecarNameBoundToItsToken: a sidecar known by one token cannot
// speak for a sidecar known by another by claiming its name: its reports
// are its own peer's, and the honest sidecar keeps its share of the key.
func TestSidecarNameBoundToItsToken(t *testing.T) {
	auth, _ := tokens(t)
	tr, _ := share.New(share.Options{})
	h := start(t, limiter.Options{Shares: tr}, auth)
	// per-key: 10 a second, burst 20; 15 recorded leaves 5.
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: desc("api_key", "shared").Entries, HitsAddend: wrapperspb.UInt64(0),
	}}}
	allowance := func(token string, hits uint64, demand string) float64 {
		t.Helper()
		req.Descriptors[0].HitsAddend = wrapperspb.UInt64(hits)
		var md metadata.MD
		ctx := marked(token, SidecarIDKey, "sidecar-a", IntervalKey, "10000", DemandKey, demand)
		if _, err := h.client.ShouldRateLimit(ctx, req, grpc.Header(&md)); err != nil {
			t.Fatal(err)
		}
		if len(md.Get(RefusedKey)) != 0 {
			t.Fatalf("a known sidecar refused: %v", md.Get(RefusedKey))
		}
		a, err := strconv.ParseFloat(md.Get(AllowanceKey)[0], 64)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	if a := allowance(goodToken, 15, "500"); a != 5 {
		t.Fatalf("alone on a tight key with 5 left: allowance %v; want 5", a)
	}
	// evil claims good's name and all the demand a report may carry: its
	// own peer's report, weighing at most the limit's rate (10/s), as
	// good's does: good keeps half of the 5 left, rounded either way.
	allowance(evilToken, 0, "1e9")
	if a := allowance(goodToken, 0, "500"); a < 2 {
		t.Errorf("after evil's claims under good's name: good's allowance %v of 5; want at least 2", a)
	}
}

// counterValue is the value of the counter name whose one label is label.
func counterValue(t *testing.T, reg *prometheus.Registry, name string, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == name && len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == label {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestDemandBackedByWhatWasAsked: a sidecar that says what it denied
// (DeniedKey) has its demand weighed against it with its hits: evil's
// report of 1e9 a second, recording nothing and denying nothing, takes
// nothing of good's share; said with the units that back it, it weighs the
// limit's rate as before.
func TestDemandBackedByWhatWasAsked(t *testing.T) {
	for _, c := range []struct {
		name   string
		denied string
		want   func(a float64) bool
	}{
		{"backed by nothing", "0", func(a float64) bool { return a == 5 }},
		{"backed by what it denied", "1000", func(a float64) bool { return a < 5 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			auth, _ := tokens(t)
			tr, _ := share.New(share.Options{})
			h := start(t, limiter.Options{Shares: tr}, auth)
			// per-key: 10 a second, burst 20; 15 recorded leaves 5.
			req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
				Entries: desc("api_key", "shared").Entries,
			}}}
			allowance := func(token string, hits uint64, demand, denied string) float64 {
				t.Helper()
				req.Descriptors[0].HitsAddend = wrapperspb.UInt64(hits)
				var md metadata.MD
				ctx := marked(token, SidecarIDKey, "s", IntervalKey, "10000", DemandKey, demand, DeniedKey, denied)
				if _, err := h.client.ShouldRateLimit(ctx, req, grpc.Header(&md)); err != nil {
					t.Fatal(err)
				}
				a, err := strconv.ParseFloat(md.Get(AllowanceKey)[0], 64)
				if err != nil {
					t.Fatal(err)
				}
				return a
			}
			allowance(goodToken, 15, "1500", "0")
			allowance(evilToken, 0, "1e9", c.denied)
			if a := allowance(goodToken, 0, "1500", "15"); !c.want(a) {
				t.Errorf("good's allowance of the 5 left beside evil's claim: %v", a)
			}
		})
	}
}
