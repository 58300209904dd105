package console

import (
	"cmp"
	"fmt"
	"html/template"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/topkeys"
)

// pageView is a Status as the template reads it.
type pageView struct {
	Status
	// LimitsTable is the config table, rendered once per config (see
	// tables).
	LimitsTable template.HTML
	MoreTop     int // limits that refused, past those in Top
	Chart       chart
	RefreshMS   int64
}

// tableView is the config table as its template reads it.
type tableView struct {
	Rows     []row
	MoreRows int
}

// row is one limit of the config table.
type row struct {
	Domain, Path, Name, Algorithm, Limit, Window, Burst, Flags, File, Source string
	Shadow                                                                   bool
}

// chart is the decisions chart: an SVG polyline per result, scaled to the
// busiest second.
type chart struct {
	Width, Height, Seconds int
	Max                    float64 // the y axis's top, requests per second
	Lines                  []line
}

// line is one result's series. Total is its requests over the span and
// Rate its mean per second over the last rateSeconds.
type line struct {
	Result, Points, Class string
	Total, Rate           float64
	Values                string // the per-second counts, comma-separated, for scripts and tests
}

const rateSeconds = 10

// tables renders the config table once per config: it changes only on a
// reload, and it is most of the page (up to MaxRows rows).
type tables struct {
	tmpl *template.Template
	mu   sync.Mutex
	cfg  *config.Config // the config table was rendered of
	html template.HTML
}

// of is cfg's table.
func (t *tables) of(cfg *config.Config) (template.HTML, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.html != "" && t.cfg == cfg {
		return t.html, nil
	}
	var v tableView
	if cfg != nil {
		limits := cfg.Limits()
		if len(limits) > MaxRows {
			v.MoreRows = len(limits) - MaxRows
			limits = limits[:MaxRows]
		}
		for _, l := range limits {
			v.Rows = append(v.Rows, limitRow(l))
		}
	}
	var b strings.Builder
	if err := t.tmpl.ExecuteTemplate(&b, "limits", v); err != nil {
		return "", err
	}
	// Rendered by html/template, in the context the page inserts it in.
	t.cfg, t.html = cfg, template.HTML(b.String())
	return t.html, nil
}

func view(st Status, limits template.HTML) pageView {
	v := pageView{Status: st, LimitsTable: limits, RefreshMS: Refresh.Milliseconds()}
	top := st.Top
	v.MoreTop = st.TopMore
	if len(top) > MaxTopLimits {
		top = slices.Clone(top)
		slices.SortStableFunc(top, func(a, b topkeys.Limit) int { return cmp.Compare(b.Refused, a.Refused) })
		top, v.MoreTop = top[:MaxTopLimits], v.MoreTop+len(top)-MaxTopLimits
	}
	v.Top = make([]topkeys.Limit, len(top))
	for i, l := range top {
		l.Keys = l.Keys[:min(len(l.Keys), MaxTopKeys)]
		v.Top[i] = l
	}
	v.Chart = decisionsChart(st.Decisions)
	return v
}

func limitRow(l *config.Limit) row {
	r := l.RateLimit
	w := row{
		Domain: l.Domain, Path: strings.TrimPrefix(l.Path, l.Domain+"."), Name: r.Name,
		Algorithm: "—", Burst: "—", Shadow: l.ShadowMode,
		File: filepath.Base(l.File), Source: l.File,
	}
	if l.Line > 0 {
		at := ":" + strconv.Itoa(l.Line)
		w.File, w.Source = w.File+at, w.Source+at
	}
	switch {
	case r.Unlimited:
		w.Limit, w.Window = "unlimited", "—"
	case r.Blocks():
		w.Limit, w.Window = "0 (refuses every request)", "—"
	default:
		w.Algorithm = r.Algorithm.String()
		w.Limit = strconv.FormatUint(uint64(r.RequestsPerUnit), 10)
		w.Window = window(r)
		if r.HasBurst() {
			w.Burst = strconv.FormatUint(uint64(r.Burst), 10)
		}
	}
	var flags []string
	if l.QuotaMode {
		flags = append(flags, "quota")
	}
	if r.CountRefused {
		flags = append(flags, "count_refused")
	}
	if r.Holder {
		flags = append(flags, "holder")
	}
	if r.Calendar != nil {
		flags = append(flags, "calendar "+r.Calendar.String())
	}
	if l.Shared != nil {
		flags = append(flags, "shared")
	}
	if l.DetailedMetric {
		flags = append(flags, "detailed_metric")
	}
	if len(l.Replaces) > 0 {
		flags = append(flags, "replaces "+strings.Join(l.Replaces, ", "))
	}
	w.Flags = strings.Join(flags, "; ")
	return w
}

// window says a limit's window as a config would: "minute", "2 seconds".
func window(r config.RateLimit) string {
	if r.UnitMultiplier > 1 {
		return fmt.Sprintf("%d %ss", r.UnitMultiplier, r.Unit)
	}
	return r.Unit.String()
}

func decisionsChart(s Series) chart {
	c := chart{Width: 600, Height: 160}
	if len(s.Counts) == 0 {
		return c
	}
	c.Seconds = len(s.Counts[0])
	for _, counts := range s.Counts {
		for _, n := range counts {
			c.Max = max(c.Max, n)
		}
	}
	c.Max = niceCeil(c.Max)
	for r, counts := range s.Counts {
		l := line{Result: s.Results[r], Class: "r-" + s.Results[r]}
		var pts, vals strings.Builder
		for i, n := range counts {
			l.Total += n
			if i >= len(counts)-rateSeconds {
				l.Rate += n / rateSeconds
			}
			x := float64(c.Width) * float64(i) / float64(max(c.Seconds-1, 1))
			y := float64(c.Height) * (1 - n/c.Max)
			if i > 0 {
				pts.WriteByte(' ')
				vals.WriteByte(',')
			}
			fmt.Fprintf(&pts, "%.1f,%.1f", x, y)
			vals.WriteString(strconv.FormatFloat(n, 'f', -1, 64))
		}
		l.Points, l.Values = pts.String(), vals.String()
		c.Lines = append(c.Lines, l)
	}
	return c
}

// niceCeil rounds up to 1, 2 or 5 times a power of ten (at least 1).
func niceCeil(x float64) float64 {
	if x <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if x <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// templateFuncs are the helpers page.html calls.
func templateFuncs() template.FuncMap {
	return template.FuncMap{
		"add": func(a, b int) int { return a + b },
		// ago says how long before now t was: "4s ago", "never".
		"ago": func(now, t time.Time) string {
			if t.IsZero() {
				return "never"
			}
			d := now.Sub(t)
			if d < time.Second {
				return "just now"
			}
			return d.Round(time.Second).String() + " ago"
		},
		// since says how long from t to now: "4m2s".
		"since": func(now, t time.Time) string { return now.Sub(t).Round(time.Second).String() },
		"stamp": func(t time.Time) string {
			if t.IsZero() {
				return ""
			}
			return t.UTC().Format(time.RFC3339)
		},
		"rate": func(x float64) string { return strconv.FormatFloat(x, 'f', 1, 64) },
		"count": func(x float64) string {
			return strconv.FormatFloat(math.Round(x), 'f', 0, 64)
		},
	}
}
