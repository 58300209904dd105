package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestEchoHandler(t *testing.T) {
	srv := httptest.NewServer(echoHandler())
	t.Cleanup(srv.Close)

	tests := []struct {
		method, target string
		header         map[string]string
		want           echo
	}{
		{
			method: http.MethodGet,
			target: "/demo",
			header: map[string]string{"X-Forwarded-For": "203.0.113.7"},
			want:   echo{Method: "GET", Path: "/demo", Headers: map[string][]string{"X-Forwarded-For": {"203.0.113.7"}}},
		},
		{
			method: http.MethodPost,
			target: "/api/orders?dry_run=1",
			header: map[string]string{"X-Api-Key": "key-123"},
			want:   echo{Method: "POST", Path: "/api/orders", Query: "dry_run=1", Headers: map[string][]string{"X-Api-Key": {"key-123"}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.target, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, srv.URL+tt.target, strings.NewReader("ignored"))
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status = %d; want 200", resp.StatusCode)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q; want application/json", ct)
			}
			var got echo
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
				t.Fatalf("decode body: %v", err)
			}
			if got.Method != tt.want.Method || got.Path != tt.want.Path || got.Query != tt.want.Query {
				t.Errorf("echo = %s %s ?%s; want %s %s ?%s", got.Method, got.Path, got.Query, tt.want.Method, tt.want.Path, tt.want.Query)
			}
			if got.Host != strings.TrimPrefix(srv.URL, "http://") {
				t.Errorf("host = %q; want %q", got.Host, strings.TrimPrefix(srv.URL, "http://"))
			}
			for k, v := range tt.want.Headers {
				if g := got.Headers[k]; len(g) != 1 || g[0] != v[0] {
					t.Errorf("headers[%s] = %q; want %q", k, g, v)
				}
			}
		})
	}
}

func TestEchoHandlerHead(t *testing.T) {
	rec := httptest.NewRecorder()
	echoHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodHead, "/", nil))
	if rec.Code != http.StatusOK || rec.Body.Len() != 0 {
		t.Errorf("HEAD = %d with %d body bytes; want 200 with none", rec.Code, rec.Body.Len())
	}
}

// TestServeStops checks that serve answers on its address and returns nil once its context is
// cancelled, which is what SIGTERM from `docker compose stop` does.
func TestServeStops(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()

	ctx, cancel := context.WithCancel(context.Background())
	var serveErr error
	done := make(chan struct{}) // closed when serve has returned; serveErr is set then
	go func() {
		serveErr = serve(ctx, ln)
		close(done)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := client.Get("http://" + addr + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET /ready = %d; want 200", resp.StatusCode)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server on %s never answered: %v", addr, err)
		}
		select {
		case <-done:
			t.Fatalf("serve returned early: %v", serveErr)
		case <-time.After(10 * time.Millisecond):
		}
	}

	cancel()
	select {
	case <-done:
		if serveErr != nil {
			t.Errorf("serve after cancel = %v; want nil", serveErr)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("serve did not return within 5s of cancel")
	}
}
