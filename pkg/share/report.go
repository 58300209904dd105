package share

import "time"

// Limit is what the Tracker needs to know of a limit to weigh its
// demand. A plain value, safe to share between goroutines.
type Limit struct {
	// Rate is its refill in units per second; Capacity the most it
	// admits at once (algorithm.Capacity). Zero caps nothing.
	Rate, Capacity float64
}

// Report is one sidecar's report for one key.
//
// A plain value, safe to copy and to share between goroutines.
type Report struct {
	// Peer is who the server knows the sidecar as (the name its client
	// certificate or token carries; "" when every caller is trusted): two
	// sidecars of different peers never share an identity, whatever they
	// claim.
	Peer string
	// Sidecar names the sidecar, the same in every report it makes.
	Sidecar string
	// Rate is the units it was asked for per second since its last report.
	Rate float64
	// Interval is how often it says it reports: how long it decides on one
	// answer before the next reaches it (pkg/localtier states its flush
	// interval, or its flushes' actual cycle plus a round trip if longer).
	Interval time.Duration
	// Held is what it still held of its last allowance for the key when it
	// took the report's hits, which it may spend until this report's
	// answer reaches it (0: none, or a sidecar that does not say).
	Held float64
	// Asked is the units it was asked for since its last report: the hits
	// the report records and those it refused (MaxAskedWeight).
	Asked float64
	// Hold is how long it may keep a loose key's hits before recording
	// them, when an answer gives it units to (Tracker.AllotHold); 0: it
	// records every key every interval.
	Hold time.Duration
}

// MaxAsked bounds Report.Asked: MaxRate for MaxInterval.
const MaxAsked = MaxRate * float64(MaxInterval/time.Second)

// rate is what r's Rate weighs when its sidecar's last report of the key
// came gap ns before it (0: unknown): capped by what backs it (Asked).
func (r Report) rate(gap int64) float64 {
	over := r.Interval
	if gap > 0 {
		over = min(over, time.Duration(gap))
	}
	return min(r.Rate, MaxAskedWeight*r.Asked/over.Seconds())
}

// Valid reports whether r is within the bounds.
func (r Report) Valid() bool {
	return r.Sidecar != "" && len(r.Sidecar) <= MaxSidecarID && len(r.Peer) <= MaxPeer &&
		r.Interval >= MinInterval && r.Interval <= MaxInterval &&
		r.Rate >= 0 && r.Rate <= MaxRate && // NaN fails both
		r.Held >= 0 && r.Held <= MaxRate &&
		r.Asked >= 0 && r.Asked <= MaxAsked &&
		r.Hold >= 0 && r.Hold <= MaxHold
}
