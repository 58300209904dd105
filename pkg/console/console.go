// Package console is the admin page of sluice's daemons: on one read-only
// page, the config being served (every limit with the file and line that
// defines it), where it came from and how its last reload went, the state
// of the store or upstream and its breaker, requests per second by result
// over the last minutes, and the keys refused most per limit. It is
// rendered on the server (html/template, no build step, embedded in the
// binary); a few lines of JavaScript fetch the page's main part again
// every few seconds, so it refreshes by itself, and nothing on it changes
// any state.
//
// Its cost does not grow with its viewers: each part is rendered at most
// once per MaxAge and shared by every viewer meanwhile, renderings run
// one at a time (Renderings), the config table is rendered once per
// config, and every list is capped (MaxRows, MaxTopLimits, MaxTopKeys).
// Keys are shown as the Status gives them: deciding how a client's value
// is shown (escaped, or by digest) is pkg/limiter's.
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
	// Top is the keys refused most, per limit: the page lists those of
	// the MaxTopLimits limits that refused most, MaxTopKeys keys each.
	Top []topkeys.Limit
	// TopMore is how many more limits refused than Top holds.
	TopMore int
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

// MaxTopKeys bounds each limit's top-keys list on the page.
const MaxTopKeys = 10

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

// Options configure Handler. Zero values take the defaults given.
//
// A plain value; Status is called from the admin server's goroutines
// and must be safe for concurrent use.
type Options struct {
	// Status is what the page shows now, read once per rendering.
	Status func() Status
	// Logger gets the page's rendering errors. Default: discard.
	Logger *slog.Logger
	// Renderings shares the page's renderings between its viewers, and
	// with the other views given it (/debug/top). Default: the page's
	// own, on the clock Now.
	Renderings *Renderings
	// Now is the clock of the page's own Renderings. Default time.Now.
	Now func() time.Time
}

// Handler serves the page: GET / (the whole page), /?part=main (its main
// part, as the page's script refreshes it), /console.js and /console.css.
// However many viewers load it, each part is rendered at most once per
// MaxAge (see Renderings).
func Handler(o Options) http.Handler {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Renderings == nil {
		o.Renderings = NewRenderings(o.Now)
	}
	tmpl := template.Must(template.New("page.html").Funcs(templateFuncs()).ParseFS(assets, "page.html"))
	tables := &tables{tmpl: tmpl}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		name := "page"
		if r.URL.Query().Get("part") == "main" {
			name = "main"
		}
		body, err := o.Renderings.Get(r.Context(), "console "+name, func() ([]byte, error) {
			st := o.Status()
			table, err := tables.of(st.Limits)
			if err != nil {
				return nil, err
			}
			var b bytes.Buffer
			err = tmpl.ExecuteTemplate(&b, name, view(st, table))
			return b.Bytes(), err
		})
		if err != nil {
			if r.Context().Err() == nil { // else the viewer has gone
				o.Logger.Error("admin page", "error", err.Error())
				http.Error(w, "admin page: "+err.Error(), http.StatusInternalServerError)
			}
			return
		}
		secure(w)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(body)
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
