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
	"os"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/internal/tools/loadgen"
)

// row is one loadgen result, as loadgen -json wrote it.
type row = loadgen.Result

func main() {
	in := flag.String("in", "", "results: one loadgen -json object per line (required)")
	md := flag.String("md", "", "write the Markdown table here")
	svg := flag.String("svg", "", "write the SVG plot here")
	ceiling := flag.String("ceiling", "do-nothing handler", "label of the configuration the others are compared with")
	reference := flag.String("reference", "", "label of a second configuration to compare with (envoyproxy/ratelimit); a row is compared with the reference's row of its workload (the label's last comma-separated part) where there is one")
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

// addCounts adds src's counts into dst, made when it has some; nil stays
// nil when src is empty.
func addCounts[V uint64 | float64](dst, src map[string]V) map[string]V {
	for k, n := range src {
		if dst == nil {
			dst = map[string]V{}
		}
		dst[k] += n
	}
	return dst
}

// median is a row of each figure's median over rounds; counts are summed.
func median(rounds []row) row {
	m := rounds[0]
	m.Sent, m.OK, m.OverLimit, m.Errors, m.Unknown = 0, 0, 0, 0, 0
	m.ErrorsByCode, m.TierFaults = nil, nil
	for _, r := range rounds {
		m.Sent += r.Sent
		m.OK += r.OK
		m.OverLimit += r.OverLimit
		m.Errors += r.Errors
		m.Unknown += r.Unknown
		m.ErrorsByCode = addCounts(m.ErrorsByCode, r.ErrorsByCode)
		m.TierFaults = addCounts(m.TierFaults, r.TierFaults)
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
	if m.CentralMicrosPerReq != nil {
		v := of(func(r row) float64 {
			if r.CentralMicrosPerReq == nil {
				return 0
			}
			return *r.CentralMicrosPerReq
		})
		m.CentralMicrosPerReq = &v
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

// referenceFor is the reference row a row of label is compared with: the
// reference's row of the same workload, the label's last comma-separated
// part ("…, 10k keys zipf" with "envoyproxy/ratelimit + Redis, 10k keys
// zipf"), else the reference's own row.
func referenceFor(rows []row, reference, label string, c int) (row, bool) {
	usable := func(name string) (row, bool) {
		r, _, ok := find(rows, name, c)
		return r, ok && r.DecidedRPS > 0 && !r.Failed()
	}
	if reference == "" {
		return row{}, false
	}
	if i := strings.LastIndex(label, ", "); i >= 0 {
		workload := label[i+2:]
		if j := strings.Index(workload, " ("); j >= 0 { // a revision's tag
			workload = workload[:j]
		}
		prefix := reference
		if k := strings.LastIndex(reference, ", "); k >= 0 {
			prefix = reference[:k]
		}
		if r, ok := usable(prefix + ", " + workload); ok {
			return r, true
		}
	}
	return usable(reference)
}

// markdown writes the main table at the highest concurrency, compared with
// the ceiling (and the reference) there, then throughput and p99 at every
// concurrency.
func markdown(w io.Writer, rows []row, ceiling, reference string) error {
	cs := concurrencies(rows)
	top := cs[len(cs)-1]
	base, _, haveBase := find(rows, ceiling, top)
	haveBase = haveBase && base.DecidedRPS > 0 && !base.Failed()
	var b strings.Builder
	fmt.Fprintf(&b, "At %d concurrent callers, medians over the rounds:\n\n", top)
	b.WriteString("| configuration | decided req/s | each round | % of ceiling | × reference | p50 µs | p99 µs | p99 / ceiling's | p99 / reference's | p99.9 µs | OK | over limit | errors | Redis round trips/req (server hook) | read events/req (INFO) | commands/req (INFO, incl. inside scripts) | server-side CPU µs/req | central CPU µs/decided (server + Redis) |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
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
			fmt.Fprintf(&b, "| %s | **failed run** (%s) | %s | – | – | – | – | – | – | – | %d | %d | %d | – | – | – | – | – |\n",
				l, r.ErrorText(), strings.Join(each, " / "), r.OK, r.OverLimit, r.Errors+r.Unknown)
			continue
		}
		pct, p99x, times, p99r := "–", "–", "–", "–"
		if haveBase {
			pct = fmt.Sprintf("%.0f%%", 100*r.DecidedRPS/base.DecidedRPS)
			p99x = fmt.Sprintf("%.2f", r.Latency.P99/base.Latency.P99)
		}
		if ref, ok := referenceFor(rows, reference, l, top); ok {
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
		central := "–"
		if r.CentralMicrosPerReq != nil {
			central = fmt.Sprintf("%.1f", *r.CentralMicrosPerReq)
		}
		fmt.Fprintf(&b, "| %s | %.0f | %s | %s | %s | %.0f | %.0f | %s | %s | %.0f | %d | %d | %d | %s | %s | %s | %s | %s |\n",
			l, r.DecidedRPS, strings.Join(each, " / "), pct, times, r.Latency.P50, r.Latency.P99, p99x, p99r, r.Latency.P999,
			r.OK, r.OverLimit, r.Errors, trips, reads, cmds, strings.Join(cpu, " + "), central)
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
				fmt.Fprintf(&b, " failed: %s |", r.ErrorText())
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
