package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/internal/testkit/testpki"
)

// startEnv runs the server in this process with the reference's
// environment env (and -config, loopback listeners), until the test ends.
// It returns the start-up error when run fails at start.
func startEnv(t *testing.T, env map[string]string) (rlsv3.RateLimitServiceClient, *logSink, error) {
	t.Helper()
	args := []string{"-config", writeConfig(t, testConfig), "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-store-timeout", "2s"}
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, args, func(k string) string { return env[k] }, pw)
		pw.Close()
	}()
	logs := &logSink{}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			logs.add(sc.Text())
			if g, _ := listeningIn(sc.Text()); g != "" {
				ready <- g
			}
		}
	}()
	var grpcAddr string
	select {
	case grpcAddr = <-ready:
	case err := <-done:
		cancel()
		return nil, logs, err
	case <-time.After(15 * time.Second):
		t.Fatalf("the server did not start:\n%s", logs)
	}
	t.Cleanup(func() { cancel(); <-done })
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn), logs, nil
}

// decide makes one decision and says whether the server decided it (on
// Redis: -failure-mode error answers UNAVAILABLE when it cannot).
func decide(t *testing.T, c rlsv3.RateLimitServiceClient, value string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_, err := c.ShouldRateLimit(ctx, request(value))
	return err
}

// TestReferenceRedisClientCert: with the reference's REDIS_TLS,
// REDIS_TLS_CACERT, REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY, the
// server presents the certificate to a Redis that requires one, and
// decides there; without it, Redis refuses it.
func TestReferenceRedisClientCert(t *testing.T) {
	ca := testpki.New(t)
	redisCert, redisKey := ca.Issue(t, "redis")
	clientCert, clientKey := ca.Issue(t, "ratelimit", "ratelimit.sluice")
	tlsPort := freePort(t)
	rdb := redistest.Start(t, redistest.WithArgs("--tls-port", fmt.Sprint(tlsPort), "--tls-cert-file", redisCert, "--tls-key-file", redisKey,
		"--tls-ca-cert-file", ca.Path("ca.pem"), "--tls-auth-clients", "yes"))
	env := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": fmt.Sprintf("127.0.0.1:%d", tlsPort), "REDIS_TLS": "true", "REDIS_TLS_CACERT": ca.Path("ca.pem")}

	t.Run("without", func(t *testing.T) {
		client, logs, err := startEnv(t, env)
		if err != nil {
			t.Fatal(err)
		}
		if err := decide(t, client, "no-cert"); err == nil {
			t.Fatalf("decided on a Redis that requires a client certificate, presenting none:\n%s", logs)
		}
	})
	env["REDIS_TLS_CLIENT_CERT"], env["REDIS_TLS_CLIENT_KEY"] = clientCert, clientKey
	client, logs, err := startEnv(t, env)
	if err != nil {
		t.Fatalf("REDIS_TLS_CLIENT_CERT: %v", err)
	}
	if err := decide(t, client, "cert"); err != nil {
		t.Fatalf("a decision presenting REDIS_TLS_CLIENT_CERT: %v\n%s", err, logs)
	}
	if keys, err := rdb.Client(t).Keys(context.Background(), "sluice:*").Result(); err != nil || len(keys) != 1 {
		t.Errorf("keys in Redis: %v, %v; want the decision's", keys, err)
	}
}

// TestReferenceSentinelAuth: REDIS_SENTINEL_AUTH is the password of the
// Sentinel processes themselves (REDIS_AUTH is the master's): with it the
// server finds the master through a Sentinel that requires one.
func TestReferenceSentinelAuth(t *testing.T) {
	sentinel := redistest.StartSentinel(t)
	const pw = "sentinel-pw"
	ctx := context.Background()
	sc := redis.NewClient(&redis.Options{Addr: sentinel.Addr})
	defer sc.Close()
	if err := sc.Do(ctx, "ACL", "SETUSER", "default", "on", ">"+pw).Err(); err != nil {
		t.Fatalf("requiring a password on the sentinel: %v", err)
	}
	env := map[string]string{"REDIS_TYPE": "SENTINEL", "REDIS_URL": sentinel.MasterName + "," + sentinel.Addr}
	t.Run("without", func(t *testing.T) {
		client, logs, err := startEnv(t, env)
		if err != nil {
			t.Fatal(err)
		}
		if err := decide(t, client, "no-auth"); err == nil {
			t.Fatalf("decided through a Sentinel that requires a password, giving none:\n%s", logs)
		}
	})
	env["REDIS_SENTINEL_AUTH"] = pw
	client, logs, err := startEnv(t, env)
	if err != nil {
		t.Fatalf("REDIS_SENTINEL_AUTH: %v", err)
	}
	if err := decide(t, client, "auth"); err != nil {
		t.Fatalf("a decision through the Sentinel with REDIS_SENTINEL_AUTH: %v\n%s", err, logs)
	}
	if strings.Contains(logs.String(), pw) {
		t.Errorf("the log shows the sentinel's password:\n%s", logs)
	}
}
