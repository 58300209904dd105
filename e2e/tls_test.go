package e2e

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/testpki"
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
	cfg := writeConfig(t, `domain: edge
descriptors:
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: fixed_window}
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

	// Envoy's certificate may ask, not record.
	marked := metadata.AppendToOutgoingContext(ctx, rls.SidecarKey, rls.SidecarRecord)
	if _, err := direct.ShouldRateLimit(marked, req); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a record marker from envoy.sluice: %v; want PermissionDenied", err)
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
