package main

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluicehq/sluice/internal/testkit/testpki"
)

// TestReferenceClientSAN starts the built server with only the
// reference's environment, mTLS with GRPC_CLIENT_TLS_SAN=sidecar-a, as the
// finding did: a certificate named intruder, from the same CA, is refused
// at the handshake (it was served, and recorded 2^32 hits on a victim),
// the sidecar's is served. Without GRPC_CLIENT_TLS_CACERT, where the
// reference ignores the name, the server does not start.
func TestReferenceClientSAN(t *testing.T) {
	bin := filepath.Join(buildDaemons(t), "server")
	ca := testpki.New(t)
	serverCert, serverKey := ca.Issue(t, "ratelimit", "ratelimit.sluice")
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "limits.yaml"), []byte(testConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "LOG_FORMAT=json",
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "HOST=127.0.0.1", "PORT=0",
		"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=" + serverCert, "GRPC_SERVER_TLS_KEY=" + serverKey,
		"GRPC_CLIENT_TLS_SAN=sidecar-a",
	}
	t.Run("without a client CA", func(t *testing.T) {
		d := runDaemon(t, bin, env)
		if d.grpcAddr != "" {
			t.Fatalf("the server started with GRPC_CLIENT_TLS_SAN and no client CA: no name would be checked")
		}
		if code, _ := d.exited(10 * time.Second); code == 0 || !strings.Contains(d.out.String(), "GRPC_CLIENT_TLS_SAN") {
			t.Errorf("exit %d; want a start-up error naming GRPC_CLIENT_TLS_SAN:\n%s", code, d.out)
		}
	})

	d := runDaemon(t, bin, append(env, "GRPC_CLIENT_TLS_CACERT="+ca.Path("ca.pem")))
	if d.grpcAddr == "" {
		t.Fatalf("the server did not start:\n%s", d.out)
	}
	dial := func(name string) *tls.Config {
		cert, key := ca.Issue(t, name, name)
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		return &tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{pair}, ServerName: "ratelimit.sluice"}
	}
	call := func(tc *tls.Config) error {
		conn, err := grpc.NewClient(d.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, request("victim"))
		return err
	}
	if err := call(dial("sidecar-a")); err != nil {
		t.Fatalf("the sidecar-a certificate: %v\n%s", err, d.out)
	}
	intruder := dial("intruder")
	if err := call(intruder); err == nil {
		t.Fatal("the intruder certificate was served")
	}
	// Refused at the handshake: TLS 1.3 delivers the server's verdict on
	// the client's certificate as an alert after the client's side of it.
	intruder.NextProtos = []string{"h2"}
	conn, err := tls.Dial("tcp", d.grpcAddr, intruder)
	if err == nil {
		defer conn.Close()
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = conn.Read(make([]byte, 1))
	}
	if err == nil || !strings.Contains(err.Error(), "bad certificate") {
		t.Errorf("the intruder's handshake: %v; want the server's bad certificate alert", err)
	}
}
