package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReport(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "r.jsonl")
	lines := []string{
		`{"label":"do-nothing handler","concurrency":1,"rps":5000,"decided_rps":5000,"latency_us":{"p50":150,"p99":400,"p99_9":600}}`,
		`{"label":"do-nothing handler","concurrency":64,"rps":30000,"decided_rps":30000,"latency_us":{"p50":1500,"p99":6000,"p99_9":8000}}`,
		`{"label":"server + Redis","concurrency":1,"rps":2500,"decided_rps":2500,"latency_us":{"p50":300,"p99":900,"p99_9":1200}}`,
		`{"label":"server + Redis","concurrency":64,"rps":24000,"decided_rps":24000,"ok":10,"latency_us":{"p50":2000,"p99":9000,"p99_9":12000},"redis":{"reads_per_req":0.2,"commands_per_req":4},"round_trips_per_req":0.1667,"cpu_us_per_req":[20.5,15.25]}`,
		`{"label":"with errors","concurrency":1,"rps":9000,"decided_rps":6000,"ok":60,"errors":30,"errors_by_code":{"Unavailable":30},"latency_us":{"p50":100,"p99":200,"p99_9":300}}`,
		`{"label":"with errors","concurrency":64,"rps":9000,"decided_rps":9000,"ok":90,"latency_us":{"p50":100,"p99":200,"p99_9":300}}`,
	}
	if err := os.WriteFile(in, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	md, svg := filepath.Join(dir, "r.md"), filepath.Join(dir, "r.svg")
	if err := run(in, md, svg, "do-nothing handler"); err != nil {
		t.Fatal(err)
	}
	table, _ := os.ReadFile(md)
	for _, want := range []string{
		"| server + Redis | 24000 | 80% | 2000 | 9000 | 1.50 | 12000 | 10 | 0 | 0 | 0.1667 | 0.2000 | 4.000 | 20.5 + 15.2 |",
		"| do-nothing handler | 5000 / 400 | 30000 / 6000 |",
		"| with errors | failed: 30 errors | 9000 / 200 |",
	} {
		if !strings.Contains(string(table), want) {
			t.Errorf("the table lacks %q:\n%s", want, table)
		}
	}
	plot, _ := os.ReadFile(svg)
	if n := strings.Count(string(plot), "<polyline"); n != 6 {
		t.Errorf("the plot has %d lines; want 3 configurations × 2 panels", n)
	}
	// The failed run is not a point: "with errors" is drawn at 64 callers only.
	for _, l := range strings.Split(string(plot), "\n") {
		if strings.Contains(l, "<polyline") && strings.Contains(l, "#e15759") && strings.Count(l, ",") != 1 {
			t.Errorf("the configuration with a failed run is drawn through %d points; want its one clean run: %s", strings.Count(l, ","), l)
		}
	}
	if err := run(filepath.Join(dir, "missing"), md, svg, "x"); err == nil {
		t.Error("a missing input: no error")
	}
}
