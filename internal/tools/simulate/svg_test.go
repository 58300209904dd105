package simulate

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/config"
)

// polyline is what the test reads back of each line.
type polyline struct {
	class, algorithm string
	points           int
}

// readSVG checks that data is well-formed XML with an <svg> root and
// returns its polylines.
func readSVG(t *testing.T, data []byte) []polyline {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(data))
	var lines []polyline
	root := ""
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		if root == "" {
			root = se.Name.Local
		}
		if se.Name.Local != "polyline" {
			continue
		}
		var l polyline
		for _, a := range se.Attr {
			switch a.Name.Local {
			case "class":
				l.class = a.Value
			case "data-algorithm":
				l.algorithm = a.Value
			case "points":
				l.points = len(strings.Fields(a.Value))
			}
		}
		lines = append(lines, l)
	}
	if root != "svg" {
		t.Fatalf("root element %q; want svg", root)
	}
	return lines
}

func TestWriteSVG(t *testing.T) {
	cfg := parseConfig(t, threePer10s+`  - key: "<odd & \"quoted\">"
    rate_limit: {unit: second, requests_per_unit: 1}
`)
	trace, err := Generate(Pattern{Kind: Boundary, Duration: time.Minute, Limit: 3, Window: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	odd := []config.Entry{{Key: `<odd & "quoted">`, Value: "x"}}
	trace = append(trace, Request{Time: 5e6, Entries: odd}, Request{Time: 5e6, Entries: odd})
	a, b, _, err := RunBoth(cfg, trace, Options{Domain: "test", Bucket: 2 * time.Second}, Override(algorithm.SlidingWindow), Override(algorithm.FixedWindow))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "out.svg")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteSVG(f, a, b); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil || len(data) == 0 {
		t.Fatalf("read %s: %d bytes, %v", path, len(data), err)
	}
	lines := readSVG(t, data)
	// Two limits saw requests (vip and banned did not): each panel has
	// the offered line and one admitted line per run, a point per bucket:
	// 24 buckets of 2 s, from 4 s (the first request is at 5 s) to the
	// last attack's end at 50.7 s.
	want := []polyline{
		{"offered", "", 24}, {"admitted", "sliding_window", 24}, {"admitted", "fixed_window", 24},
		{"offered", "", 24}, {"admitted", "sliding_window", 24}, {"admitted", "fixed_window", 24},
	}
	if len(lines) != len(want) {
		t.Fatalf("polylines %+v; want %+v", lines, want)
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("polyline %d = %+v; want %+v", i, lines[i], want[i])
		}
	}
}

func TestWriteSVGRefuses(t *testing.T) {
	cfg := parseConfig(t, threePer10s)
	a, _ := Run(cfg, at(1, 2), Options{Domain: "test"})
	b, _ := Run(cfg, at(1, 2), Options{Domain: "test", Bucket: time.Minute})
	none, _ := Run(cfg, nil, Options{Domain: "test"})
	for _, tt := range []struct {
		name string
		runs []*Result
		want string
	}{
		{"no runs", nil, "no runs"},
		{"different buckets", []*Result{a, b}, "cannot share a plot"},
		{"nothing matched", []*Result{none}, "nothing to plot"},
	} {
		var buf bytes.Buffer
		if err := WriteSVG(&buf, tt.runs...); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: WriteSVG = %v; want an error containing %q", tt.name, err, tt.want)
		}
	}
}
