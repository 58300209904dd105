package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestRun(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	mux.HandleFunc("/nocontent", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("/unready", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "not ready", http.StatusServiceUnavailable)
	})
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ok", http.StatusFound)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	closed := httptest.NewServer(mux)
	closedURL := closed.URL
	closed.Close()

	tests := []struct {
		name   string
		args   []string
		want   int
		stderr string
	}{
		{"200", []string{srv.URL + "/ok"}, 0, ""},
		{"204", []string{srv.URL + "/nocontent"}, 0, ""},
		{"503", []string{srv.URL + "/unready"}, 1, "503"},
		{"404", []string{srv.URL + "/missing"}, 1, "404"},
		{"redirect is not followed", []string{srv.URL + "/moved"}, 1, "302"},
		{"connection refused", []string{closedURL + "/ok"}, 1, "healthcheck:"},
		{"no argument", nil, 1, "usage"},
		{"two arguments", []string{srv.URL + "/ok", srv.URL + "/ok"}, 1, "usage"},
		{"bad URL", []string{"://nope"}, 1, "healthcheck:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr strings.Builder
			if got := run(tt.args, &stderr); got != tt.want {
				t.Errorf("run(%q) = %d; want %d (stderr %q)", tt.args, got, tt.want, stderr.String())
			}
			if !strings.Contains(stderr.String(), tt.stderr) {
				t.Errorf("run(%q) stderr = %q; want it to contain %q", tt.args, stderr.String(), tt.stderr)
			}
		})
	}
}

// TestCheckTimeout: a server that never answers fails the check once its context ends.
func TestCheckTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(func() {
		close(release)
		srv.Close()
	})

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := check(ctx, srv.URL)
	if err == nil || !strings.Contains(err.Error(), "deadline exceeded") {
		t.Errorf("check(hanging server) = %v; want a deadline error", err)
	}
}
