package localtier

// Holds (pkg/share: loose keys held): a key far from its limit need not
// be recorded every flush interval. With its answer on such a key the
// upstream gives the sidecar a hold: the units of the key it may keep
// unrecorded, its share of share.HoldShare of what the key has left. The
// key's next hits then stay pending (pending.drain) until they pass the
// hold, a request for the key is refused, a refund comes,
// Options.LooseHold has gone by since the first of them, or the pending
// buffer is half full; then they are recorded with
// the next flush, and the answer gives the next hold. A key whose answer
// gives none, or an allowance (the key is tight), is recorded every flush
// interval again, from its next new hits.

// setHold keeps the hold the upstream answered key with (holds[i], units)
// for its next hits: on a loose key (units < 0), a hold of a unit or
// more; anything else drops the key's hold.
func (t *Tier) setHold(key string, units float64, holds []float64, i int) {
	if t.opts.LooseHold <= 0 {
		return
	}
	if units < 0 && holds != nil && holds[i] >= 1 {
		t.holds.Update(key, func(h *float64, _ bool) int64 { *h = holds[i]; return 0 })
		return
	}
	t.holds.Delete(key)
}

// holdOf is the hold key's next pending hits are kept under (0: none).
func (t *Tier) holdOf(key string) float64 {
	h := 0.0
	t.holds.Get(key, func(v *float64) { h = *v })
	return h
}
