package main

import (
	"fmt"
	"io"
	"math"
	"strings"
)

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
