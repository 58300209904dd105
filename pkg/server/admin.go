package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/pkg/breaker"
	"github.com/sluicehq/sluice/pkg/console"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/rls"
	"github.com/sluicehq/sluice/pkg/topkeys"
)

// historySeconds is the span of the admin page's chart of requests by
// result; topMinutes the span of the top keys (the tracker's default);
// maxTopN the most keys per limit /debug/top lists, and defaultTopN the
// number it lists unless asked.
const (
	historySeconds = 300
	topMinutes     = topkeys.DefaultMinutes
	maxTopN        = topkeys.DefaultSize
	defaultTopN    = 20
)

// sample reads the request counters once a second into the history the
// admin page charts, until ctx ends.
func (s *Server) sample(ctx context.Context) {
	if s.parts.Metrics == nil {
		return
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	s.history.Sample(time.Now(), s.parts.Metrics.RequestTotals())
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			s.history.Sample(now, s.parts.Metrics.RequestTotals())
		}
	}
}

// Readiness is what /readyz says beyond the config: "" and true when all is
// well, else a note and whether the service is still ready.
//
// It is called from the admin server's goroutines: it must be safe for
// concurrent use.
type Readiness func() (note string, ready bool)

// AdminOptions are what a daemon adds to the admin routes. Zero values
// take the defaults given.
//
// A plain value; its functions are called from the admin server's
// goroutines and must be safe for concurrent use.
type AdminOptions struct {
	// Daemon names the process on the admin page. Default "sluice".
	Daemon string
	// Readiness, if set, replaces the store's in /readyz and /healthcheck.
	Readiness Readiness
	// Sections, if set, adds panels to the admin page: a tier's, an
	// upstream's.
	Sections func() []console.Section
	// Now is the clock the admin page's and /debug/top's renderings are
	// aged by (console.Renderings). Default time.Now.
	Now func() time.Time
}

// Admin is the admin routes both daemons serve: / (the admin page:
// pkg/console), /healthz, /readyz (the config version and last reload;
// the store's state, or o.Readiness's), /healthcheck (the reference's:
// "OK" when ready), /metrics from gather, /debug/top (the keys refused
// most, per limit), /config and /json.
func (s *Server) Admin(gather prometheus.Gatherer, o AdminOptions) *http.ServeMux {
	if o.Daemon == "" {
		o.Daemon = "sluice"
	}
	readiness := s.storeReadiness
	if o.Readiness != nil {
		readiness = o.Readiness
	}
	mux := http.NewServeMux()
	build := console.Build() // the binary's: read once
	// The page and /debug/top are rendered once per console.MaxAge and
	// shared by their viewers, one rendering at a time.
	renders := console.NewRenderings(o.Now)
	page := console.Handler(console.Options{
		Status: func() console.Status { return s.status(o, build) }, Logger: s.log, Renderings: renders,
	})
	mux.Handle("GET /{$}", page)
	mux.Handle("GET /console.js", page)
	mux.Handle("GET /console.css", page)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		serving := "config " + s.parts.Config.Current().Version() + " from " + s.parts.Config.Source()
		msg := "ready: " + serving
		note, ready := readiness()
		if s.parts.Config.Current() == nil {
			note, ready = "no config yet from "+s.parts.Config.Source(), false
		}
		if !ready {
			http.Error(w, "not ready: "+note+"; "+serving, http.StatusServiceUnavailable)
			return
		}
		if note != "" {
			msg += "; " + note
		}
		if err := s.parts.Config.LastError(); err != nil {
			msg += "; last reload rejected: " + err.Error()
		}
		fmt.Fprintln(w, msg)
	})
	// The reference's health check, where Envoy Gateway and others probe it:
	// 200 "OK" when ready, 500 otherwise.
	mux.HandleFunc("GET /healthcheck", func(w http.ResponseWriter, _ *http.Request) {
		if note, ready := readiness(); !ready {
			http.Error(w, "NOT OK: "+note, http.StatusInternalServerError)
			return
		}
		fmt.Fprint(w, "OK")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(gather, promhttp.HandlerOpts{}))
	// Who is being limited: per limit, the keys refused most over the last
	// five minutes (a sketch in a byte budget: pkg/topkeys; counts within
	// its stated error), and the refusals of limits it had no room for.
	mux.HandleFunc("GET /debug/top", func(w http.ResponseWriter, r *http.Request) {
		n := defaultTopN
		if v, err := strconv.Atoi(r.URL.Query().Get("n")); err == nil && v > 0 {
			n = min(v, maxTopN)
		}
		body, err := renders.Get(r.Context(), "top "+strconv.Itoa(n), func() ([]byte, error) {
			b, err := json.Marshal(map[string]any{"minutes": topMinutes, "limits": s.top.Top(n), "untracked": s.top.Untracked()})
			return append(b, '\n'), err
		})
		if err != nil {
			if r.Context().Err() == nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	})
	mux.HandleFunc("GET /config", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Sluice-Config-Source", s.parts.Config.Source())
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(s.parts.Config.Current()); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	mux.Handle("/json", rls.JSONHandler(s.Service))
	return mux
}

// status is what the admin page shows now.
func (s *Server) status(o AdminOptions, build string) console.Status {
	now := time.Now()
	st := console.Status{
		Daemon: o.Daemon, Build: build, Started: s.started, Now: now,
		Config: s.parts.Config.Status(), Limits: s.parts.Config.Current(),
		Decisions: s.history.Series(now), TopMinutes: topMinutes,
	}
	st.Top, st.TopMore = s.top.Busiest(console.MaxTopLimits, console.MaxTopKeys)
	if s.parts.storeName != "" {
		st.Sections = append(st.Sections, s.storeSection())
	}
	if s.parts.Cache != nil {
		st.Sections = append(st.Sections, console.Section{Title: "Flag cache", Fields: []console.Field{
			{Name: "keys flagged over limit", Value: strconv.Itoa(s.parts.Cache.Len())},
		}})
	}
	if q := s.Quota.Stats(); q.Reports > 0 {
		st.Sections = append(st.Sections, console.Section{Title: "Envoy's rate limit quota service (RLQS)", Fields: []console.Field{
			{Name: "streams open", Value: strconv.Itoa(q.Streams)},
			{Name: "buckets reported", Value: strconv.Itoa(q.Buckets)},
			{Name: "limit keys split", Value: strconv.Itoa(q.Keys)},
			{Name: "reports received", Value: strconv.FormatInt(q.Reports, 10)},
		}})
	}
	if o.Sections != nil {
		st.Sections = append(st.Sections, o.Sections()...)
	}
	return st
}

// storeSection is the store's state: which store, and on Redis its
// breaker and failure mode.
func (s *Server) storeSection() console.Section {
	fields := []console.Field{{Name: "store", Value: s.parts.storeName}}
	if s.parts.sd == nil {
		fields[0].Value += " (embedded; cannot be unavailable)"
		return console.Section{Title: "Store", Fields: fields}
	}
	br := console.Field{Name: "breaker"}
	switch state := s.parts.sd.State(); state {
	case breaker.Closed:
		br.Value = "closed: Redis answering"
	default:
		br.Value, br.Alert = state.String()+": deciding by the failure mode", true
	}
	fields = append(fields, br, console.Field{Name: "failure mode", Value: s.parts.sd.Mode().String()})
	return console.Section{Title: "Store", Fields: fields}
}

// storeReadiness: a dead store is ready enough when the failure mode
// decides without it; with mode error every request would fail.
func (s *Server) storeReadiness() (string, bool) {
	if s.parts.sd == nil || s.parts.sd.Healthy() {
		return "", true
	}
	if s.parts.sd.Mode() == limiter.FailError {
		return "rate limit store unavailable (failure mode error)", false
	}
	return "store unavailable, failure mode " + s.parts.sd.Mode().String(), true
}
