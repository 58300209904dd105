package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluicehq/sluice/internal/redistest"
)

// testPKI writes a CA and a certificate for 127.0.0.1 signed by it.
func testPKI(t *testing.T) (dir string, pool *x509.CertPool) {
	t.Helper()
	dir = t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sluice test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	write := func(name, typ string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("ca.pem", "CERTIFICATE", caDER)
	write("cert.pem", "CERTIFICATE", der)
	write("key.pem", "EC PRIVATE KEY", keyDER)
	pool = x509.NewCertPool()
	pool.AddCert(ca)
	return dir, pool
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestTLS serves gRPC over TLS and talks to Redis over TLS (rediss://,
// verified against -redis-tls-ca).
func TestTLS(t *testing.T) {
	dir, pool := testPKI(t)
	tlsPort := freePort(t)
	rdb := redistest.Start(t, redistest.WithArgs(
		"--tls-port", fmt.Sprint(tlsPort),
		"--tls-cert-file", filepath.Join(dir, "cert.pem"),
		"--tls-key-file", filepath.Join(dir, "key.pem"),
		"--tls-ca-cert-file", filepath.Join(dir, "ca.pem"),
		"--tls-auth-clients", "no",
	))
	s := startServer(t, "-config", writeConfig(t, testConfig),
		"-store-timeout", "2s", // a cold TLS handshake is slow under -race
		"-redis-url", fmt.Sprintf("rediss://127.0.0.1:%d", tlsPort), "-redis-tls-ca", filepath.Join(dir, "ca.pem"),
		"-grpc-tls-cert", filepath.Join(dir, "cert.pem"), "-grpc-tls-key", filepath.Join(dir, "key.pem"))
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	ctx := context.Background()
	for i, want := range []rlsv3.RateLimitResponse_Code{1, 1, 1, 2} {
		resp, err := client.ShouldRateLimit(ctx, request("tls"))
		if err != nil || resp.OverallCode != want {
			t.Fatalf("request %d over TLS: %v, %v; want %v\n%s", i, resp.GetOverallCode(), err, want, s.logs)
		}
	}
	// The decisions were Redis's: its key is there, read over plaintext.
	keys, err := rdb.Client(t).Keys(ctx, "sluice:*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys in Redis after TLS decisions: %v, %v; want one", keys, err)
	}
	// A plaintext gRPC client is refused.
	if _, err := s.client.ShouldRateLimit(ctx, request("plain")); err == nil {
		t.Fatal("a plaintext client was served by a TLS listener")
	}
}
