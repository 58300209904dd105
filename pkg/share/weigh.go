package share

// weigh returns the weight of sidecar's demand on a key and the total
// weight of all reports, each peer's demand capped at shareCap (units a
// second), and the exposure the tightness test weighs: the units the
// sidecars may admit on their local buckets before their next answers,
// each report's demand over its interval, each peer's capped at tightCap
// units (a cap of 0 or less caps nothing). The reports are few (at most
// MaxSidecars), so the peers are summed by a scan rather than a map.
func weigh(reports []entry, peer, sidecar string, shareCap, tightCap float64) (mine, total, exposure float64) {
	capped := func(sum, c float64) float64 {
		if c > 0 {
			return min(sum, c)
		}
		return sum
	}
	for i := range reports {
		p := reports[i].peer
		first, sum, own, units := true, 0.0, 0.0, 0.0
		for j := range reports {
			x := &reports[j]
			if x.peer != p {
				continue
			}
			if j < i {
				first = false
				break
			}
			sum += x.rate
			units += x.rate * x.interval.Seconds()
			if x.sidecar == sidecar {
				own = x.rate
			}
		}
		if !first {
			continue // this peer was summed at its first report
		}
		total += capped(sum, shareCap)
		exposure += capped(units, tightCap)
		if p == peer && sum > 0 {
			mine = own * capped(sum, shareCap) / sum
		}
	}
	return mine, total, exposure
}

// granted is what the sidecars other than peer's sidecar may still admit
// on their last answers without the store knowing, at now (ns): each one's
// allowance, or what it held of the one before when it reported if more
// (an answer takes a round trip to reach it, and until then it spends
// that), for as long as the allowance may be spent (spendable), and a
// hold on the key while it was loose, for as long as it may run. A sidecar
// that reports again has its hits in the store and a new answer.
//
// Not capped at each one's share of the pool now: on a pool that shrinks
// (a window's end), allowances given of a larger one are still being
// spent, and capping them let three sidecars admit 2 % over an exact
// limiter in the model (model_test.go). Each allowance was at most what
// was free when it was given, so together they never hold back more than
// the pool had.
func granted(reports []entry, peer, sidecar string, now int64) float64 {
	g := 0.0
	for i := range reports {
		x := &reports[i]
		if x.peer == peer && x.sidecar == sidecar {
			continue
		}
		if now-x.at < x.spendable() {
			g += max(x.granted, x.held)
		}
		if now-x.at < x.holding() {
			g += x.hold // kept unrecorded on a loose key (AllotHold)
		}
	}
	return g
}
