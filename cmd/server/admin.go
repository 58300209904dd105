package main

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/pkg/reload"
	"github.com/sluicehq/sluice/pkg/rls"
)

// readiness is what /readyz asks of the store.
type readiness interface {
	Healthy() bool
	Mode() rls.FailureMode
}

// adminMux serves the admin endpoints.
func adminMux(svc *rls.Service, cfg *reload.Watcher, store readiness, gather prometheus.Gatherer) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		version := cfg.Current().Version()
		// A dead store is ready enough when the failure mode decides
		// without it; with mode error every request would fail.
		if store != nil && !store.Healthy() && store.Mode() == rls.FailError {
			http.Error(w, "not ready: rate limit store unavailable (failure mode error); config "+version, http.StatusServiceUnavailable)
			return
		}
		msg := "ready: config " + version
		if store != nil && !store.Healthy() {
			msg += "; store unavailable, failure mode " + store.Mode().String()
		}
		if err := cfg.LastError(); err != nil {
			msg += "; last reload rejected: " + err.Error()
		}
		fmt.Fprintln(w, msg)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(gather, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /config", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(cfg.Current()); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	mux.Handle("/json", rls.JSONHandler(svc))
	return mux
}
