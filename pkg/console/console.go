// Package console is the admin page of sluice's daemons: on one read-only
// page, the config being served (every limit with the file and line that
// defines it), where it came from and how its last reload went, the state
// of the store or upstream and its breaker, requests per second by result
// over the last minutes, and the keys refused most per limit. It is
// rendered on the server (html/template, no build step, embedded in the
// binary); a few lines of JavaScript fetch the page's main part again
// every few seconds, so it refreshes by itself, and nothing on it changes
// any state.
package console

import (
	"bytes"
	"embed"
	"html/template"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/reload"
	"github.com/sluicehq/sluice/pkg/topkeys"
)

// Status is everything the page shows, read at one moment.
//
// A plain value, safe to share between goroutines once built.
type Status struct {
	// Daemon names the process: "sluice server", "sluice localfilter".
	Daemon string
	// Build is the binary's version (Build()).
	Build   string
	Started time.Time
	Now     time.Time
	Config  reload.Status
	// Limits is the served config; nil before the first.
	Limits *config.Config
	// Sections describe the store, the tiers, the upstream: each a titled
	// list of fields.
	Sections  []Section
	Decisions Series
	Top       []topkeys.Limit
	// TopMinutes is the span the top keys count over.
	TopMinutes int
}

// Section is a titled group of fields, such as the store's state.
//
// A plain value, safe to share between goroutines.
type Section struct {
	Title  string
	Fields []Field
}

// Field is one named value of a Section. Alert marks a value an operator
// should act on (a breaker open, an upstream unreachable).
//
// A plain value, safe to share between goroutines.
type Field struct {
	Name, Value string
	Alert       bool
}

// Refresh is how often the page fetches itself again.
const Refresh = 2 * time.Second

// MaxTopLimits bounds the top-keys lists: the limits that refused most
// are shown, and how many more refused (/debug/top has them all).
const MaxTopLimits = 20

// MaxRows bounds the config table: a config of more limits shows the first
// MaxRows and says how many more (/config has them all).
const MaxRows = 1000

//go:embed page.html console.js console.css
var assets embed.FS

// Build is the running binary's version: its module version and VCS
// revision as the Go toolchain recorded them, "devel" when it did not.
func Build() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	v := bi.Main.Version
	if v == "" || v == "(devel)" {
		v = "devel"
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += " " + s.Value[:12]
		}
		if s.Key == "vcs.modified" && s.Value == "true" {
			v += " (modified)"
		}
	}
	return v
}

// Handler serves the page: GET / (the whole page), /?part=main (its main
// part, as the page's script refreshes it), /console.js and /console.css.
// status is called once per page request.
func Handler(status func() Status, log *slog.Logger) http.Handler {
	tmpl := template.Must(template.New("page.html").Funcs(templateFuncs()).ParseFS(assets, "page.html"))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		name := "page"
		if r.URL.Query().Get("part") == "main" {
			name = "main"
		}
		var b bytes.Buffer
		if err := tmpl.ExecuteTemplate(&b, name, view(status())); err != nil {
			log.Error("admin page", "error", err.Error())
			http.Error(w, "admin page: "+err.Error(), http.StatusInternalServerError)
			return
		}
		secure(w)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(b.Bytes())
	})
	for _, f := range []struct{ name, typ string }{{"console.js", "text/javascript; charset=utf-8"}, {"console.css", "text/css; charset=utf-8"}} {
		body, _ := assets.ReadFile(f.name)
		mux.HandleFunc("GET /"+f.name, func(w http.ResponseWriter, _ *http.Request) {
			secure(w)
			w.Header().Set("Content-Type", f.typ)
			w.Write(body)
		})
	}
	return mux
}

// secure sets the headers of a read-only page: its own script and style
// only, never framed, never cached, never sniffed.
func secure(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}
