package simulate

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/config"
)

// AccuracyOptions give the one limit every client of an accuracy trace is
// held to, each client (each distinct descriptor) on its own key.
type AccuracyOptions struct {
	Limit  int64
	Window time.Duration
	// Duration is how long the trace was generated for, the span clients'
	// offered rates are measured over; zero means first to last request.
	Duration time.Duration
}

// AccuracyReport says how far sliding_window's estimate strays from the
// exact sliding_log on one trace, two ways, overall and by how hard each
// client pushed against its limit. Percentages are of the requests counted
// in the same row.
type AccuracyReport struct {
	Limit        int64 `json:"limit"`
	WindowMicros int64 `json:"window_us"`
	AccuracyCounts
	Bands []AccuracyBand `json:"bands"`
}

// AccuracyCounts are the figures of a report, for the whole trace or for
// one band of clients.
type AccuracyCounts struct {
	Clients  int64 `json:"clients"`
	Requests int64 `json:"requests"`
	// OverLimit counts requests the exact sliding_log rejected: the part
	// of the trace offered above the limit. Without it no approximation
	// can err, so every figure below is read against it.
	OverLimit        int64   `json:"over_limit"`
	OverLimitPercent float64 `json:"over_limit_percent"`
	// Independent: sliding_window and sliding_log each decided the whole
	// trace with their own state. A disagreement changes what each has
	// left, so one error can be followed by knock-on ones, often of the
	// opposite sign.
	Independent Disagreement `json:"independent"`
	// SameHistory: each sliding_window decision checked against an exact
	// count of what the sliding window itself admitted in the last window.
	// This isolates the estimate's error, decision by decision, and is the
	// closest to the measure Cloudflare published (0.003% wrongly allowed
	// or limited, on traffic mostly far below its limits). A client held
	// at its limit is wrongly limited on every request it sends while one
	// unit is free by the exact count, so heavy clients weigh a lot here.
	SameHistory Disagreement `json:"same_history"`
	// Net is Independent with its knock-on pairs cancelled: per client,
	// how many more (WronglyAdmitted) or fewer (WronglyLimited) requests
	// sliding_window admitted over the whole trace than sliding_log did.
	// Where Independent is much larger, the two mostly admitted as many
	// requests at different moments.
	Net Disagreement `json:"net"`
}

// Disagreement counts requests sliding_window decided differently from
// the exact log: admitted though over the limit, or limited though under.
type Disagreement struct {
	WronglyAdmitted        int64   `json:"wrongly_admitted"`
	WronglyLimited         int64   `json:"wrongly_limited"`
	WronglyAdmittedPercent float64 `json:"wrongly_admitted_percent"`
	WronglyLimitedPercent  float64 `json:"wrongly_limited_percent"`
}

// AccuracyBand is the clients whose offered load (their hits per window
// over the trace, as a multiple of the limit) is in [Low, High).
type AccuracyBand struct {
	Low  float64 `json:"low"`
	High float64 `json:"high"` // 0 for the last band: no upper bound
	AccuracyCounts
}

// accuracyBands are the load bands' lower edges. Clients far below their
// limit never meet it, so no estimate can err for them; the bands show
// where the errors are.
var accuracyBands = []float64{0, 0.5, 0.9, 1.1, 2}

// clientTally is one client's state and counts.
type clientTally struct {
	window, log, history algorithm.State
	hits                 int64
	band                 AccuracyCounts
}

// Accuracy decides trace under sliding_window and sliding_log, each on its
// own state over the same offered requests, and reports where they differ.
func Accuracy(trace []Request, opts AccuracyOptions) (*AccuracyReport, error) {
	w := opts.Window.Microseconds()
	if opts.Limit < 1 || opts.Limit > config.MaxSlidingLogLimit || w < 1 {
		return nil, fmt.Errorf("accuracy: limit %d per %v: want 1 to %d per at least 1µs", opts.Limit, opts.Window, config.MaxSlidingLogLimit)
	}
	if len(trace) == 0 {
		return nil, errors.New("accuracy: empty trace")
	}
	order, err := timeOrder(trace)
	if err != nil {
		return nil, err
	}
	sw := algorithm.Params{Kind: algorithm.SlidingWindow, Limit: opts.Limit, Window: w}
	exact := algorithm.Params{Kind: algorithm.SlidingLog, Limit: opts.Limit, Window: w}

	clients := make(map[string]*clientTally)
	var key []byte
	for _, i := range order {
		req := trace[i]
		key = appendStateKey(key[:0], "", "", req.Entries)
		c := clients[string(key)]
		if c == nil {
			c = &clientTally{}
			clients[string(key)] = c
		}
		t, cost := req.Time, req.cost()
		var swr, logr algorithm.Result
		c.window, swr = algorithm.Decide(c.window, sw, t, cost, algorithm.Take)
		c.log, logr = algorithm.Decide(c.log, exact, t, cost, algorithm.Take)
		// The exact verdict on the sliding window's own history, which then
		// records what the sliding window admitted, over the limit or not.
		next, histr := algorithm.Decide(c.history, exact, t, cost, algorithm.Take)
		switch {
		case swr.Allowed && histr.Allowed:
			c.history = next
		case swr.Allowed:
			c.history, _ = algorithm.Decide(c.history, exact, t, cost, algorithm.Force)
		}
		c.hits += cost
		b := &c.band
		b.Requests++
		if !logr.Allowed {
			b.OverLimit++
		}
		b.Independent.count(swr.Allowed, logr.Allowed)
		b.SameHistory.count(swr.Allowed, histr.Allowed)
	}

	span := opts.Duration.Microseconds()
	if span <= 0 {
		span = trace[order[len(order)-1]].Time - trace[order[0]].Time
	}
	windows := float64(max(span, w)) / float64(w)
	rep := &AccuracyReport{Limit: opts.Limit, WindowMicros: w}
	for k, low := range accuracyBands {
		var high float64
		if k+1 < len(accuracyBands) {
			high = accuracyBands[k+1]
		}
		rep.Bands = append(rep.Bands, AccuracyBand{Low: low, High: high})
	}
	for _, c := range clients {
		load := float64(c.hits) / windows / float64(opts.Limit)
		k := len(accuracyBands) - 1
		for k > 0 && load < accuracyBands[k] {
			k--
		}
		c.band.Clients = 1
		// sliding_window's admissions less sliding_log's: what both
		// admitted cancels out.
		if d := c.band.Independent.WronglyAdmitted - c.band.Independent.WronglyLimited; d > 0 {
			c.band.Net.WronglyAdmitted = d
		} else {
			c.band.Net.WronglyLimited = -d
		}
		rep.Bands[k].add(c.band)
	}
	for k := range rep.Bands {
		rep.Bands[k].percents()
		rep.add(rep.Bands[k].AccuracyCounts)
	}
	rep.percents()
	return rep, nil
}

func (d *Disagreement) count(approx, exact bool) {
	switch {
	case approx && !exact:
		d.WronglyAdmitted++
	case exact && !approx:
		d.WronglyLimited++
	}
}

// add adds o's counts to b.
func (b *AccuracyCounts) add(o AccuracyCounts) {
	b.Clients += o.Clients
	b.Requests += o.Requests
	b.OverLimit += o.OverLimit
	b.Independent.WronglyAdmitted += o.Independent.WronglyAdmitted
	b.Independent.WronglyLimited += o.Independent.WronglyLimited
	b.SameHistory.WronglyAdmitted += o.SameHistory.WronglyAdmitted
	b.SameHistory.WronglyLimited += o.SameHistory.WronglyLimited
	b.Net.WronglyAdmitted += o.Net.WronglyAdmitted
	b.Net.WronglyLimited += o.Net.WronglyLimited
}

func (b *AccuracyCounts) percents() {
	b.OverLimitPercent = percent(b.OverLimit, b.Requests)
	for _, d := range []*Disagreement{&b.Independent, &b.SameHistory, &b.Net} {
		d.WronglyAdmittedPercent = percent(d.WronglyAdmitted, b.Requests)
		d.WronglyLimitedPercent = percent(d.WronglyLimited, b.Requests)
	}
}
