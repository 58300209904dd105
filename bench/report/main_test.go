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
		// Three rounds of the reference; the median is each figure's.
		`{"label":"reference","concurrency":64,"decided_rps":12000,"ok":5,"latency_us":{"p50":3000,"p99":20000,"p99_9":30000},"cpu_us_per_req":[40,10]}`,
		`{"label":"reference","concurrency":64,"decided_rps":8000,"ok":5,"latency_us":{"p50":4000,"p99":30000,"p99_9":40000},"cpu_us_per_req":[50,12]}`,
		`{"label":"reference","concurrency":64,"decided_rps":10000,"ok":5,"latency_us":{"p50":3500,"p99":18000,"p99_9":50000},"cpu_us_per_req":[45,11]}`,
		// Compared with the reference's row of the same workload.
		`{"label":"server, zipf","concurrency":64,"decided_rps":9000,"ok":5,"latency_us":{"p99":1000}}`,
		`{"label":"reference, zipf","concurrency":64,"decided_rps":3000,"ok":5,"latency_us":{"p99":4000}}`,
		// A failed round fails the point.
		`{"label":"flaky","concurrency":64,"decided_rps":30000,"ok":5,"latency_us":{"p99":100}}`,
		`{"label":"flaky","concurrency":64,"decided_rps":20000,"ok":5,"errors":2,"errors_by_code":{"Unavailable":2},"latency_us":{"p99":100}}`,
		// A hybrid tier: its central cost beside it; a round in which it
		// decided without the central state fails the point, though no
		// request failed.
		`{"label":"sidecar","concurrency":64,"decided_rps":20000,"ok":5,"latency_us":{"p99":100},"cpu_us_per_req":[20,10,5],"central_cpu_us_per_decided":15}`,
		`{"label":"sidecar, uniform","concurrency":64,"decided_rps":40000,"ok":5,"latency_us":{"p99":100},"tier_faults":{"fallback":1200,"upstream_outages":1}}`,
	}
	if err := os.WriteFile(in, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	md, svg := filepath.Join(dir, "r.md"), filepath.Join(dir, "r.svg")
	if err := run(in, md, svg, "do-nothing handler", "reference"); err != nil {
		t.Fatal(err)
	}
	table, _ := os.ReadFile(md)
	for _, want := range []string{
		"| server + Redis | 24000 | 24000 | 80% | 2.40 | 2000 | 9000 | 1.50 | 0.45 | 12000 | 10 | 0 | 0 | 0.1667 | 0.2000 | 4.000 | 20.5 + 15.2 |",
		"| reference | 10000 | 12000 / 8000 / 10000 | 33% | 1.00 | 3500 | 20000 | 3.33 | 1.00 | 40000 | 15 | 0 | 0 | – | – | – | 45.0 + 11.0 |",
		"| flaky | **failed run** (Unavailable=2) | 30000 / failed |",
		"| server, zipf | 9000 | 9000 | 30% | 3.00 | 0 | 1000 | 0.17 | 0.25 |",
		"| do-nothing handler | 5000 / 400 | 30000 / 6000 |",
		"| with errors | failed: Unavailable=30 | 9000 / 200 |",
		"| 20.0 + 10.0 + 5.0 | 15.0 |",
		"| sidecar, uniform | **failed run** (fallback=1200 upstream_outages=1) |",
	} {
		if !strings.Contains(string(table), want) {
			t.Errorf("the table lacks %q:\n%s", want, table)
		}
	}
	plot, _ := os.ReadFile(svg)
	if n := strings.Count(string(plot), "<polyline"); n != 14 {
		t.Errorf("the plot has %d lines; want 7 configurations (not the failed ones) × 2 panels", n)
	}
	// The failed run is not a point: "with errors" is drawn at 64 callers only.
	for _, l := range strings.Split(string(plot), "\n") {
		if strings.Contains(l, "<polyline") && strings.Contains(l, "#e15759") && strings.Count(l, ",") != 1 {
			t.Errorf("the configuration with a failed run is drawn through %d points; want its one clean run: %s", strings.Count(l, ","), l)
		}
	}
	if err := run(filepath.Join(dir, "missing"), md, svg, "x", ""); err == nil {
		t.Error("a missing input: no error")
	}
}
