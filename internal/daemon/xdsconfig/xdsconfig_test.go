package xdsconfig

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicehq/sluice/internal/testkit/testpki"
	"github.com/sluicehq/sluice/internal/testkit/xdstest"
	"github.com/sluicehq/sluice/pkg/server"
)

// TestXDSSource drives sluice through what Envoy Gateway does to the
// reference: start with no config, serve the first snapshot, apply a
// change, NACK a bad snapshot while the last good config keeps deciding,
// and resume the stream when the xDS server restarts.
func TestXDSSource(t *testing.T) {
	ca := testpki.New(t)
	cp := xdstest.Start(t, ca, "127.0.0.1:0")
	cert, key := ca.Issue(t, "ratelimit", "ratelimit.envoy-gateway-system")
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	src, err := New(Options{Server: cp.Addr, NodeID: "sluice-test", BackoffMin: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		TLS: &tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{pair}, ServerName: "xds.envoy-gateway-system"}})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := newServer(server.Options{ConfigSource: src, ConfigSourceName: src.Name()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()
	ask := func(client string) (*rlsv3.RateLimitResponse, error) {
		return srv.Service.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "gateway", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "client", Value: client}},
		}}})
	}
	// Within 10 s, or fail: milliseconds on an idle machine, but the first
	// snapshot and the resumed stream wait for an mTLS handshake and the
	// client's backoff, which a loaded machine under -race can stretch
	// past a second.
	within := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10 s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	limitOf := func(client string) uint32 {
		resp, err := ask(client)
		if err != nil {
			return 0
		}
		return resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
	}

	// No snapshot yet: no config, and the service says so.
	if _, err := ask("a"); err == nil {
		t.Fatal("decided without a config")
	}
	cp.Push("1", xdstest.LimitConfig("gateway-limits", 10))
	within("the first snapshot served", func() bool { return limitOf("b") == 10 })
	cp.Push("2", xdstest.LimitConfig("gateway-limits", 20))
	within("a changed snapshot applied", func() bool { return limitOf("c") == 20 })

	// A bad snapshot: a domain twice. NACKed with the reason; version 2
	// keeps deciding.
	cp.Push("3", xdstest.LimitConfig("one", 30), xdstest.LimitConfig("two", 40))
	within("the bad snapshot NACKed", func() bool { return len(cp.Nacks()) > 0 })
	nack := cp.Nacks()[0]
	if !containsAll(nack, "gateway") {
		t.Errorf("NACK %q does not give the reason", nack)
	}
	if got := limitOf("d"); got != 20 {
		t.Errorf("after the bad snapshot: limit %d; want the last good one, 20", got)
	}
	if srv.Config().LastError() == nil {
		t.Error("the rejected snapshot is not reported")
	}

	// The xDS server restarts on the same address: the stream resumes.
	cp.Srv.Stop()
	cp.Listen(cp.Addr)
	cp.Push("4", xdstest.LimitConfig("gateway-limits", 50))
	within("the stream resumed after the restart", func() bool { return limitOf("e") == 50 })

	// The fields after go-control-plane's ratelimit v0.1.0 come through.
	newer := xdstest.LimitConfig("gateway-limits", 60)
	meta, err := structpb.NewStruct(map[string]any{"team": "growth"})
	if err != nil {
		t.Fatal(err)
	}
	newer.Descriptors[0].QuotaMode, newer.Descriptors[0].Metadata = true, meta
	cp.Push("5", newer)
	within("quota_mode and metadata served", func() bool {
		ls := srv.Config().Current().Limits()
		return len(ls) == 1 && ls[0].QuotaMode && ls[0].Metadata["team"] == "growth"
	})
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
