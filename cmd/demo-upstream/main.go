// Command demo-upstream is the application behind Envoy in the docker-compose demo: it answers
// every request with 200 and a short JSON echo of the method, path and headers, so a curl
// through the proxy shows what Envoy forwarded (X-Forwarded-For, x-envoy-* headers) next to the
// rate-limit headers Envoy adds on the way back.
//
// It is a demo, not a sluice component: it depends on nothing in this module.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	addr := flag.String("addr", ":8000", "listen address")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Error("demo-upstream", "err", err)
		os.Exit(1)
	}
	log.Info("demo-upstream listening", "addr", ln.Addr().String())
	if err := serve(ctx, ln); err != nil {
		log.Error("demo-upstream", "err", err)
		os.Exit(1)
	}
}

// serve runs the echo server on ln until ctx is done, then drains it. It closes ln.
func serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           echoHandler(),
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()

	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// echo is the response body.
type echo struct {
	Method  string              `json:"method"`
	Path    string              `json:"path"`
	Query   string              `json:"query,omitempty"`
	Host    string              `json:"host"`
	Headers map[string][]string `json:"headers"`
}

// echoHandler answers every request with 200 and an echo of it. It does not read the request
// body. It is safe for concurrent use.
func echoHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := json.MarshalIndent(echo{
			Method:  r.Method,
			Path:    r.URL.Path,
			Query:   r.URL.RawQuery,
			Host:    r.Host,
			Headers: r.Header,
		}, "", "  ")
		if err != nil {
			// Strings and string slices always marshal.
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			w.Write(append(body, '\n'))
		}
	})
}
