package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/tools/simulate"
	"github.com/sluicehq/sluice/pkg/config"
)

const runSynopsis = `Usage: simulate run -config PATH [-domain D] (-trace FILE.csv | -pattern NAME) [flags]

Replays a trace against the config's limits in domain D and prints, per
limit: requests offered, admitted and rejected, and the most admitted in
any 1 s span and in any span of the limit's window. With -compare, the
trace is replayed a second time, from fresh state, under another algorithm
and the requests the two decided differently are counted.

Trace CSV columns: time,entries,cost,duration,refund (time in seconds or
RFC 3339; entries key=value;key=value; cost optional, default 1; duration in
seconds, optional, for -concurrency and concurrency limits; refund optional,
the units given back when the request ends). Patterns: steady, bursty,
boundary, many; their requests carry one entry, -key=10.0.0.N. Flags:
`

// runFlags is everything run's flags say.
type runFlags struct {
	config, domain, trace, svg string
	under, compare             string
	bucket                     time.Duration
	concurrency                int64
	json                       bool
	pattern                    simulate.Pattern
}

// patternOnly are the flags that shape a generated trace.
var patternOnly = []string{"duration", "rate", "clients", "seed", "key", "on", "off"}

func newRunFlagSet(f *runFlags, stderr io.Writer) *flag.FlagSet {
	fs := newFlagSet("run", runSynopsis, stderr)
	fs.StringVar(&f.config, "config", "", "descriptor config `path`: a YAML file or a directory of them (required)")
	fs.StringVar(&f.domain, "domain", "", "domain the requests are sent in (default: the config's only domain)")
	fs.StringVar(&f.trace, "trace", "", "trace `file` in CSV (time,entries,cost,duration,refund)")
	fs.Int64Var(&f.concurrency, "concurrency", 0, "also hold each key to this many requests at once (httplimit.Concurrency), each for its duration in the trace")
	fs.StringVar(&f.pattern.Kind, "pattern", "", "generate the trace: "+strings.Join(simulate.Patterns(), ", "))
	fs.DurationVar(&f.pattern.Duration, "duration", time.Minute, "pattern: length of the trace")
	fs.Float64Var(&f.pattern.Rate, "rate", 0, "pattern: requests/s of the client (steady), of each client in a burst (bursty), the clients' mean (many); 0: the rate, on average, of the limit the first client matches")
	fs.IntVar(&f.pattern.Clients, "clients", 0, "pattern: clients of bursty and many (default 10 and 100; steady and boundary send from one)")
	fs.Uint64Var(&f.pattern.Seed, "seed", 1, "pattern: seed of bursty and many; the same seed gives the same trace")
	fs.StringVar(&f.pattern.Key, "key", "remote_address", "pattern: descriptor key of the generated requests")
	fs.DurationVar(&f.pattern.On, "on", simulate.DefaultOn, "pattern bursty: mean burst length")
	fs.DurationVar(&f.pattern.Off, "off", simulate.DefaultOff, "pattern bursty: mean gap between bursts")
	fs.StringVar(&f.under, "algorithm", "", "decide every limit with this algorithm (token_bucket, gcra, sliding_window, fixed_window, sliding_log); default: each limit's configured one")
	fs.StringVar(&f.compare, "compare", "", "replay the trace under this algorithm too and count the disagreements")
	fs.DurationVar(&f.bucket, "bucket", time.Second, "width of the time series' buckets (JSON and -svg)")
	fs.StringVar(&f.svg, "svg", "", "write a plot of offered and admitted requests over time to `file`")
	fs.BoolVar(&f.json, "json", false, "print the report as JSON, time series included")
	return fs
}

func runCommand(args []string, stdout, stderr io.Writer) int {
	var f runFlags
	fs := newRunFlagSet(&f, stderr)
	if code, ok := parse(fs, args); !ok {
		return code
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if msg := f.check(fs, set); msg != "" {
		return usageError(stderr, "run", "%s", msg)
	}
	a, err := simulate.ParseUnder(f.under)
	if err != nil {
		return usageError(stderr, "run", "-algorithm: %v", err)
	}
	var b simulate.Under
	if f.compare != "" {
		if b, err = simulate.ParseUnder(f.compare); err != nil {
			return usageError(stderr, "run", "-compare: %v", err)
		}
	}

	cfg, err := config.Load(f.config)
	if err != nil {
		fmt.Fprintf(stderr, "%v\n", err)
		return exitError
	}
	if f.domain == "" {
		ds := cfg.Domains()
		if len(ds) != 1 {
			return usageError(stderr, "run", "-domain is required: the config has the domains %s", strings.Join(ds, ", "))
		}
		f.domain = ds[0]
	}
	trace, source, err := f.load(cfg, set)
	if err != nil {
		fmt.Fprintf(stderr, "simulate run: %v\n", err)
		return exitError
	}

	if f.concurrency < 0 {
		fmt.Fprintln(stderr, "-concurrency must not be negative")
		return 2
	}
	opts := simulate.Options{Domain: f.domain, Under: a, Bucket: f.bucket, Concurrency: f.concurrency}
	var (
		runs []*simulate.Result
		cmp  *simulate.Comparison
	)
	if f.compare != "" {
		var ra, rb *simulate.Result
		ra, rb, cmp, err = simulate.RunBoth(cfg, trace, opts, a, b)
		runs = []*simulate.Result{ra, rb}
	} else {
		var res *simulate.Result
		res, err = simulate.Run(cfg, trace, opts)
		runs = []*simulate.Result{res}
	}
	if err != nil {
		fmt.Fprintf(stderr, "simulate run: %v\n", err)
		return exitError
	}
	if f.svg != "" {
		if err := writeSVG(f.svg, runs); err != nil {
			fmt.Fprintf(stderr, "simulate run: %v\n", err)
			return exitError
		}
	}
	if f.json {
		err = writeRunJSON(stdout, source, runs, cmp)
	} else {
		err = writeRunText(stdout, source, runs, cmp)
	}
	if err != nil {
		fmt.Fprintf(stderr, "simulate run: write report: %v\n", err)
		return exitError
	}
	return exitOK
}

// check validates the flags among themselves; the config is not read yet.
func (f *runFlags) check(fs *flag.FlagSet, set map[string]bool) string {
	switch {
	case fs.NArg() > 0:
		return fmt.Sprintf("unexpected arguments %q", fs.Args())
	case f.config == "":
		return "-config is required"
	case (f.trace == "") == (f.pattern.Kind == ""):
		return "give exactly one of -trace and -pattern"
	case f.pattern.Kind != "" && !slices.Contains(simulate.Patterns(), f.pattern.Kind):
		return fmt.Sprintf("-pattern %q: want one of %s", f.pattern.Kind, strings.Join(simulate.Patterns(), ", "))
	case f.bucket <= 0:
		return fmt.Sprintf("-bucket %v: must be positive", f.bucket)
	case f.pattern.Rate < 0:
		return fmt.Sprintf("-rate %v: must not be negative", f.pattern.Rate)
	case f.pattern.Clients < 0:
		return fmt.Sprintf("-clients %d: must not be negative", f.pattern.Clients)
	case f.pattern.On <= 0 || f.pattern.Off <= 0:
		return fmt.Sprintf("-on %v, -off %v: both must be positive", f.pattern.On, f.pattern.Off)
	}
	switch k := f.pattern.Kind; {
	case k == simulate.Boundary && set["rate"]:
		return "-rate does not apply to -pattern boundary: it sends the matched limit's allowance"
	case (k == simulate.Steady || k == simulate.Boundary) && f.pattern.Clients > 1:
		return fmt.Sprintf("-clients %d: -pattern %s sends from one client", f.pattern.Clients, k)
	case k != simulate.Bursty && (set["on"] || set["off"]):
		return "-on and -off apply to -pattern bursty only"
	}
	if f.trace != "" {
		for _, name := range patternOnly {
			if set[name] {
				return fmt.Sprintf("-%s shapes a generated trace: it needs -pattern, not -trace", name)
			}
		}
	}
	return ""
}

// load reads or generates the trace and describes where it came from.
func (f *runFlags) load(cfg *config.Config, set map[string]bool) ([]simulate.Request, string, error) {
	if f.trace != "" {
		file, err := os.Open(f.trace)
		if err != nil {
			return nil, "", err
		}
		defer file.Close()
		trace, err := simulate.ReadCSV(f.trace, file)
		return trace, fmt.Sprintf("trace %s", f.trace), err
	}
	p := f.pattern
	if !set["clients"] {
		switch p.Kind {
		case simulate.Bursty:
			p.Clients = 10
		case simulate.Many:
			p.Clients = 100
		}
	}
	// The limit the first client's requests match gives boundary its
	// target and the other patterns a default rate: traffic at the limit.
	first := simulate.ClientEntries(p.Key, 0)
	l := cfg.Match(f.domain, first)
	counted := l != nil && !l.RateLimit.Unlimited && !l.RateLimit.Blocks()
	if counted {
		p.Limit = int64(l.RateLimit.RequestsPerUnit)
		p.Window = l.RateLimit.Window()
	}
	// Generated requests carry one entry with an address for a value, so
	// only a key-only or wildcard descriptor of -key can match them.
	hint := fmt.Sprintf("generated requests carry the one entry %s=10.0.0.N, which needs a descriptor with key %s and no value (or a wildcard)", p.Key, p.Key)
	switch {
	case p.Kind == simulate.Boundary && !counted:
		return nil, "", fmt.Errorf("pattern boundary: no counted limit in domain %s to attack: %s", f.domain, hint)
	case p.Kind != simulate.Boundary && p.Rate == 0 && !counted:
		return nil, "", fmt.Errorf("pattern %s: no counted limit in domain %s to take a rate from (give -rate): %s", p.Kind, f.domain, hint)
	case p.Kind == simulate.Bursty && p.Rate == 0:
		// Bursts above the limit, silences below it, at its rate on average.
		p.Rate = float64(p.Limit) / p.Window.Seconds() * (p.On + p.Off).Seconds() / p.On.Seconds()
	case p.Kind != simulate.Boundary && p.Rate == 0:
		p.Rate = float64(p.Limit) / p.Window.Seconds()
	}
	trace, err := simulate.Generate(p)
	return trace, describePattern(p), err
}

func describePattern(p simulate.Pattern) string {
	switch p.Kind {
	case simulate.Boundary:
		return fmt.Sprintf("pattern boundary (%d before and after every other boundary of %v, %v)", p.Limit, p.Window, p.Duration)
	case simulate.Steady:
		return fmt.Sprintf("pattern steady (%.4g/s, %v)", p.Rate, p.Duration)
	case simulate.Bursty:
		return fmt.Sprintf("pattern bursty (%d clients, %.4g/s in bursts of %v every %v on average, %v, seed %d)", p.Clients, p.Rate, p.On, p.On+p.Off, p.Duration, p.Seed)
	}
	return fmt.Sprintf("pattern many (%d clients, %.4g/s mean, %v, seed %d)", p.Clients, p.Rate, p.Duration, p.Seed)
}

func writeSVG(path string, runs []*simulate.Result) error {
	file, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := simulate.WriteSVG(file, runs...); err != nil {
		file.Close()
		return err
	}
	return file.Close()
}

func writeRunJSON(w io.Writer, source string, runs []*simulate.Result, cmp *simulate.Comparison) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Source     string               `json:"source"`
		Runs       []*simulate.Result   `json:"runs"`
		Comparison *simulate.Comparison `json:"comparison,omitempty"`
	}{source, runs, cmp})
}
