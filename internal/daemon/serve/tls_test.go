package serve

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluicehq/sluice/internal/testkit/testpki"
)

// TestClientSAN: with -grpc-tls-client-san, a client certificate the
// trusted CA signed is refused at the handshake unless it carries the
// name, matched as the reference matches GRPC_CLIENT_TLS_SAN (x509 host
// name verification: DNS names, wildcards included, or an IP address).
// The finding: a certificate named "intruder" from the same CA was served.
func TestClientSAN(t *testing.T) {
	ca := testpki.New(t)
	serverCert, serverKey := ca.Issue(t, "server", "server.sluice")
	certs := map[string][2]string{}
	for name, dns := range map[string]string{"sidecar": "sidecar-a", "intruder": "intruder", "wildcard": "*.sidecars.sluice"} {
		c, k := ca.Issue(t, name, dns)
		certs[name] = [2]string{c, k}
	}
	tests := []struct {
		san     string
		served  []string
		refused []string
	}{
		{"sidecar-a", []string{"sidecar"}, []string{"intruder", "wildcard"}},
		{"a.sidecars.sluice", []string{"wildcard"}, []string{"sidecar", "intruder"}},
		{"", []string{"sidecar", "intruder", "wildcard"}, nil}, // no name asked: any certificate the CA signed
	}
	for _, tt := range tests {
		t.Run(tt.san, func(t *testing.T) {
			g := GRPCTLS{Cert: serverCert, Key: serverKey, ClientCA: ca.Path("ca.pem"), ClientSAN: tt.san}
			if err := g.Validate(); err != nil {
				t.Fatal(err)
			}
			opts, err := g.ServerOptions()
			if err != nil {
				t.Fatal(err)
			}
			addr, _ := start(t, Options{GRPC: NewGRPC(noop{}, opts...)})
			for _, name := range tt.served {
				if err := callWith(t, addr, ca, certs[name]); err != nil {
					t.Errorf("-grpc-tls-client-san %q: the %s certificate was refused: %v", tt.san, name, err)
				}
			}
			for _, name := range tt.refused {
				if err := callWith(t, addr, ca, certs[name]); err == nil {
					t.Errorf("-grpc-tls-client-san %q: the %s certificate was served", tt.san, name)
				}
				if err := handshake(t, addr, ca, certs[name]); err == nil || !strings.Contains(err.Error(), "bad certificate") {
					t.Errorf("-grpc-tls-client-san %q: the %s certificate's handshake: %v; want the server's bad certificate alert", tt.san, name, err)
				}
			}
		})
	}
}

func clientTLS(t *testing.T, ca *testpki.CA, pair [2]string) *tls.Config {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(pair[0], pair[1])
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{cert}, ServerName: "server.sluice"}
}

// callWith makes one RateLimitService call with the client certificate.
func callWith(t *testing.T, addr string, ca *testpki.CA, pair [2]string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(clientTLS(t, ca, pair))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d"})
	return err
}

// handshake completes a TLS handshake with the client certificate and
// reads: under TLS 1.3 the server's verdict on the certificate arrives
// after the client's side of the handshake, as an alert. nil when the
// server sends data (gRPC's settings) instead.
func handshake(t *testing.T, addr string, ca *testpki.CA, pair [2]string) error {
	tc := clientTLS(t, ca, pair)
	tc.NextProtos = []string{"h2"}
	conn, err := tls.Dial("tcp", addr, tc)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	return err
}
