package localtier

import (
	"strconv"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/rls"
)

// recordLists are a record call's descriptors and, per descriptor, what
// the call's metadata carries (pkg/rls: limit paths, demand, ages, held
// and denied units) and what its answer needs (keys, spent, gaps): kept in
// step, one add per descriptor.
type recordLists struct {
	descs                     []*ratelimitv3.RateLimitDescriptor
	paths, keys               []string
	spent                     []float64
	gaps                      []int64 // ns between this report of each key and the last
	rates, ages, held, denied []byte
}

func newRecordLists(n int) *recordLists {
	return &recordLists{
		descs: make([]*ratelimitv3.RateLimitDescriptor, 0, n), paths: make([]string, 0, n), keys: make([]string, 0, n),
		spent: make([]float64, 0, n), gaps: make([]int64, 0, n),
		rates: make([]byte, 0, 8*n), ages: make([]byte, 0, 8*n), held: make([]byte, 0, 4*n), denied: make([]byte, 0, 4*n),
	}
}

// add appends one descriptor: d for the key at path, with its demand
// (rate units a second), its newest hit's age (µs), what it held of its
// allowance and the units it denied since its last report.
func (l *recordLists) add(d *ratelimitv3.RateLimitDescriptor, path, key string, spent float64, gap int64, rate float64, age int64, held float64, denied uint64) {
	if len(l.descs) > 0 {
		l.rates, l.ages, l.held, l.denied = append(l.rates, ','), append(l.ages, ','), append(l.held, ','), append(l.denied, ',')
	}
	l.rates = strconv.AppendFloat(l.rates, rate, 'g', 6, 64)
	l.ages = strconv.AppendInt(l.ages, age, 10)
	l.held = strconv.AppendFloat(l.held, held, 'g', 6, 64)
	l.denied = strconv.AppendUint(l.denied, min(denied, limiter.MaxCost), 10)
	l.descs, l.paths, l.keys = append(l.descs, d), append(l.paths, path), append(l.keys, key)
	l.spent, l.gaps = append(l.spent, spent), append(l.gaps, gap)
}

// descriptorOf is e's descriptor recording n hits, or with refund giving
// n back (Envoy's is_negative_hits), as the upstream counts them.
func descriptorOf(e *entry, n uint64, refund bool) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{HitsAddend: wrapperspb.UInt64(n), IsNegativeHits: refund}
	if e.overridden {
		d.Limit = rls.OverrideProto(e.override)
	}
	d.Entries = make([]*ratelimitv3.RateLimitDescriptor_Entry, len(e.entries))
	for j, en := range e.entries {
		d.Entries[j] = &ratelimitv3.RateLimitDescriptor_Entry{Key: en.Key, Value: en.Value}
	}
	return d
}

// calls splits entries into upstream calls: one domain each, at most
// maxPerCall keys and maxCallBytes.
func calls(entries []entry) [][]entry {
	var out [][]entry
	var size []int64
	open := map[string]int{} // domain → index in out of its call being filled
	for _, e := range entries {
		i, ok := open[e.domain]
		if !ok || len(out[i]) == maxPerCall || size[i]+e.size > maxCallBytes {
			i = len(out)
			open[e.domain] = i
			out = append(out, make([]entry, 0, min(maxPerCall, len(entries))))
			size = append(size, 0)
		}
		out[i] = append(out[i], e)
		size[i] += e.size
	}
	return out
}
