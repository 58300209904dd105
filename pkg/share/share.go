// Package share divides what a limit has left among the async sidecars
// that draw on it (pkg/localtier), in proportion to the demand each of
// them reports.
//
// An async sidecar admits from memory and records the hits it admitted
// with the server every flush interval. With each record it reports, per
// key, its demand: the units it was asked for per second since its last
// report, admitted or not. The server answers each key of the record with
// an allowance: the units this sidecar may admit for the key until its
// next report. Envoy's rate limit quota service (budgets pushed to proxies,
// usage reported back) and Gubernator's GLOBAL behaviour are the prior art.
//
// # The rule
//
// A key is tight when the demand of the next Tightness reporting
// intervals, summed over the sidecars that reported it recently, could
// take all that the limit has left (pool: what the store would admit now,
// after recording the report's hits). A sidecar's reporting interval is
// what it says: its flush interval, or, when its flushes run late or its
// calls are slow, the cycle it actually has plus a round trip, since it
// decides on one answer until the next reaches it. A key that is not tight gets no
// allowance: the sidecar decides as before, on its local bucket alone, so
// keys far from their limits are never refused. The margin is wide on
// purpose: sidecars report at their own phases, and each goes on deciding
// on its local bucket until its own next report finds the key tight; and
// on a key this far from its limit an allowance covers several intervals
// of a sidecar's demand, so only a burst several times its usual rate
// meets a refusal the limit would not have made. On a tight key sidecar i
// gets
//
//	pool · dᵢ / D
//
// in whole units (rounded up with the probability of the fraction), dᵢ its
// demand and D the demand of all the sidecars that reported the key within
// the last second. An allowance replaces the last one at each answer and
// is spent after three of the intervals at which the sidecar reports the
// key (a flush interval, longer for a key it is asked for seldom; a second
// at most): the sidecar then refuses the key
// until a new answer (a stale allowance never admits). What a sidecar
// leaves unused stays in the store and enlarges the next pool, so the
// store's refill reaches the sidecars with one interval's delay.
//
// Sidecars report at their own phases, and their answers take a round
// trip to reach them, so each share is taken of a pool that does not yet
// count what the others admitted since their last report. So an allowance
// is never more than the pool less what the other sidecars may still admit
// without the store knowing: what they were allowed at their last answers,
// or what they said they still held of the one before if more, for as
// long as an allowance may be spent (three reporting intervals and one
// more). A sidecar in turn takes from each answer what it admitted while
// the answer was on its way (pkg/localtier). The pool itself is unrounded (a
// sliding window's estimate, a bucket's refill), and a sidecar keeps up to
// one unit of an allowance it did not spend (pkg/localtier), so that a
// sidecar asked for a key now and then is not refused while the limit has
// room. Everything admitted is recorded, so
// the store's debt holds the excess back in the next rounds. The model
// test (model_test.go) measures the rule over 3 to 100 sidecars.
//
// The Tracker keeps what it needs in memory, per server process, within a
// byte budget: with several server replicas behind one address, each sees
// a sidecar's reports in turn and knows only the allowances it gave
// itself. A report counts for three of the intervals at which its sidecar
// is actually seen reporting the key (at least a second, so that a
// sidecar that asks for a key seldom keeps its demand in the total in
// between), never for longer because the sidecar says it reports seldom.
//
// # Loose keys held
//
// Recording a key every interval costs the store a call on the key each
// time, though a key far from its limit gains nothing by it: with keys
// asked for a few times a second, nearly every request became a record.
// A sidecar that says how long it may keep a loose key's hits
// (Report.Hold) gets with each answer on a loose key whose pool covers
// HoldMargin times its sidecars' demand over the hold a hold: the units it
// may keep unrecorded until then, its demand's share of HoldShare of the
// pool, rounded down. So the hits all the sidecars keep unrecorded on a
// key stay within HoldShare of what the key had left at their answers, on
// top of the interval's exposure the tightness test allows for; a key
// with too little left for a whole unit is recorded every interval, as
// before. The hold counts as the sidecar's in what the others may be
// allotted once the key turns tight (granted), and its report (its demand
// in the total) counts, until the hold has run out.
package share

import (
	"math"
	"time"
)

// Tightness is how many flush intervals of the reported demand the pool
// must cover for a key to go without allowances. Measured (model_test.go
// and the e2e flood tests), 2 let three sidecars admit up to 8 % over a
// fixed window at each window's start; 8 holds them within 4 %.
const Tightness = 8

// lapse is how many of its flush intervals an allowance or a report
// counts for.
const lapse = 3

// Bounds on what a report may carry; the server refuses (ignores) a report
// outside them.
const (
	MaxSidecarID = 64
	MaxPeer      = 256
	MinInterval  = time.Millisecond
	MaxInterval  = 10 * time.Second
	MaxRate      = 1e9 // units per second
	MaxHold      = MaxInterval
)

// HoldShare is the part of what a loose key has left that its sidecars
// may hold unrecorded beyond their reporting intervals, all together
// (Tracker.AllotHold): half of what the tightness margin leaves.
const HoldShare = 1.0 / (2 * Tightness)

// HoldMargin is how many times the demand of all its sidecars over a
// whole hold a key's pool must cover for a hold to be given: a key a flood
// drains within the hold is recorded every interval, since a hold given
// while it was still loose counts against the others' allowances once it
// is tight (granted); holds on a flood's keys at its start cost 1 % of
// what three sidecars admitted at 1.5× the limit.
const HoldMargin = 2

// What one peer's demand can weigh. A report is honoured only from an
// authenticated peer (pkg/peerauth), but a peer holding valid credentials
// can still claim any demand, under as many sidecar names as it likes. So
// the demands of one peer's sidecars on a key are summed and capped: in
// the shares at MaxShareWeight times the limit's rate, and in the
// tightness test so that one peer's claim alone makes a key tight only
// once half its capacity is used (Tightness intervals of the capped
// demand are half the capacity). Then, whatever one peer claims, every
// other peer's sidecar keeps at least half its demand-proportional share
// whenever the others' demand is at least the limit's rate (d/(d+rate) ≥
// 1/2), and a key that has more than half its capacity left is decided on
// the local buckets as before. Give each sidecar a name of its own (its
// own certificate or token): sidecars sharing one are one peer, and their
// floods are judged tight later.
const MaxShareWeight = 1

// What one report's demand can weigh against what backs it: a report's
// Rate counts for at most MaxAskedWeight times the units it says it was
// asked for (Report.Asked: the hits it records and those it refused) over
// the time since its sidecar last reported the key, as the server saw it
// or as the sidecar states its interval, the shorter. A report that
// records nothing and refused nothing claims no demand, whatever Rate it
// states; one that was asked for what it says loses nothing: the multiple
// covers reports that reach a server closer together or further apart
// than they were sent, or through one of several servers. Refusals are the
// sidecar's word, so this keeps honest sidecars' reports consistent and
// a faulty one's claims in check; against a peer that lies, the limit's
// rate caps its claim (MaxShareWeight).
const MaxAskedWeight = 4

// Allot is the rule for one sidecar: its allowance out of pool, given its
// demand's weight mine and the weight of all (total, mine included), or -1
// when the key is not tight, which is when pool covers Tightness times the
// exposure: the units the sidecars may admit on their local buckets
// within one of their reporting cycles. u is uniform in [0, 1): the share
// is rounded to whole units, up with the probability of its fraction, so
// that a sidecar whose share of a small pool is below one unit still gets
// its share over time.
func Allot(pool, mine, total, exposure, u float64) float64 {
	if total <= 0 || pool >= Tightness*exposure {
		return -1
	}
	return roundRandom(max(0, pool)*mine/total, u)
}

// roundRandom is x in whole units, rounded up with the probability of its
// fraction (u uniform in [0, 1)).
func roundRandom(x, u float64) float64 {
	whole := math.Floor(x)
	if u < x-whole {
		whole++
	}
	return whole
}
