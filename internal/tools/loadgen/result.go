package loadgen

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"runtime"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/codes"
)

// Result is what one run measured. Its JSON form (WriteJSON) is one object
// per run, for benchmark scripts to collect as rows.
type Result struct {
	Label       string  `json:"label,omitempty"`
	Target      string  `json:"target"`
	Mode        string  `json:"mode"` // "closed" or "open"
	Rate        float64 `json:"rate,omitempty"`
	Conns       int     `json:"conns"`
	Concurrency int     `json:"concurrency"`
	Keys        int     `json:"keys"`
	Dist        string  `json:"dist"`
	Descriptors string  `json:"descriptors"`
	GOMAXPROCS  int     `json:"gomaxprocs"` // the load generator's
	GOGC        string  `json:"gogc"`       // the load generator's
	Interrupted bool    `json:"interrupted,omitempty"`

	ElapsedSeconds float64 `json:"elapsed_s"`
	// Sent counts completed requests: OK + OverLimit + Unknown + Errors.
	Sent      uint64 `json:"sent"`
	OK        uint64 `json:"ok"`
	OverLimit uint64 `json:"over_limit"`
	// Unknown counts replies whose overall_code is neither OK nor OVER_LIMIT.
	Unknown      uint64            `json:"unknown"`
	Errors       uint64            `json:"errors"`
	ErrorsByCode map[string]uint64 `json:"errors_by_code,omitempty"`
	// Unsent (open loop) counts scheduled sends not made before the deadline
	// because every caller was busy: the server fell behind the rate.
	Unsent uint64 `json:"unsent,omitempty"`
	// RPS is Sent per elapsed second.
	RPS float64 `json:"rps"`
	// DecidedRPS is the answered requests (OK and OverLimit) per elapsed
	// second: the throughput. Failed requests never count in it; a run with
	// any (Failed) is not a measurement of throughput at all.
	DecidedRPS float64 `json:"decided_rps"`

	// Latency is from the actual send in closed loop, from the intended send
	// time in open loop (coordinated omission corrected).
	Latency LatencySummary `json:"latency_us"`
	// Service (open loop only) is from the actual send: compare with Latency
	// to see the queueing a stall caused.
	Service *LatencySummary `json:"service_us,omitempty"`

	// ClientAllocsPerReq is the load generator's heap allocations per
	// request during the measured phase (gRPC's included).
	ClientAllocsPerReq float64 `json:"client_allocs_per_req"`

	Redis *RedisFigures `json:"redis,omitempty"`
	// RoundTripsPerReq is the server's RoundTripsMetric over the measured
	// phase per request (Options.MetricsURL).
	RoundTripsPerReq *float64 `json:"round_trips_per_req,omitempty"`
	// CPUMicrosPerReq is, per Options.CPUPids entry, that process's CPU
	// time over the measured phase per request, in µs.
	CPUMicrosPerReq []float64 `json:"cpu_us_per_req,omitempty"`
	// CentralMicrosPerReq is the CPU time of Options.CentralPids over the
	// measured phase per decided request, in µs: what a hybrid tier costs
	// the central service.
	CentralMicrosPerReq *float64 `json:"central_cpu_us_per_decided,omitempty"`
	// TierFaults counts, by kind, the decisions the hybrid tier took
	// without the central state during the measured phase
	// (Options.TierMetricsURL): fallback, shed, failure_mode, dropped_hits,
	// upstream_outages, records_refused. Any makes the run a failed one.
	TierFaults map[string]float64 `json:"tier_faults,omitempty"`

	// The merged histograms, for callers that want more than the summary.
	Latencies        *Histogram `json:"-"`
	ServiceLatencies *Histogram `json:"-"`
}

// LatencySummary holds quantiles in microseconds.
type LatencySummary struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99_9"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

func summarize(h *Histogram) LatencySummary {
	us := func(d time.Duration) float64 { return math.Round(float64(d)/1e1) / 1e2 }
	return LatencySummary{
		P50: us(h.Quantile(0.50)), P90: us(h.Quantile(0.90)), P99: us(h.Quantile(0.99)),
		P999: us(h.Quantile(0.999)), Max: us(h.Max()), Mean: us(h.Mean()),
	}
}

func newResult(opts Options, target string, callers []*caller, elapsed time.Duration, scheduled int64) *Result {
	r := &Result{
		Target: target, Mode: "closed", Conns: opts.Conns, Concurrency: opts.Concurrency,
		Keys: opts.Keys, Dist: string(opts.Dist), Descriptors: opts.Descriptors,
		GOMAXPROCS: runtime.GOMAXPROCS(0), GOGC: gogcSetting(),
		ElapsedSeconds: elapsed.Seconds(), Latencies: new(Histogram),
	}
	if opts.Rate > 0 {
		r.Mode, r.Rate = "open", opts.Rate
		r.ServiceLatencies = new(Histogram)
	}
	var errs [numCodes]uint64
	for _, c := range callers {
		s := &c.stats
		r.OK += s.ok
		r.OverLimit += s.over
		r.Unknown += s.unknown
		for i, n := range s.errs {
			errs[i] += n
			r.Errors += n
		}
		r.Latencies.Merge(&s.latency)
		if s.service != nil {
			r.ServiceLatencies.Merge(s.service)
		}
	}
	for i, n := range errs {
		if n > 0 {
			if r.ErrorsByCode == nil {
				r.ErrorsByCode = map[string]uint64{}
			}
			r.ErrorsByCode[codes.Code(i).String()] = n
		}
	}
	r.Sent = r.OK + r.OverLimit + r.Unknown + r.Errors
	if scheduled > int64(r.Sent) {
		r.Unsent = uint64(scheduled) - r.Sent
	}
	if elapsed > 0 {
		r.RPS = float64(r.Sent) / elapsed.Seconds()
		r.DecidedRPS = float64(r.OK+r.OverLimit) / elapsed.Seconds()
	}
	r.Latency = summarize(r.Latencies)
	if r.ServiceLatencies != nil {
		s := summarize(r.ServiceLatencies)
		r.Service = &s
	}
	return r
}

// WriteJSON writes r as one JSON object on one line.
func (r *Result) WriteJSON(w io.Writer) error {
	return json.NewEncoder(w).Encode(r)
}

// Failed reports whether any request was not decided (a gRPC error or an
// unknown overall code): such a run measures failures, not throughput.
func (r *Result) Failed() bool { return r.Errors > 0 || r.Unknown > 0 || len(r.TierFaults) > 0 }

// errorText lists the errors by gRPC code: "Unavailable=12 DeadlineExceeded=3".
func (r *Result) errorText() string {
	var parts []string
	for _, name := range sortedKeys(r.ErrorsByCode) {
		parts = append(parts, fmt.Sprintf("%s=%d", name, r.ErrorsByCode[name]))
	}
	if r.Unknown > 0 {
		parts = append(parts, fmt.Sprintf("unknown-code=%d", r.Unknown))
	}
	parts = append(parts, faultText(r.TierFaults)...)
	return strings.Join(parts, " ")
}

// ErrorText lists the errors by gRPC code, for reports.
func (r *Result) ErrorText() string { return r.errorText() }

// WriteText writes r as a compact table.
func (r *Result) WriteText(w io.Writer) error {
	var b strings.Builder
	mode := "closed loop"
	if r.Mode == "open" {
		mode = fmt.Sprintf("open loop at %g/s", r.Rate)
	}
	fmt.Fprintf(&b, "target %s  %s  conns %d  callers %d  keys %d %s  GOMAXPROCS %d  GOGC %s\n",
		r.Target, mode, r.Conns, r.Concurrency, r.Keys, r.Dist, r.GOMAXPROCS, r.GOGC)
	if r.Interrupted {
		b.WriteString("INTERRUPTED: figures cover part of the run\n")
	}
	if r.Failed() {
		fmt.Fprintf(&b, "FAILED RUN: %d requests not decided, or decided without the central state (%s); its throughput measures nothing\n", r.Errors+r.Unknown, r.errorText())
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "elapsed\tsent\tdecided/s\tok\tover_limit\tunknown\terrors\tunsent\tallocs/req\t\n")
	fmt.Fprintf(tw, "%.2fs\t%d\t%.0f\t%d\t%d\t%d\t%d\t%d\t%.1f\t\n",
		r.ElapsedSeconds, r.Sent, r.DecidedRPS, r.OK, r.OverLimit, r.Unknown, r.Errors, r.Unsent, r.ClientAllocsPerReq)
	tw.Flush()
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "latency\tp50\tp90\tp99\tp99.9\tmax\tmean\t\n")
	row := func(name string, s LatencySummary) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", name,
			fmtUs(s.P50), fmtUs(s.P90), fmtUs(s.P99), fmtUs(s.P999), fmtUs(s.Max), fmtUs(s.Mean))
	}
	if r.Service != nil {
		row("intended", r.Latency)
		row("service", *r.Service)
	} else {
		row("", r.Latency)
	}
	tw.Flush()
	if len(r.ErrorsByCode) > 0 {
		fmt.Fprintf(&b, "errors: %s\n", r.errorText())
	}
	if f := r.Redis; f != nil {
		reads := "n/a"
		if f.Reads >= 0 {
			reads = fmt.Sprintf("%.3f", f.ReadsPerReq)
		}
		fmt.Fprintf(&b, "redis %s (%s) per request: scripts %.3f  commands %.3f (non-script %.3f)  reads %s  cpu %.1fµs  failed %d rejected %d\n",
			f.Addr, f.Version, f.ScriptsPerReq, f.CommandsPerReq, f.OtherPerReq, reads, f.CPUPerReqUs, f.FailedCalls, f.RejectedCalls)
		if len(f.ByCommand) > 0 {
			b.WriteString("redis calls:")
			for _, name := range sortedKeys(f.ByCommand) {
				fmt.Fprintf(&b, " %s=%d", name, f.ByCommand[name])
			}
			b.WriteString("\n")
		}
	}
	if r.RoundTripsPerReq != nil {
		fmt.Fprintf(&b, "server: Redis round trips per request %.4f (%s)\n", *r.RoundTripsPerReq, RoundTripsMetric)
	}
	if len(r.CPUMicrosPerReq) > 0 {
		b.WriteString("server-side CPU per request:")
		for _, us := range r.CPUMicrosPerReq {
			fmt.Fprintf(&b, " %.1fµs", us)
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func fmtUs(us float64) string {
	switch {
	case us >= 1e6:
		return fmt.Sprintf("%.2fs", us/1e6)
	case us >= 1e3:
		return fmt.Sprintf("%.2fms", us/1e3)
	default:
		return fmt.Sprintf("%.0fµs", us)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
