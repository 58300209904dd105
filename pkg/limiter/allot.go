package limiter

import (
	"time"

	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/share"
)

// Demand is what a sidecar reports with the hits it records: per
// descriptor, the units it was asked for per second since it last reported
// the key (pkg/share). The core answers each with Status.Allowance.
//
// A plain value; Rates and Held are read only.
type Demand struct {
	// Peer is who the wire authenticated the caller as (pkg/peerauth);
	// Sidecar the name it gives itself among the sidecars of that peer.
	Peer, Sidecar string
	Interval      time.Duration
	// Hold is how long the sidecar may keep a loose key's hits
	// unrecorded (share.Report.Hold); 0: it records them every interval.
	Hold  time.Duration
	Rates []float64
	// Held is, per descriptor, what the sidecar still held of its last
	// allowance for the key (share.Report.Held); nil: none.
	Held []float64
	// Denied is, per descriptor, the units the sidecar denied since it
	// last reported the key: with the hits it records they back its rate
	// (share.Report.Asked). nil: a sidecar that does not say, whose rates
	// are believed as before, within the limit's rate.
	Denied []uint64
}

// allot gives each status of a recorded request its allowance
// (Status.Allowance): the sidecar's share of what its limit has left
// after the hits, on a tight key; -1 elsewhere, with a hold on a loose
// key (Status.Hold).
func (s *Service) allot(d *decision, demand *Demand) {
	a := &d.answer
	now := s.opts.Now()
	for i := range a.Statuses {
		st := &a.Statuses[i]
		st.Allowance = -1
		j := d.itemOf[i]
		if j < 0 || s.opts.Shares == nil || len(demand.Rates) != len(a.Statuses) || d.batch.Items[j].Shadow || d.batch.Items[j].Mode == algorithm.GiveBack {
			continue // a refund carries no demand
		}
		it := &d.batch.Items[j]
		r := share.Report{Peer: demand.Peer, Sidecar: demand.Sidecar, Rate: demand.Rates[i], Interval: demand.Interval, Hold: demand.Hold}
		if len(demand.Held) == len(demand.Rates) {
			r.Held = demand.Held[i]
		}
		r.Asked = share.MaxAsked
		if len(demand.Denied) == len(demand.Rates) {
			r.Asked = float64(it.Cost) + float64(demand.Denied[i])
		}
		lim := share.Limit{
			Rate:     float64(it.Params.Limit) / float64(it.Params.Window) * 1e6, // units per second
			Capacity: float64(algorithm.Capacity(it.Params)),
		}
		// The pool unrounded (a sliding window's estimate, a bucket's
		// refill): rounding it down at every report starves a tight key.
		res := &d.batch.Results[j]
		pool := max(res.Left, float64(res.Remaining))
		if refillsAhead(it.Params.Kind, res, r, lim) {
			pool += refillAhead * lim.Rate * demand.Interval.Seconds()
		}
		st.Allowance, st.Hold = s.opts.Shares.AllotHold(it.Key, r, pool, lim, now)
	}
}

// refillAhead is how many of a sidecar's reporting intervals of a sliding
// window's or log's refill its share may be taken of ahead (refillsAhead).
const refillAhead = 2

// refillsAhead reports whether a sidecar's share of a key is taken of what
// the limit will have freed within refillAhead of its reporting intervals,
// on top of what is left now: on a sliding window or log, when the key is
// not in debt after the report's hits (res, a Force, was allowed) and the
// sidecar is asked for the key no faster than the limit's rate. A unit
// that frees on such a key goes to one sidecar as its share and waits for
// that sidecar's next request for the key, later than the next request of
// all of them; the unit's next expiry is later by as much, and the delays
// add up window after window (async sidecars at 1.5× the limit admitted
// 0.960–0.966 × an exact limiter so; 0.974–0.985 with this). A bucket
// loses nothing so (what is not used accumulates), and a sidecar asked
// faster than the rate has its next request at once: a flood gets no
// units ahead (sliding logs flooded to 1.12–1.18 × exact when it did).
func refillsAhead(k algorithm.Kind, res *algorithm.Result, r share.Report, lim share.Limit) bool {
	return (k == algorithm.SlidingWindow || k == algorithm.SlidingLog) && res.Allowed && r.Rate <= lim.Rate
}
