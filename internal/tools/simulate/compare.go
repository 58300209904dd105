package simulate

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/pkg/config"
)

// Comparison is where two runs of one trace decided differently, per limit.
type Comparison struct {
	A      string            `json:"a"` // the runs' algorithms
	B      string            `json:"b"`
	Limits []LimitComparison `json:"limits"` // the limits the trace matched, in config order
	Total  LimitComparison   `json:"total"`  // over every matched request
}

// LimitComparison counts one limit's disagreements. The percentages are of
// the limit's offered requests.
type LimitComparison struct {
	Path    string `json:"path"`
	Offered int64  `json:"offered"`
	// OnlyA counts requests A admitted and B rejected; OnlyB the reverse.
	OnlyA        int64   `json:"only_a"`
	OnlyB        int64   `json:"only_b"`
	OnlyAPercent float64 `json:"only_a_percent"`
	OnlyBPercent float64 `json:"only_b_percent"`
}

// Compare counts, per limit, the requests that runs a and b decided
// differently. Both must be runs of the same trace on the same config
// (Run with two Unders, or RunBoth): each algorithm then saw the same
// offered requests, each with its own state, so a disagreement includes
// the knock-on effects of an earlier one (a request one admitted and the
// other did not leaves them with different allowances).
func Compare(a, b *Result) (*Comparison, error) {
	if a == nil || b == nil {
		return nil, errors.New("simulate: compare: missing result")
	}
	if a.Domain != b.Domain || a.trace != b.trace || len(a.decisions) != len(b.decisions) || len(a.Limits) != len(b.Limits) {
		return nil, fmt.Errorf("simulate: compare: runs of different traces or configs (%s: %d requests, %d limits; %s: %d requests, %d limits)",
			a.Algorithm, len(a.decisions), len(a.Limits), b.Algorithm, len(b.decisions), len(b.Limits))
	}
	per := make([]LimitComparison, len(a.Limits))
	for i := range per {
		if a.Limits[i].Path != b.Limits[i].Path {
			return nil, fmt.Errorf("simulate: compare: limit %d is %s in one run and %s in the other", i, a.Limits[i].Path, b.Limits[i].Path)
		}
		per[i].Path = a.Limits[i].Path
	}
	c := &Comparison{A: a.Algorithm, B: b.Algorithm, Total: LimitComparison{Path: "total"}}
	for i, da := range a.decisions {
		db := b.decisions[i]
		if da.limit != db.limit {
			return nil, fmt.Errorf("simulate: compare: request %d matched different limits: runs of different traces", i)
		}
		if da.limit < 0 {
			continue
		}
		lc := &per[da.limit]
		lc.Offered++
		switch {
		case da.admitted && !db.admitted:
			lc.OnlyA++
		case db.admitted && !da.admitted:
			lc.OnlyB++
		}
	}
	for _, lc := range per {
		if lc.Offered == 0 {
			continue
		}
		c.Total.Offered += lc.Offered
		c.Total.OnlyA += lc.OnlyA
		c.Total.OnlyB += lc.OnlyB
		c.Limits = append(c.Limits, lc.withPercents())
	}
	c.Total = c.Total.withPercents()
	return c, nil
}

func (lc LimitComparison) withPercents() LimitComparison {
	lc.OnlyAPercent = percent(lc.OnlyA, lc.Offered)
	lc.OnlyBPercent = percent(lc.OnlyB, lc.Offered)
	return lc
}

func percent(n, of int64) float64 {
	if of == 0 {
		return 0
	}
	return 100 * float64(n) / float64(of)
}

// RunBoth runs trace under a and under b, each with its own state, and
// compares them.
func RunBoth(cfg *config.Config, trace []Request, opts Options, a, b Under) (ra, rb *Result, c *Comparison, err error) {
	opts.Under = a
	if ra, err = Run(cfg, trace, opts); err != nil {
		return nil, nil, nil, err
	}
	opts.Under = b
	if rb, err = Run(cfg, trace, opts); err != nil {
		return nil, nil, nil, err
	}
	c, err = Compare(ra, rb)
	return ra, rb, c, err
}
