package share

import (
	"math"
)

// weigh returns the weight of sidecar's demand on a key and the total
// weight of all reports, each peer's demand capped at shareCap, and the
// demand the tightness test weighs, each peer's capped at tightCap (a cap
// of 0 or less caps nothing). The reports are few (at most MaxSidecars),
// so the peers are summed by a scan rather than a map.
func weigh(reports []entry, peer, sidecar string, shareCap, tightCap float64) (mine, total, demand float64) {
	capped := func(sum, c float64) float64 {
		if c > 0 {
			return min(sum, c)
		}
		return sum
	}
	for i := range reports {
		p := reports[i].peer
		first, sum, own := true, 0.0, 0.0
		for j := range reports {
			if reports[j].peer != p {
				continue
			}
			if j < i {
				first = false
				break
			}
			sum += reports[j].rate
			if reports[j].sidecar == sidecar {
				own = reports[j].rate
			}
		}
		if !first {
			continue // this peer was summed at its first report
		}
		total += capped(sum, shareCap)
		demand += capped(sum, tightCap)
		if p == peer && sum > 0 {
			mine = own * capped(sum, shareCap) / sum
		}
	}
	return mine, total, demand
}

// granted is what the sidecars other than peer's sidecar were allowed at
// their last answers and have not reported since, at now (ns): answered
// within their flush interval, so that their hits may not be in the store
// yet (a sidecar that reports every interval has them there by its next
// report; one asked for a key seldom had its hits recorded long since).
// Each peer's part is capped at its share of pool (its demand capped at
// shareCap, over total): a peer whose many names round up now and then
// holds back no more than its share.
func granted(reports []entry, peer, sidecar string, now int64, pool, total, shareCap float64) float64 {
	g := 0.0
	for i := range reports {
		p := reports[i].peer
		first, sum, demand := true, 0.0, 0.0
		for j := range reports {
			x := &reports[j]
			if x.peer != p {
				continue
			}
			if j < i {
				first = false
				break
			}
			demand += x.rate
			if (x.peer != peer || x.sidecar != sidecar) && now-x.at < max(int64(x.interval), x.gap) {
				sum += x.granted
			}
		}
		if !first || total <= 0 {
			continue
		}
		if shareCap > 0 {
			demand = min(demand, shareCap)
		}
		g += min(sum, math.Ceil(pool*demand/total))
	}
	return g
}
