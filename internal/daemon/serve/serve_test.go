package serve

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

type noop struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func (noop) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}, nil
}

// start runs Run with o's admin limits (and o.GRPC, when set; a plaintext
// noop server otherwise) on loopback and returns the bound addresses.
func start(t *testing.T, o Options) (grpcAddr, httpAddr string) {
	t.Helper()
	ready := make(chan [2]string, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	mux.HandleFunc("POST /json", func(w http.ResponseWriter, r *http.Request) { io.ReadAll(r.Body) })
	if o.GRPC.Server == nil {
		o.GRPC = NewGRPC(noop{})
	}
	o.Log, o.Admin = slog.New(slog.DiscardHandler), mux
	o.GRPCAddr, o.HTTPAddr, o.Grace = "127.0.0.1:0", "127.0.0.1:0", time.Second
	o.Listening = func(g, h net.Addr) { ready <- [2]string{g.String(), h.String()} }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case a := <-ready:
		return a[0], a[1]
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	return "", ""
}

// closedWithin reports whether the server closes c within d.
func closedWithin(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	return err == nil // EOF: the server closed it; a timeout is an error
}

// TestAdminSlowClientsAreCut: a request whose body never comes, and a
// kept-alive connection that sends nothing more, are closed by the server
// (the finding: both stayed open for ever, and 1,100 of them exhausted the
// process's file descriptors).
func TestAdminSlowClientsAreCut(t *testing.T) {
	_, httpAddr := start(t, Options{AdminReadTimeout: 200 * time.Millisecond, AdminIdleTimeout: 200 * time.Millisecond})
	slow, err := net.Dial("tcp", httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	io.WriteString(slow, "POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
	if !closedWithin(slow, 10*time.Second) {
		t.Error("a request with a missing body was held open")
	}

	idle, err := net.Dial("tcp", httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	io.WriteString(idle, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(idle), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %v, %v", resp, err)
	}
	resp.Body.Close()
	if !closedWithin(idle, 10*time.Second) {
		t.Error("an idle kept-alive connection was held open")
	}
}

// TestAdminConnectionsBounded: past AdminMaxConns, further connections
// wait until one closes, and the gRPC listener answers throughout.
func TestAdminConnectionsBounded(t *testing.T) {
	grpcAddr, httpAddr := start(t, Options{AdminMaxConns: 4, AdminReadTimeout: time.Minute, AdminIdleTimeout: time.Minute})
	var held []net.Conn
	for range 4 {
		c, err := net.Dial("tcp", httpAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	waiting := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + httpAddr + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		waiting <- err
	}()
	select {
	case err := <-waiting:
		t.Fatalf("a fifth connection was served while four were held (%v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d"}); err != nil {
		t.Fatalf("gRPC while the admin listener is full: %v", err)
	}
	held[0].Close()
	select {
	case err := <-waiting:
		if err != nil {
			t.Fatalf("the waiting request, once a connection closed: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting request was not served once a connection closed")
	}
}
