package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/internal/tools/simulate"
	"github.com/sluicehq/sluice/pkg/config"
)

const accuracySynopsis = `Usage: simulate accuracy [-clients 1000 -duration 10m -seed 1 -limit 100 -window 1m]

Generates a many-clients trace (Poisson arrivals, each client's rate drawn
from a log-normal distribution around -rate) and decides every request
under sliding_window and under the exact sliding_log, each with its own
state, on one limit per client. Reports how often sliding_window was wrong,
as percentages of all requests, three ways:

  independent    the two algorithms' decisions on each request side by
                 side, each on its own history: errors plus their knock-on
                 effects (one extra admission is often repaid by a
                 rejection later)
  net            per client, how many more or fewer requests sliding_window
                 admitted in all than sliding_log: independent with the
                 knock-on pairs cancelled
  same history   each sliding_window decision against an exact count of the
                 hits the sliding window itself admitted in the last window:
                 the estimate's own error, closest to Cloudflare's measure

and the trace's composition: how much was offered over the limit, and the
errors by client load (offered per window / limit). Flags:
`

type accuracyFlags struct {
	clients  int
	duration time.Duration
	seed     uint64
	limit    int64
	window   time.Duration
	rate     float64
	json     bool
}

func accuracyCommand(args []string, stdout, stderr io.Writer) int {
	var f accuracyFlags
	fs := newFlagSet("accuracy", accuracySynopsis, stderr)
	fs.IntVar(&f.clients, "clients", 1000, "clients, each on its own key")
	fs.DurationVar(&f.duration, "duration", 10*time.Minute, "length of the trace")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the trace")
	fs.Int64Var(&f.limit, "limit", 100, fmt.Sprintf("requests per window per client (1 to %d, sliding_log's cap)", config.MaxSlidingLogLimit))
	fs.DurationVar(&f.window, "window", time.Minute, "the limit's window")
	fs.Float64Var(&f.rate, "rate", 0, "clients' mean requests/s (0: the limit's rate, so about a third of clients are over it)")
	fs.BoolVar(&f.json, "json", false, "print the report as JSON")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	switch {
	case fs.NArg() > 0:
		return usageError(stderr, "accuracy", "unexpected arguments %q", fs.Args())
	case f.clients < 1:
		return usageError(stderr, "accuracy", "-clients %d: want at least 1", f.clients)
	case f.limit < 1 || f.limit > config.MaxSlidingLogLimit:
		return usageError(stderr, "accuracy", "-limit %d: want 1 to %d", f.limit, config.MaxSlidingLogLimit)
	case f.window <= 0:
		return usageError(stderr, "accuracy", "-window %v: must be positive", f.window)
	case f.rate < 0:
		return usageError(stderr, "accuracy", "-rate %v: must not be negative", f.rate)
	}
	p := simulate.Pattern{Kind: simulate.Many, Duration: f.duration, Rate: f.rate, Clients: f.clients, Seed: f.seed}
	if p.Rate == 0 {
		p.Rate = float64(f.limit) / f.window.Seconds()
	}
	trace, err := simulate.Generate(p)
	if err != nil {
		// Clients, duration and the volume they make are checked here.
		return usageError(stderr, "accuracy", "%v", err)
	}
	rep, err := simulate.Accuracy(trace, simulate.AccuracyOptions{Limit: f.limit, Window: f.window, Duration: f.duration})
	if err != nil {
		fmt.Fprintf(stderr, "simulate accuracy: %v\n", err)
		return exitError
	}
	if f.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		type trace struct {
			Clients  int     `json:"clients"`
			Duration string  `json:"duration"`
			MeanRate float64 `json:"mean_rate"` // requests/s per client
			Seed     uint64  `json:"seed"`
		}
		err = enc.Encode(struct {
			Trace  trace                    `json:"trace"`
			Report *simulate.AccuracyReport `json:"report"`
		}{trace{p.Clients, p.Duration.String(), p.Rate, p.Seed}, rep})
	} else {
		err = writeAccuracyText(stdout, p, rep)
	}
	if err != nil {
		fmt.Fprintf(stderr, "simulate accuracy: write report: %v\n", err)
		return exitError
	}
	return exitOK
}

func writeAccuracyText(w io.Writer, p simulate.Pattern, rep *simulate.AccuracyReport) error {
	window := time.Duration(rep.WindowMicros) * time.Microsecond
	fmt.Fprintf(w, "sliding_window against the exact sliding_log, %d per %v per client\n", rep.Limit, window)
	fmt.Fprintf(w, "trace: %d clients, Poisson arrivals at log-normal rates with mean %.4g/s (the limit is %.4g/s), %v, seed %d\n",
		p.Clients, p.Rate, float64(rep.Limit)/window.Seconds(), p.Duration, p.Seed)
	fmt.Fprintf(w, "offered: %d requests from %d clients; over the limit (the exact log rejected): %d (%.3f%%)\n\n",
		rep.Requests, rep.Clients, rep.OverLimit, rep.OverLimitPercent)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MEASURE\tWRONGLY ADMITTED\t% OF REQUESTS\tWRONGLY LIMITED\t% OF REQUESTS")
	for _, m := range []struct {
		name string
		d    simulate.Disagreement
	}{{"independent", rep.Independent}, {"net", rep.Net}, {"same history", rep.SameHistory}} {
		fmt.Fprintf(tw, "%s\t%d\t%.4f\t%d\t%.4f\n", m.name, m.d.WronglyAdmitted, m.d.WronglyAdmittedPercent, m.d.WronglyLimited, m.d.WronglyLimitedPercent)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintf(w, "\nby client load (hits offered per window / limit), %% of the band's requests wrongly admitted / limited:\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LOAD\tCLIENTS\tREQUESTS\tOVER LIMIT %\tINDEPENDENT\tNET\tSAME HISTORY")
	for _, b := range rep.Bands {
		load := fmt.Sprintf("%.1f-%.1f", b.Low, b.High)
		if b.High == 0 {
			load = fmt.Sprintf("%.1f+", b.Low)
		}
		pair := func(d simulate.Disagreement) string {
			return fmt.Sprintf("%.3f / %.3f", d.WronglyAdmittedPercent, d.WronglyLimitedPercent)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.3f\t%s\t%s\t%s\n", load, b.Clients, b.Requests,
			b.OverLimitPercent, pair(b.Independent), pair(b.Net), pair(b.SameHistory))
	}
	return tw.Flush()
}
