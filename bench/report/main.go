// Command report turns the results of a benchmark run (one loadgen -json
// object per line, each with a -label; several lines of one label and
// concurrency are rounds) into a Markdown table and an SVG plot of
// throughput and p99 latency against concurrency, one line per
// configuration, medians over the rounds. bench/run.sh calls it; see
// BENCHMARKS.md.
//
//	report -in results.jsonl -md results.md -svg results.svg -ceiling "do-nothing handler" [-reference LABEL]
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/internal/loadgen"
)

// row is one loadgen result, as loadgen -json wrote it.
type row = loadgen.Result

func main() {
	in := flag.String("in", "", "results: one loadgen -json object per line (required)")
	md := flag.String("md", "", "write the Markdown table here")
	svg := flag.String("svg", "", "write the SVG plot here")
	ceiling := flag.String("ceiling", "do-nothing handler", "label of the configuration the others are compared with")
	reference := flag.String("reference", "", "label of a second configuration to compare with (envoyproxy/ratelimit)")
	flag.Parse()
	if err := run(*in, *md, *svg, *ceiling, *reference); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

func run(in, md, svg, ceiling, reference string) error {
	if in == "" {
		return errors.New("-in is required")
	}
	rows, err := read(in)
	if err != nil {
		return err
	}
	if md != "" {
		if err := writeFile(md, func(w io.Writer) error { return markdown(w, rows, ceiling, reference) }); err != nil {
			return err
		}
	}
	if svg != "" {
		if err := writeFile(svg, func(w io.Writer) error { return plot(w, rows) }); err != nil {
			return err
		}
	}
	return nil
}

func read(path string) ([]row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rows []row
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var r row
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		if r.Label == "" {
			return nil, fmt.Errorf("%s:%d: a result without a label", path, n)
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s: no results", path)
	}
	return rows, nil
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// labels returns the configurations in the order they first appear.
func labels(rows []row) []string {
	var out []string
	for _, r := range rows {
		if !slices.Contains(out, r.Label) {
			out = append(out, r.Label)
		}
	}
	return out
}

func concurrencies(rows []row) []int {
	var out []int
	for _, r := range rows {
		if !slices.Contains(out, r.Concurrency) {
			out = append(out, r.Concurrency)
		}
	}
	slices.Sort(out)
	return out
}

// find returns the median of the rounds of label at c concurrent callers,
// and those rounds in order. A point with a failed round is a failed
// point: its figures are the sums of its failures.
func find(rows []row, label string, c int) (row, []row, bool) {
	var rounds []row
	for _, r := range rows {
		if r.Label == label && r.Concurrency == c {
			rounds = append(rounds, r)
		}
	}
	if len(rounds) == 0 {
		return row{}, nil, false
	}
	return median(rounds), rounds, true
}

// median is a row of each figure's median over rounds; counts are summed.
func median(rounds []row) row {
	m := rounds[0]
	m.Sent, m.OK, m.OverLimit, m.Errors, m.Unknown = 0, 0, 0, 0, 0
	m.ErrorsByCode = nil
	for _, r := range rounds {
		m.Sent += r.Sent
		m.OK += r.OK
		m.OverLimit += r.OverLimit
		m.Errors += r.Errors
		m.Unknown += r.Unknown
		for code, n := range r.ErrorsByCode {
			if m.ErrorsByCode == nil {
				m.ErrorsByCode = map[string]uint64{}
			}
			m.ErrorsByCode[code] += n
		}
	}
	of := func(f func(row) float64) float64 {
		v := make([]float64, len(rounds))
		for i, r := range rounds {
			v[i] = f(r)
		}
		slices.Sort(v)
		n := len(v)
		if n%2 == 1 {
			return v[n/2]
		}
		return (v[n/2-1] + v[n/2]) / 2
	}
	m.DecidedRPS = of(func(r row) float64 { return r.DecidedRPS })
	m.RPS = of(func(r row) float64 { return r.RPS })
	m.Latency.P50 = of(func(r row) float64 { return r.Latency.P50 })
	m.Latency.P99 = of(func(r row) float64 { return r.Latency.P99 })
	m.Latency.P999 = of(func(r row) float64 { return r.Latency.P999 })
	if m.RoundTripsPerReq != nil {
		v := of(func(r row) float64 {
			if r.RoundTripsPerReq == nil {
				return 0
			}
			return *r.RoundTripsPerReq
		})
		m.RoundTripsPerReq = &v
	}
	if m.Redis != nil {
		redis := *m.Redis
		redis.ReadsPerReq = of(func(r row) float64 { return r.Redis.ReadsPerReq })
		redis.CommandsPerReq = of(func(r row) float64 { return r.Redis.CommandsPerReq })
		m.Redis = &redis
	}
	m.CPUMicrosPerReq = make([]float64, len(rounds[0].CPUMicrosPerReq))
	for i := range m.CPUMicrosPerReq {
		m.CPUMicrosPerReq[i] = of(func(r row) float64 {
			if i < len(r.CPUMicrosPerReq) {
				return r.CPUMicrosPerReq[i]
			}
			return 0
		})
	}
	return m
}

// markdown writes the main table at the highest concurrency, compared with
// the ceiling (and the reference) there, then throughput and p99 at every
// concurrency.
func markdown(w io.Writer, rows []row, ceiling, reference string) error {
	cs := concurrencies(rows)
	top := cs[len(cs)-1]
	base, _, haveBase := find(rows, ceiling, top)
	ref, _, haveRef := find(rows, reference, top)
	haveBase = haveBase && base.DecidedRPS > 0 && !base.Failed()
	haveRef = haveRef && ref.DecidedRPS > 0 && !ref.Failed()
	var b strings.Builder
	fmt.Fprintf(&b, "At %d concurrent callers, medians over the rounds:\n\n", top)
	b.WriteString("| configuration | decided req/s | each round | % of ceiling | × reference | p50 µs | p99 µs | p99 / ceiling's | p99 / reference's | p99.9 µs | OK | over limit | errors | Redis round trips/req (server hook) | read events/req (INFO) | commands/req (INFO, incl. inside scripts) | server-side CPU µs/req |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, l := range labels(rows) {
		r, rounds, ok := find(rows, l, top)
		if !ok {
			continue
		}
		each := make([]string, len(rounds))
		for i, x := range rounds {
			each[i] = fmt.Sprintf("%.0f", x.DecidedRPS)
			if x.Failed() {
				each[i] = "failed"
			}
		}
		if r.Failed() {
			// A run with failed requests is a failed run, never a figure.
			fmt.Fprintf(&b, "| %s | **failed run** (%s) | %s | – | – | – | – | – | – | – | %d | %d | %d | – | – | – | – |\n",
				l, r.ErrorText(), strings.Join(each, " / "), r.OK, r.OverLimit, r.Errors+r.Unknown)
			continue
		}
		pct, p99x, times, p99r := "–", "–", "–", "–"
		if haveBase {
			pct = fmt.Sprintf("%.0f%%", 100*r.DecidedRPS/base.DecidedRPS)
			p99x = fmt.Sprintf("%.2f", r.Latency.P99/base.Latency.P99)
		}
		if haveRef {
			times = fmt.Sprintf("%.2f", r.DecidedRPS/ref.DecidedRPS)
			p99r = fmt.Sprintf("%.2f", r.Latency.P99/ref.Latency.P99)
		}
		trips, reads, cmds := "–", "–", "–"
		if r.RoundTripsPerReq != nil {
			trips = fmt.Sprintf("%.4f", *r.RoundTripsPerReq)
		}
		if r.Redis != nil {
			reads, cmds = fmt.Sprintf("%.4f", r.Redis.ReadsPerReq), fmt.Sprintf("%.3f", r.Redis.CommandsPerReq)
		}
		cpu := make([]string, len(r.CPUMicrosPerReq))
		for i, us := range r.CPUMicrosPerReq {
			cpu[i] = fmt.Sprintf("%.1f", us)
		}
		fmt.Fprintf(&b, "| %s | %.0f | %s | %s | %s | %.0f | %.0f | %s | %s | %.0f | %d | %d | %d | %s | %s | %s | %s |\n",
			l, r.DecidedRPS, strings.Join(each, " / "), pct, times, r.Latency.P50, r.Latency.P99, p99x, p99r, r.Latency.P999,
			r.OK, r.OverLimit, r.Errors, trips, reads, cmds, strings.Join(cpu, " + "))
	}
	b.WriteString("\nDecided requests/s and p99 (µs) by concurrent callers, medians (a point with failed requests shows its failures, not a throughput):\n\n| configuration |")
	for _, c := range cs {
		fmt.Fprintf(&b, " %d |", c)
	}
	b.WriteString("\n| --- |")
	for range cs {
		b.WriteString(" --- |")
	}
	b.WriteString("\n")
	for _, l := range labels(rows) {
		fmt.Fprintf(&b, "| %s |", l)
		for _, c := range cs {
			if r, _, ok := find(rows, l, c); ok && r.Failed() {
				fmt.Fprintf(&b, " failed: %d errors |", r.Errors+r.Unknown)
			} else if ok {
				fmt.Fprintf(&b, " %.0f / %.0f |", r.DecidedRPS, r.Latency.P99)
			} else {
				b.WriteString(" – |")
			}
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// palette holds distinguishable line colours (Tableau 10).
var palette = []string{"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"}

// plot writes two panels, throughput and p99 against concurrency (log
// scale), one line per configuration, and a legend.
func plot(w io.Writer, rows []row) error {
	const (
		width, panelW, panelH = 1040, 420, 300
		left, top, gap        = 70, 40, 90
	)
	// Each point is the median of its rounds. Failed points measure
	// failures, not throughput: they are not plotted (the table names them).
	var medians []row
	for _, l := range labels(rows) {
		for _, c := range concurrencies(rows) {
			if m, _, ok := find(rows, l, c); ok && !m.Failed() {
				medians = append(medians, m)
			}
		}
	}
	rows = medians
	ls := labels(rows)
	legendH := 20 * len(ls)
	height := top + panelH + 60 + legendH
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	cs := concurrencies(rows)
	panels := []struct {
		title string
		value func(row) float64
	}{
		{"Decided requests/s", func(r row) float64 { return r.DecidedRPS }},
		{"p99 latency (ms)", func(r row) float64 { return r.Latency.P99 / 1000 }},
	}
	for p, panel := range panels {
		x0 := float64(left + p*(panelW+gap))
		maxY := 0.0
		for _, r := range rows {
			maxY = math.Max(maxY, panel.value(r))
		}
		step := niceStep(maxY / 5)
		maxY = step * math.Ceil(maxY/step)
		if maxY == 0 {
			maxY, step = 1, 0.2
		}
		xOf := func(c int) float64 {
			if len(cs) == 1 {
				return x0 + panelW/2
			}
			lo, hi := math.Log2(float64(cs[0])), math.Log2(float64(cs[len(cs)-1]))
			return x0 + (math.Log2(float64(c))-lo)/(hi-lo)*panelW
		}
		yOf := func(v float64) float64 { return float64(top+panelH) - v/maxY*panelH }
		fmt.Fprintf(&b, `<text x="%.0f" y="%d" font-size="14" font-weight="bold">%s</text>`+"\n", x0, top-15, panel.title)
		for v := 0.0; v <= maxY+step/2; v += step {
			y := yOf(v)
			fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#ddd"/>`+"\n", x0, y, x0+panelW, y)
			fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-6, y+4, fmtTick(v))
		}
		for _, c := range cs {
			x := xOf(c)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#999"/>`+"\n", x, top+panelH, x, top+panelH+5)
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%d</text>`+"\n", x, top+panelH+18, c)
		}
		fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle">concurrent callers</text>`+"\n", x0+panelW/2, top+panelH+36)
		fmt.Fprintf(&b, `<rect x="%.0f" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", x0, top, panelW, panelH)
		for i, l := range ls {
			color := palette[i%len(palette)]
			var pts [][2]float64
			var line []string
			for _, c := range cs {
				if r, _, ok := find(rows, l, c); ok {
					pt := [2]float64{xOf(c), yOf(panel.value(r))}
					pts = append(pts, pt)
					line = append(line, fmt.Sprintf("%.1f,%.1f", pt[0], pt[1]))
				}
			}
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(line, " "), color)
			for _, pt := range pts {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", pt[0], pt[1], color)
			}
		}
	}
	for i, l := range ls {
		y := top + panelH + 60 + 20*i
		color := palette[i%len(palette)]
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/>`+"\n", left, y-4, left+24, y-4, color)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", left+32, y, xmlEscape(l))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// niceStep rounds a raw tick step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

func fmtTick(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%.0fk", v/1000)
	case v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.1f", v)
	}
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
