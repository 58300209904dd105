package simulate

import (
	"encoding/binary"
	"errors"
	"strings"

	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// Request is one offered request of a trace: a single descriptor, to keep
// traces simple (Envoy may send several; each is decided on its own limit
// anyway).
type Request struct {
	// Time is when the request arrives, in microseconds. Traces from files
	// use the Unix epoch; generated ones start at zero. Fixed and sliding
	// windows are aligned on multiples of the window from time zero, as the
	// server aligns them on the epoch.
	Time int64
	// Entries are the descriptor's key=value entries, in order.
	Entries []config.Entry
	// Cost is the request's hits_addend; zero means 1, as it does for
	// Envoy's request-level hits_addend.
	Cost int64
	// Duration is how long the request ran, in microseconds (0: not known,
	// taken as instant): what a concurrency limit (algorithm: concurrency,
	// or Options.Concurrency) holds a slot for.
	Duration int64
	// Refund is the units the request gives back when it ends, at most its
	// cost: a reservation settled at stream end (Envoy's is_negative_hits),
	// what it reserved and did not use.
	Refund int64
}

// cost is what the request consumes.
func (r Request) cost() int64 {
	if r.Cost == 0 {
		return 1
	}
	return r.Cost
}

// Under selects the algorithm a run decides with: each limit's configured
// algorithm (the zero value, Configured), or one algorithm for every limit
// (Override), so that two algorithms can be compared on one trace.
type Under struct {
	alg      algorithm.Kind
	override bool
}

// Configured decides each limit with the algorithm its config names.
var Configured = Under{}

// Override decides every limit with a, keeping each limit's rate, window
// and burst. Window algorithms ignore burst; a limit overridden to
// token_bucket or gcra gets the burst its config resolved, which is
// requests_per_unit unless the file set one.
func Override(a algorithm.Kind) Under { return Under{alg: a, override: true} }

// ParseUnder reads an algorithm name, or "" or "configured" for Configured.
func ParseUnder(s string) (Under, error) {
	if s == "" || strings.EqualFold(s, "configured") {
		return Configured, nil
	}
	a, err := algorithm.ParseKind(s)
	if err != nil {
		return Configured, err
	}
	if a == algorithm.Concurrency {
		return Configured, errors.New("concurrency counts requests in flight, not a rate: no limit of another algorithm can be replayed as one")
	}
	return Override(a), nil
}

// String returns the algorithm's name, or "configured".
func (u Under) String() string {
	if !u.override {
		return "configured"
	}
	return u.alg.String()
}

// apply returns r as this run decides it: a concurrency limit as it is,
// since it counts requests in flight, not a rate.
func (u Under) apply(r config.RateLimit) config.RateLimit {
	if u.override && !r.Unlimited && r.Algorithm != algorithm.Concurrency {
		r.Algorithm = u.alg
	}
	return r
}

// appendStateKey appends the name of one key's state: the domain, the
// limit's path and the request's entries (values counted as the server
// counts them, limiter.EntryValue), each length-prefixed so that no
// choice of values can make two keys collide (entries "a=b;c" and "a=b",
// "c=…" stay apart, unlike a joined string).
func appendStateKey(dst []byte, domain, path string, entries []config.Entry) []byte {
	part := func(s string) {
		dst = binary.AppendUvarint(dst, uint64(len(s)))
		dst = append(dst, s...)
	}
	part(domain)
	part(path)
	for _, e := range entries {
		part(e.Key)
		part(limiter.EntryValue(e.Value))
	}
	return dst
}
