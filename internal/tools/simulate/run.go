package simulate

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// Options say how to run a trace.
type Options struct {
	// Domain is the domain every request of the trace is sent in.
	Domain string
	// Under is the algorithm to decide with; the zero value is each
	// limit's configured one.
	Under Under
	// Bucket is the width of the time series' buckets; zero means 1s.
	Bucket time.Duration
	// Concurrency, if set, also holds each key of a limit to this many
	// requests at once (httplimit.Concurrency), each admitted request
	// holding a slot for its Duration.
	Concurrency int64
}

// maxBuckets bounds a time series, so that a long trace with a small
// bucket asks for a wider bucket rather than for gigabytes.
const maxBuckets = 1 << 20

// Result is what one run of a trace decided.
type Result struct {
	Domain    string `json:"domain"`
	Algorithm string `json:"algorithm"` // Under's name: "configured" or the override
	Requests  int64  `json:"requests"`
	// Unmatched counts requests no limit applies to: Envoy is answered OK.
	Unmatched int64 `json:"unmatched"`
	// StartMicros is the start of the first bucket of every series, the
	// first request's time rounded down to a multiple of BucketMicros.
	StartMicros  int64 `json:"start_us"`
	BucketMicros int64 `json:"bucket_us"`
	// Limits holds every limit of the domain in config order, matched by
	// the trace or not, so that runs of one config line up index by index.
	Limits []LimitReport `json:"limits"`

	// decisions holds, per request in time order, what was decided: the
	// ground Compare stands on. trace is a digest of the requests in that
	// order, so that Compare can refuse runs of different traces.
	decisions []decision
	trace     uint64
}

type decision struct {
	limit    int32 // index into Limits, -1 when unmatched
	admitted bool
}

// LimitReport is one limit's share of a run. Request counts count
// requests; the worst-span figures count hits (units of cost), the unit a
// limit is stated in, which is the same when every cost is 1.
type LimitReport struct {
	Path            string `json:"path"`
	Name            string `json:"name,omitempty"`
	Algorithm       string `json:"algorithm,omitempty"` // as decided, after any override
	RequestsPerUnit int64  `json:"requests_per_unit"`
	WindowMicros    int64  `json:"window_us"`
	Burst           int64  `json:"burst,omitempty"`
	// Shadow limits are decided and counted here as the store counts them,
	// but the service answers OK whatever they decide.
	Shadow    bool `json:"shadow,omitempty"`
	Unlimited bool `json:"unlimited,omitempty"`

	// Keys counts the distinct descriptors (clients) that matched.
	Keys     int64 `json:"keys"`
	Offered  int64 `json:"offered"`
	Admitted int64 `json:"admitted"`
	Rejected int64 `json:"rejected"`
	// ConcurrencyRejected counts, among Rejected, those the rate limit
	// admitted and Options.Concurrency refused.
	ConcurrencyRejected int64 `json:"concurrency_rejected,omitempty"`
	// Refunded counts the units given back when admitted requests ended:
	// their Refund, or what they held of a concurrency limit.
	Refunded int64 `json:"refunded,omitempty"`
	// WorstSecond is the most hits one key had admitted in any span of one
	// second, and WorstWindow in any span of the limit's window (zero when
	// unlimited): exact, over admitted requests' times, not over buckets.
	// Per key, because a limit's allowance is per key: a fixed window
	// shows up to twice requests_per_unit here, a sliding log never more.
	WorstSecond int64 `json:"worst_second"`
	WorstWindow int64 `json:"worst_window"`

	// Series holds offered and admitted requests per bucket.
	Series []Bucket `json:"series"`
}

// Bucket is one step of a time series, in requests.
type Bucket struct {
	Offered  int64 `json:"offered"`
	Admitted int64 `json:"admitted"`
}

// keyState is one key's: the algorithm's state and, for the worst spans,
// what it admitted.
type keyState struct {
	state algorithm.State
	limit int32
	hits  []hit
	ends  []int64 // with Options.Concurrency: when the requests running end
}

// slot takes a concurrency slot at now for a request ending at end, if
// fewer than limit are running.
func (k *keyState) slot(now, end, limit int64) bool {
	k.ends = slices.DeleteFunc(k.ends, func(e int64) bool { return e <= now })
	if int64(len(k.ends)) >= limit {
		return false
	}
	k.ends = append(k.ends, end)
	return true
}

// hit is one admitted request.
type hit struct{ time, cost int64 }

// Run decides every request of trace against cfg's limits in opts.Domain.
// Requests are decided in time order (equal times in trace order), whatever
// order trace gives them in; trace itself is not modified.
func Run(cfg *config.Config, trace []Request, opts Options) (*Result, error) {
	if cfg == nil {
		return nil, errors.New("simulate: no config")
	}
	if !cfg.HasDomain(opts.Domain) {
		return nil, fmt.Errorf("simulate: domain %q is not configured (configured: %s)", opts.Domain, strings.Join(cfg.Domains(), ", "))
	}
	bucket := opts.Bucket.Microseconds()
	switch {
	case opts.Bucket == 0:
		bucket = time.Second.Microseconds()
	case bucket < 1:
		return nil, fmt.Errorf("simulate: bucket %v: must be at least 1µs", opts.Bucket)
	}
	order, err := timeOrder(trace)
	if err != nil {
		return nil, err
	}

	res := &Result{Domain: opts.Domain, Algorithm: opts.Under.String(), Requests: int64(len(trace)), BucketMicros: bucket}
	index := make(map[*config.Limit]int32)
	var params []algorithm.Params
	var limits []config.RateLimit
	for _, l := range cfg.Limits() {
		if l.Domain != opts.Domain {
			continue
		}
		rl := opts.Under.apply(l.RateLimit)
		index[l] = int32(len(res.Limits))
		params, limits = append(params, rl.Params()), append(limits, rl)
		res.Limits = append(res.Limits, newLimitReport(l, rl))
	}
	if len(trace) > 0 {
		first, last := trace[order[0]].Time, trace[order[len(order)-1]].Time
		res.StartMicros = floorDiv(first, bucket) * bucket
		n := (last-res.StartMicros)/bucket + 1
		if n > maxBuckets {
			return nil, fmt.Errorf("simulate: %d buckets of %v over the trace; at most %d: use a wider bucket", n, time.Duration(bucket)*time.Microsecond, maxBuckets)
		}
		for i := range res.Limits {
			res.Limits[i].Series = make([]Bucket, n)
		}
	}

	keys := make(map[string]*keyState)
	var due refunds
	res.decisions = make([]decision, len(trace))
	var key []byte
	digest := fnv.New64a()
	for i, ti := range order {
		req := trace[ti]
		due.settle(req.Time, res)
		key = binary.AppendVarint(key[:0], req.Time)
		key = binary.AppendVarint(key, req.cost())
		key = appendStateKey(key, opts.Domain, "", req.Entries)
		digest.Write(key)
		l := cfg.Match(opts.Domain, req.Entries)
		if l == nil {
			res.Unmatched++
			res.decisions[i] = decision{limit: -1}
			continue
		}
		li := index[l]
		rep := &res.Limits[li]
		entries := shared(req.Entries, l.Shared)
		if l.RateLimit.Holder {
			entries = holderEntries(entries)
		}
		key = appendStateKey(key[:0], opts.Domain, l.Path, entries)
		k := keys[string(key)]
		if k == nil {
			k = &keyState{limit: li}
			keys[string(key)] = k
			rep.Keys++
		}
		var ok bool
		switch {
		case l.RateLimit.Unlimited:
			ok = true
		case l.RateLimit.Blocks():
			// requests_per_unit: 0 denies without state, as the server does.
		default:
			var r algorithm.Result
			p, mode := decideAs(params[li], limits[li], req.Time)
			if l.RateLimit.Holder {
				p.Holder = holderOf(ti)
			}
			k.state, r = algorithm.Decide(k.state, p, req.Time, req.cost(), mode)
			ok = r.Allowed
			if ok {
				due.schedule(req, int64(i), k, p, limits[li])
			}
		}
		if ok && opts.Concurrency > 0 && !k.slot(req.Time, req.Time+req.Duration, opts.Concurrency) {
			ok = false
			rep.ConcurrencyRejected++
		}
		res.decisions[i] = decision{limit: li, admitted: ok}
		b := &rep.Series[(req.Time-res.StartMicros)/bucket]
		rep.Offered++
		b.Offered++
		if ok {
			rep.Admitted++
			b.Admitted++
			k.hits = append(k.hits, hit{req.Time, req.cost()})
		} else {
			rep.Rejected++
		}
	}
	due.settle(math.MaxInt64, res) // what ends after the last request
	res.trace = digest.Sum64()
	for _, k := range keys {
		rep := &res.Limits[k.limit]
		rep.WorstSecond = max(rep.WorstSecond, worstSpan(k.hits, time.Second.Microseconds()))
		if rep.WindowMicros > 0 {
			rep.WorstWindow = max(rep.WorstWindow, worstSpan(k.hits, rep.WindowMicros))
		}
	}
	return res, nil
}

func newLimitReport(l *config.Limit, rl config.RateLimit) LimitReport {
	rep := LimitReport{
		Path:      l.Path,
		Name:      l.RateLimit.Name,
		Shadow:    l.ShadowMode,
		Unlimited: rl.Unlimited,
	}
	if !rl.Unlimited {
		rep.Algorithm = rl.Algorithm.String()
		rep.RequestsPerUnit = int64(rl.RequestsPerUnit)
		rep.WindowMicros = rl.Window().Microseconds()
		if rl.HasBurst() {
			rep.Burst = int64(rl.Burst)
		}
	}
	return rep
}

// timeOrder checks trace and returns its indexes in time order, stable so
// that requests at one instant keep their order.
func timeOrder(trace []Request) ([]int, error) {
	order := make([]int, len(trace))
	for i, r := range trace {
		if r.Cost < 0 || r.Cost > limiter.MaxCost {
			return nil, fmt.Errorf("simulate: request %d: cost %d: must be 0 (meaning 1) to %d", i, r.Cost, int64(limiter.MaxCost))
		}
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(trace[a].Time, trace[b].Time) })
	return order, nil
}

// worstSpan returns the most cost admitted in any half-open span [t, t+d),
// over hits in time order. A span holding the most always starts at a hit,
// so sliding its start over the hits, and its end with it, finds the worst
// exactly. Half-open, because a sliding log admits a hit exactly one
// window after another: they never count together.
func worstSpan(hits []hit, d int64) int64 {
	var worst, sum int64
	lo := 0
	for _, h := range hits {
		sum += h.cost
		for hits[lo].time <= h.time-d {
			sum -= hits[lo].cost
			lo++
		}
		worst = max(worst, sum)
	}
	return worst
}

// floorDiv divides rounding towards minus infinity, so that buckets before
// time zero are aligned like those after it.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// decideAs is how the server decides a request at now on limit rl, with
// params p: a calendar limit in its period, a count_refused one counting
// every hit.
func decideAs(p algorithm.Params, rl config.RateLimit, now int64) (algorithm.Params, algorithm.Mode) {
	if rl.Calendar != nil && p.Kind == algorithm.FixedWindow {
		start, end := config.CalendarPeriod(time.UnixMicro(now), rl.Unit, rl.Calendar)
		p.Origin, p.Window = start.UnixMicro(), end.Sub(start).Microseconds()
	}
	if rl.CountRefused {
		return p, algorithm.Count
	}
	return p, algorithm.Take
}

// shared is entries as the server counts them: an entry matched by a
// share_threshold wildcard by the wildcard (config.Limit.Shared).
func shared(entries []config.Entry, patterns []string) []config.Entry {
	if patterns == nil {
		return entries
	}
	out := slices.Clone(entries)
	for i := range out {
		if i < len(patterns) && patterns[i] != "" {
			out[i].Value = patterns[i]
		}
	}
	return out
}
