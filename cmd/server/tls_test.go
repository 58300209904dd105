package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/internal/testkit/testpki"
)

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
	ca := testpki.New(t)
	cert, key := ca.Issue(t, "server")
	tlsPort := freePort(t)
	rdb := redistest.Start(t, redistest.WithArgs(
		"--tls-port", fmt.Sprint(tlsPort),
		"--tls-cert-file", cert,
		"--tls-key-file", key,
		"--tls-ca-cert-file", ca.Path("ca.pem"),
		"--tls-auth-clients", "no",
	))
	s := startServer(t, "-config", writeConfig(t, testConfig),
		"-store-timeout", "2s", // a cold TLS handshake is slow under -race
		"-redis-url", fmt.Sprintf("rediss://127.0.0.1:%d", tlsPort), "-redis-tls-ca", ca.Path("ca.pem"),
		"-grpc-tls-cert", cert, "-grpc-tls-key", key)
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: ca.Pool})))
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
