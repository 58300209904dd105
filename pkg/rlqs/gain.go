package rlqs

import (
	"math"
	"time"
)

// gain scales a key's shares by how much of them its Envoys turn into
// admissions. An Envoy's token bucket fed at random wastes part of its
// share: it is full when a lull comes, and empty when requests bunch. A
// share of a request or two a second in a bucket of minTokens, asked for
// 1.5 times as much at random, admits 0.8 of itself, and a hundred Envoys
// on a limit of 100 a second admitted 0.79-0.90 of an exact limiter. So
// where a key's Envoys ask for more than its rate and admit less, the
// shares grow until what they admit is the rate: by gainBeta of the
// shortfall (as a power) each report interval, since their admissions are
// known only from their reports (over the last three of each: a quicker
// measure, or all of the shortfall at once, made the gain swing, and each
// swing pushes every Envoy a new bucket), within gainMax, and in steps of
// gainStep, since a new share costs an Envoy its bucket's part of a token.
// Where they ask for less, the gain falls back to 1, halving its excess
// each report interval. A flooded fleet admits what it is handed, so its
// gain stays 1; a jump in its demand (by jump) takes the gain back to 1 at
// once, since the waste it made up for is no longer known (a flood on
// shares grown 1.3 times admitted 1.08 of an exact limiter over the next
// minute without it).
type gain struct {
	g    float64 // the gain in force; 0 is 1
	want float64 // the gain the admissions ask for; 0 is 1
	at   time.Time
	load float64 // the members' demand over their rate when it was last steered
}

const (
	gainBeta = 0.5
	gainMax  = 1.5
	gainStep = 0.05
	// gainBind is how far a key's demand must exceed its rate for the
	// shares to bind: past whole-request counting noise.
	gainBind = 1.1
	jump     = 1.5
)

// value is the gain in force.
func (c *gain) value() float64 {
	if c.g == 0 {
		return 1
	}
	return c.g
}

// steer moves k's gain at now by its members' demand and admissions, at
// most once a report interval: the members whose demand is known, against
// their part of the rate last handed out. The fleet's mu is held.
func (k *fleetKey) steer(now time.Time) {
	c := &k.gain
	rate := k.handed
	if rate == 0 {
		rate = k.lim.rate
	}
	var demand, used, part, all float64
	for _, m := range k.members {
		all += m.share.Rate
		if m.demand < 0 || m.used < 0 {
			continue
		}
		demand += m.demand
		used += m.used
		part += m.share.Rate
	}
	if all > 0 {
		rate *= part / all
	}
	if rate <= 0 || part < all/2 {
		// Steered on the members holding most of the shares: one
		// Envoy's count of a few seconds says little of a fleet's waste.
		return
	}
	// The load: the demand of the members known against their part of
	// the rate, which stays as it was while more of a fleet's members
	// become known (their demand summed alone rose with each first report,
	// read as a jump, and a hundred Envoys from cold had their gain and
	// buckets reset in their sixth second).
	load := demand / rate
	if load > jump*c.load && c.g > 1 {
		// A new demand: the waste the gain made up for is not known.
		c.g, c.want, c.at, c.load = 1, 1, now, load
		return
	}
	if !c.at.IsZero() && now.Sub(c.at) < ReportInterval {
		return
	}
	c.at, c.load = now, load
	want := max(c.want, 1)
	if demand >= gainBind*rate && used > 0 {
		want *= math.Pow(rate/used, gainBeta)
	} else if want = 1 + (want-1)/2; want < 1+gainStep {
		want = 1
	}
	c.want = min(max(want, 1), gainMax)
	if g := c.value(); math.Abs(c.want-g) >= gainStep*g || c.want == 1 {
		c.g = c.want
	}
}
