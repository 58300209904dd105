package simulate

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
)

// Plot geometry, in SVG user units (pixels at 100%).
const (
	plotWidth   = 900
	panelHeight = 220
	marginLeft  = 60
	marginRight = 20
	marginTop   = 48 // per panel: its title and legend
	marginBot   = 30 // per panel: the time axis labels
	xTicks      = 6
	epoch2000   = 946684800_000000 // µs: later starts are read as dates
)

// The offered line is grey; each run's admitted line takes the next
// colour, chosen to stay apart for colour-blind readers (Okabe–Ito).
const offeredColour = "#999999"

var admittedColour = [...]string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00"}

// WriteSVG plots offered and admitted requests over time, one panel per
// limit the trace matched, with the offered line once (every run saw the
// same requests) and an admitted line per run. The runs must be of one
// trace and one config with one bucket width. Each line is a <polyline>
// with class "offered" or "admitted" and, for admitted lines, a
// data-algorithm attribute naming the run.
func WriteSVG(w io.Writer, runs ...*Result) error {
	if len(runs) == 0 {
		return errors.New("svg: no runs to plot")
	}
	first := runs[0]
	for _, r := range runs[1:] {
		if r.trace != first.trace || r.StartMicros != first.StartMicros || r.BucketMicros != first.BucketMicros || len(r.Limits) != len(first.Limits) {
			return errors.New("svg: runs of different traces, configs or buckets cannot share a plot")
		}
	}
	var panels []int
	for i, l := range first.Limits {
		if l.Offered > 0 {
			panels = append(panels, i)
		}
	}
	if len(panels) == 0 {
		return errors.New("svg: no request matched a limit: nothing to plot")
	}

	height := len(panels) * (panelHeight + marginTop + marginBot)
	b := fmt.Appendf(nil, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		plotWidth, height, plotWidth, height)
	b = fmt.Appendf(b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	for k, li := range panels {
		b = appendPanel(b, runs, li, k*(panelHeight+marginTop+marginBot))
	}
	b = append(b, "</svg>\n"...)
	_, err := w.Write(b)
	return err
}

// appendPanel draws limit li's panel with its top at y0.
func appendPanel(b []byte, runs []*Result, li, y0 int) []byte {
	lim := runs[0].Limits[li]
	n := len(lim.Series)
	var peak int64 = 1
	for _, bk := range lim.Series {
		peak = max(peak, bk.Offered)
	}
	top := y0 + marginTop
	bottom := top + panelHeight
	plotW := plotWidth - marginLeft - marginRight
	x := func(i int) float64 { return marginLeft + (float64(i)+0.5)*float64(plotW)/float64(n) }
	y := func(v int64) float64 { return float64(bottom) - float64(v)*float64(panelHeight)/float64(peak) }

	b = fmt.Appendf(b, `<g class="panel" data-limit="%s">`+"\n", esc(lim.Path))
	b = fmt.Appendf(b, `<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", marginLeft, y0+16, esc(panelTitle(lim)))
	// Legend, under the title.
	b = appendLegend(b, marginLeft, y0+34, offeredColour, "offered")
	for i, r := range runs {
		b = appendLegend(b, marginLeft+180*(i+1), y0+34, admittedColour[i%len(admittedColour)], "admitted, "+r.Algorithm)
	}
	// Axes, with the peak and zero on y and evenly spaced times on x.
	b = fmt.Appendf(b, `<path d="M%d %d V%d H%d" fill="none" stroke="black"/>`+"\n", marginLeft, top, bottom, plotWidth-marginRight)
	b = fmt.Appendf(b, `<text x="%d" y="%d" text-anchor="end">%d</text>`+"\n", marginLeft-6, top+4, peak)
	b = fmt.Appendf(b, `<text x="%d" y="%d" text-anchor="end">0</text>`+"\n", marginLeft-6, bottom+4)
	b = fmt.Appendf(b, `<text x="14" y="%d" transform="rotate(-90 14 %d)" text-anchor="middle">requests per %s</text>`+"\n",
		(top+bottom)/2, (top+bottom)/2, esc(micro(runs[0].BucketMicros)))
	// Times are relative to the first bucket: a trace from a log starts
	// at an epoch time no reader wants to subtract.
	for t := 0; t <= xTicks; t++ {
		i := t * n / xTicks
		px := marginLeft + float64(i)*float64(plotW)/float64(n)
		b = fmt.Appendf(b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", px, bottom+18, esc(micro(int64(i)*runs[0].BucketMicros)))
	}
	if start := runs[0].StartMicros; start != 0 {
		since := micro(start) // a trace in seconds from its own zero
		if start >= epoch2000 {
			since = time.UnixMicro(start).UTC().Format(time.RFC3339Nano)
		}
		b = fmt.Appendf(b, `<text x="%d" y="%d" text-anchor="end">time since %s</text>`+"\n",
			plotWidth-marginRight, y0+16, esc(since))
	}

	b = appendLine(b, `class="offered"`, offeredColour, n, x, func(i int) float64 { return y(lim.Series[i].Offered) })
	for k, r := range runs {
		s := r.Limits[li].Series
		b = appendLine(b, fmt.Sprintf(`class="admitted" data-algorithm="%s"`, esc(r.Algorithm)),
			admittedColour[k%len(admittedColour)], n, x, func(i int) float64 { return y(s[i].Admitted) })
	}
	return append(b, "</g>\n"...)
}

func appendLine(b []byte, attrs, colour string, n int, x func(int) float64, y func(int) float64) []byte {
	b = fmt.Appendf(b, `<polyline %s fill="none" stroke="%s" stroke-width="1.5" points="`, attrs, colour)
	for i := 0; i < n; i++ {
		if i > 0 {
			b = append(b, ' ')
		}
		b = strconv.AppendFloat(b, x(i), 'f', 1, 64)
		b = append(b, ',')
		b = strconv.AppendFloat(b, y(i), 'f', 1, 64)
	}
	return append(b, "\"/>\n"...)
}

func appendLegend(b []byte, x, y int, colour, label string) []byte {
	b = fmt.Appendf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/>`, x, y-4, x+18, y-4, colour)
	return fmt.Appendf(b, `<text x="%d" y="%d">%s</text>`+"\n", x+22, y, esc(label))
}

func panelTitle(l LimitReport) string {
	switch {
	case l.Unlimited:
		return l.Path + ": unlimited"
	case l.RequestsPerUnit == 0:
		return l.Path + ": blocks every request"
	}
	s := fmt.Sprintf("%s: %d per %s", l.Path, l.RequestsPerUnit, micro(l.WindowMicros))
	if l.Shadow {
		s += " (shadow)"
	}
	return s
}

// micro formats microseconds as a duration: 1m0s, 10s, 1.5s.
func micro(us int64) string { return (time.Duration(us) * time.Microsecond).String() }

// esc escapes s for character data and for attribute values (it escapes
// both kinds of quote).
func esc(s string) string {
	var buf bytes.Buffer
	_ = xml.EscapeText(&buf, []byte(s)) // a bytes.Buffer never fails
	return buf.String()
}
