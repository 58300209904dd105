package rlqs

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// split splits lim among k's members at now, noting it as the rate handed
// out, each share scaled by k's gain, and returns the pokes of the members
// other than self whose new shares are to be pushed, and whether self's
// is. A share is pushed where it moved (moved down, grown up; moved either
// way on self's own answer) by at least pushTokens until the member's next
// report, when its own answer carries it anyway (which carries, too, one
// more than astray from the one in force: worthPushing). Where the shares left as
// they were would admit more than moved of a report interval of the
// split's rate until their members' next reports, the members whose excess
// would admit the most are pushed until they do not. The fleet's mu is
// held.
func (k *fleetKey) split(lim shape, self uint64, now time.Time) (poked []func(string), mine bool) {
	k.handed = lim.rate
	guess := guessOf(k.members, lim)
	ids, all := weights(k.members, guess)
	type above struct {
		m      *member
		id     uint64
		excess float64 // units its share in force admits over its new one until its next report
	}
	var (
		target, excess float64
		kept           []above
	)
	for i, sh := range split(lim.rate, lim.burst, all) {
		id, m := ids[i], k.members[ids[i]]
		sh = lim.fit(sh, len(all))
		sh.Rate *= k.gain.value()
		m.share = sh
		target += sh.Rate
		// Until its next report: self's answer goes now.
		horizon := max(0, m.at.Add(ReportInterval).Sub(now))
		if id == self {
			horizon = ReportInterval
		}
		pushable := id == self || m.poke != nil
		if pushable && (m.sent == 0 || worthPushing(sh.Rate, m.sent, horizon, id == self)) {
			if id == self {
				mine = true
			} else {
				poked = append(poked, m.poke)
			}
			continue
		}
		extra := (m.sent - sh.Rate) * horizon.Seconds() // units, not m.over's seconds
		excess += extra
		if pushable && extra > 0 {
			kept = append(kept, above{m, id, extra})
		}
	}
	if budget := moved * target * ReportInterval.Seconds(); excess > budget {
		slices.SortFunc(kept, func(a, b above) int { return cmp.Compare(b.excess, a.excess) })
		for _, a := range kept {
			if excess <= budget {
				break
			}
			excess -= a.excess
			if a.id == self {
				mine = true
			} else {
				poked = append(poked, a.m.poke)
			}
		}
	}
	return poked, mine
}

// pushTokens is the least a push must move a share by, in tokens over
// the time until its member's next report (whose answer carries the share
// anyway), to be worth it: a changed bucket starts at the old one's ratio
// of tokens rounded down (rlqs-notes §3), half a token lost on average,
// and a hundred Envoys of a request a second, pushed every few
// milliseconds while the first reports came in, admitted 0.39 of an exact
// limiter over seconds 5-10 (0.906-0.911 over the first minute).
const pushTokens = 1

// astray is how far, as a part of it, a member's share may be from the
// one in force before its own answer carries it, however few tokens it
// moves until the next report: a quiet Envoy's share moves less than a
// token a report interval, and the next report's answer would judge it
// so again, leaving it in force for good (0.05 a second where its demand
// said 0.14 for 20 s: 1 of 6 requests admitted).
const astray = 0.25

// worthPushing reports whether a share of rate is to be pushed over one of
// sent with horizon left until its member's next report: it fell by more
// than moved or rose by more than grown (moved, on the member's own
// answer), and by pushTokens over the horizon; or, on its own answer, it
// is more than astray from the one in force.
func worthPushing(rate, sent float64, horizon time.Duration, own bool) bool {
	up := grown
	if own {
		if math.Abs(rate-sent) > astray*sent {
			return true
		}
		up = moved
	}
	return (rate < sent*(1-moved) || rate > sent*(1+up)) && math.Abs(rate-sent)*horizon.Seconds() >= pushTokens
}

// weights is what each member's demand weighs in the split, in the
// order of ids: its demand (guess while unknown) as the fleet's demands
// and its count's noise say it is. A demand is read from whole requests
// over a few seconds (1.5 a second over 5 s is 7.5 give or take 2.7): a
// split by the counts alone handed a hundred even Envoys shares of 0.4 to
// 2 a second, each wasting part of its own. So each known demand is drawn
// toward the known ones' mean by the part of its deviation that a
// Poisson count's noise explains: against how far the demands truly
// spread (the empirical Bayes rule of a Poisson count under a gamma
// prior, its moments the fleet's), or, for a deviation past shrinkNoise
// variances, by those over its square (James-Stein's), whichever is less.
// An even fleet's demands all weigh the mean; a zipf fleet's spread far
// more than their noise, and keep their own (drawn to the mean by
// James-Stein's alone, its quiet Envoys were handed what its busy ones
// lacked: 0.937-0.945 of an exact limiter in the first minute). A
// quiet Envoy still reporting weighs at least a request more than it
// counted (Laplace's rule), up to the mean: its fair part of a limit
// would round down to nothing in a bucket of whole tokens.
func weights(members map[uint64]*member, guess float64) (ids []uint64, all []float64) {
	var known, mean, noise, ss float64
	for _, m := range members {
		if m.demand >= 0 && m.over > 0 {
			mean += m.demand
			known++
		}
	}
	if known > 0 {
		mean /= known
	}
	for _, m := range members {
		if m.demand >= 0 && m.over > 0 {
			dev := m.demand - mean
			ss += dev * dev
			noise += mean / m.over // a Poisson count's variance at the mean, as a rate
		}
	}
	spread := 0.0 // the demands' own variance, their counts' noise taken out
	if known > 1 {
		spread = max(0, ss/(known-1)-noise/known)
	}
	ids, all = make([]uint64, 0, len(members)), make([]float64, 0, len(members))
	for id, m := range members {
		d := m.demandOr(guess)
		if dev := d - mean; m.demand >= 0 && m.over > 0 && known > 1 && dev != 0 {
			v := mean / m.over                              // a Poisson count's variance at the mean, as a rate
			b := min(v/(spread+v), shrinkNoise*v/(dev*dev)) // the part of dev taken for noise
			d = mean + dev*max(0, 1-b)
			d = max(d, min(mean, m.demand+1/m.over))
		}
		ids, all = append(ids, id), append(all, d)
	}
	return ids, all
}

// shrinkNoise is how many variances of its count a member's deviation
// from the mean must pass to keep part of it, however little the fleet's
// demands spread (weights): one Envoy of ten whose demand doubled is not
// noise, though its one deviation barely moves the ten's variance.
const shrinkNoise = 3
