package e2e

import (
	"context"
	"crypto/tls"
	"net/http"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/testkit/testpki"
	"github.com/sluicehq/sluice/pkg/rls"
)

// tlsClient is a RateLimitService client over mTLS with the certificate
// cert/key, verifying the server against ca.
func tlsClient(t *testing.T, addr string, ca *testpki.CA, cert, key string) rlsv3.RateLimitServiceClient {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs: ca.Pool, Certificates: []tls.Certificate{pair}, ServerName: "127.0.0.1",
	})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// TestSidecarMTLS: Envoy → sidecar → server with mutual TLS on both hops,
// and the server honouring the record marker only from the sidecar's
// certificate (-record-clients): Envoy's own certificate cannot record
// hits, nor can a plaintext client reach either port.
func TestSidecarMTLS(t *testing.T) {
	ca := testpki.New(t)
	serverCert, serverKey := ca.Issue(t, "server", "server.sluice")
	sidecarCert, sidecarKey := ca.Issue(t, "sidecar", "sidecar.sluice")
	envoyCert, envoyKey := ca.Issue(t, "envoy", "envoy.sluice")
	// 5 in any hour: no window end for the hits to straddle before the
	// server is asked what is left (a fixed minute's end would reset it
	// to 5).
	cfg := writeConfig(t, `domain: edge
descriptors:
  - key: client
    rate_limit: {unit: hour, requests_per_unit: 5, algorithm: sliding_log}
`)
	server := startServer(t, "server", "-config", cfg,
		"-grpc-tls-cert", serverCert, "-grpc-tls-key", serverKey, "-grpc-tls-client-ca", ca.Path("ca.pem"),
		"-record-clients", "sidecar.sluice")
	sidecar := startSidecar(t, "sidecar", "-config", cfg, "-upstream", server.GRPC, "-mode", "async", "-upstream-timeout", "1s",
		"-grpc-tls-cert", sidecarCert, "-grpc-tls-key", sidecarKey, "-grpc-tls-client-ca", ca.Path("ca.pem"),
		"-upstream-tls-ca", ca.Path("ca.pem"), "-upstream-tls-cert", sidecarCert, "-upstream-tls-key", sidecarKey,
		"-upstream-tls-server-name", "server.sluice")

	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "client", Value: "a"}},
	}}}
	ctx := context.Background()
	envoy := tlsClient(t, sidecar.GRPC, ca, envoyCert, envoyKey)
	for i := range 3 {
		if resp, err := envoy.ShouldRateLimit(ctx, req); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("request %d through the sidecar: %v, %v\n%s", i, resp, err, sidecar.logTail())
		}
	}
	// The sidecar recorded its 3 upstream over mTLS: the server, asked
	// directly, has 2 left of 5 for the key.
	direct := tlsClient(t, server.GRPC, ca, envoyCert, envoyKey)
	check := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: req.Descriptors[0].Entries, HitsAddend: wrapperspb.UInt64(0),
	}}}
	waitFor(t, 10*time.Second, "the sidecar's hits recorded upstream", func() bool {
		resp, err := direct.ShouldRateLimit(ctx, check)
		return err == nil && resp.Statuses[0].LimitRemaining == 2
	})
	if up := sidecar.metric(t, "sluice_localfilter_upstream_up"); up != 1 {
		t.Errorf("sluice_localfilter_upstream_up = %v; want 1", up)
	}

	// Envoy's certificate may ask, not record: its marker is answered
	// as an ordinary request, 2^32 hits refused and nothing recorded.
	marked := metadata.AppendToOutgoingContext(ctx, rls.SidecarKey, rls.SidecarRecord)
	huge := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: req.Descriptors[0].Entries, HitsAddend: wrapperspb.UInt64(1 << 32),
	}}}
	var md metadata.MD
	resp, err := direct.ShouldRateLimit(marked, huge, grpc.Header(&md))
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || len(md.Get(rls.RefusedKey)) != 1 || md.Get(rls.RefusedKey)[0] != "unknown_certificate" {
		t.Fatalf("a record marker from envoy.sluice: %v, %v, %s %q; want OVER_LIMIT, refused as unknown_certificate", resp, err, rls.RefusedKey, md.Get(rls.RefusedKey))
	}
	if resp, err := direct.ShouldRateLimit(ctx, check); err != nil || resp.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("after envoy.sluice's marker: %v, %v; want 2 left, as before", resp, err)
	}
	// Neither port serves a plaintext client.
	for _, p := range []*proc{server, sidecar} {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := p.client(t).ShouldRateLimit(cctx, req)
		cancel()
		if err == nil {
			t.Errorf("%s served a plaintext client", p.name)
		}
	}
}

// TestSidecarTokensOverTLS: sidecars known by token over TLS, the
// recommended way where client certificates are not at hand. A forged
// demand report and record marker from a caller without a token change
// nothing for a tenant served through the sidecar (the issue's attack
// took it from 20 of 20 admitted to 0 of 20 for 30 s); a sidecar with a
// wrong token has its recorded hits refused, and says so in its metrics
// and /readyz.
func TestSidecarTokensOverTLS(t *testing.T) {
	ca := testpki.New(t)
	serverCert, serverKey := ca.Issue(t, "server", "server.sluice")
	cfg := writeConfig(t, `domain: edge
descriptors:
  - key: client
    rate_limit: {unit: second, requests_per_unit: 100}
`)
	auth := newSidecarTokens(t, 1)
	wrong := writeFile(t, t.TempDir(), "wrong.token", "not-the-servers-token-0123456789\n")
	server := startServer(t, "server", "-config", cfg, "-grpc-tls-cert", serverCert, "-grpc-tls-key", serverKey,
		"-sidecar-tokens", auth.server[1])
	upstream := []string{"-config", cfg, "-upstream", server.GRPC, "-mode", "async", "-upstream-timeout", "1s",
		"-upstream-tls-ca", ca.Path("ca.pem"), "-upstream-tls-server-name", "server.sluice"}
	good := startSidecar(t, "sidecar", append(upstream, "-upstream-token-file", auth.files[0])...)
	stranger := startSidecar(t, "stranger", append(upstream, "-upstream-token-file", wrong)...)

	ctx := context.Background()
	// A caller with TLS but no token (the certificate it holds is
	// nobody's business: the server asks for none) forges a demand report
	// and a record.
	forger := tlsClient(t, server.GRPC, ca, serverCert, serverKey)
	tenant := func(hits uint64) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries:    []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "client", Value: "tenant"}},
			HitsAddend: wrapperspb.UInt64(hits),
		}}}
	}
	forge := func() {
		t.Helper()
		fctx := metadata.AppendToOutgoingContext(ctx, rls.SidecarKey, rls.SidecarRecord, rls.SidecarIDKey, "sidecar-0",
			rls.IntervalKey, "10000000", rls.DemandKey, "1e9")
		var md metadata.MD
		if _, err := forger.ShouldRateLimit(fctx, tenant(0), grpc.Header(&md)); err != nil {
			t.Fatal(err)
		}
		if len(md.Get(rls.AllowanceKey)) != 0 || len(md.Get(rls.RefusedKey)) == 0 {
			t.Fatalf("a forged report answered %v; want refused, no allowance", md)
		}
		rctx := metadata.AppendToOutgoingContext(ctx, rls.SidecarKey, rls.SidecarRecord)
		if _, err := forger.ShouldRateLimit(rctx, tenant(1<<32)); err != nil {
			t.Fatal(err)
		}
	}
	client := good.client(t)
	admitted := 0
	for i := range 20 { // 20 a second on a limit of 100 a second
		if i%5 == 0 {
			forge()
		}
		resp, err := client.ShouldRateLimit(ctx, tenant(1))
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode == rlsv3.RateLimitResponse_OK {
			admitted++
		}
		time.Sleep(50 * time.Millisecond) // the tenant's pace, not a wait for state
	}
	if admitted < 18 {
		t.Errorf("the tenant got %d of 20 admitted with forged reports about; want at least 18 (90%%)", admitted)
	}
	// The good sidecar's hits were recorded as a sidecar's.
	waitFor(t, 10*time.Second, "the sidecar's hits recorded upstream", func() bool {
		return good.metric(t, "sluice_localfilter_upstream_calls_total", "kind", "record", "result", "ok") > 0
	})
	if n := good.metric(t, "sluice_localfilter_record_refusals_total"); n != 0 {
		t.Errorf("the sidecar with the right token saw %v refusals", n)
	}
	// The stranger's records are refused, and it says so.
	sclient := stranger.client(t)
	for range 3 {
		if _, err := sclient.ShouldRateLimit(ctx, tenant(1)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "the stranger sidecar to see its records refused", func() bool {
		return stranger.metric(t, "sluice_localfilter_record_refusals_total", "reason", "bad_token") > 0
	})
	if code, body := stranger.get(t, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "does not know this sidecar") {
		t.Errorf("the refused sidecar's /readyz: %d %q; want 503 saying why", code, body)
	}
	if code, _ := good.get(t, "/readyz"); code != http.StatusOK {
		t.Errorf("the good sidecar's /readyz: %d; want 200", code)
	}
	if n := server.metric(t, "sluice_sidecar_refusals_total", "reason", "bad_token"); n == 0 {
		t.Errorf("the server counted no bad_token refusal")
	}
}
