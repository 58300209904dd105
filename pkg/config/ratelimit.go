package config

import (
	"fmt"

	"github.com/sluicehq/sluice/pkg/algorithm"
)

// rateLimit reads and checks a rate_limit block. Beyond the reference's
// checks (a known unit unless unlimited; replaces entries named and not the
// limit itself) it rejects what would make a limit meaningless or unsafe for
// an algorithm: a zero limit or window, options given to an unlimited limit,
// burst where no algorithm reads it, and sliding logs too large to keep.
func (w *walker) rateLimit(block field) (RateLimit, []string, error) {
	rl := RateLimit{UnitMultiplier: 1}
	fs, err := w.fields(block.val, "rate_limit", rateLimitFields, 0)
	if err != nil {
		return rl, nil, err
	}
	set := func(name string) (field, bool) {
		f, ok := fs[name]
		return f, ok && isSet(f.val)
	}
	if f, ok := set("name"); ok {
		if rl.Name, err = w.label(f.val, "name"); err != nil {
			return rl, nil, err
		}
	}
	if f, ok := set("unlimited"); ok {
		if rl.Unlimited, err = w.boolean(f.val, "unlimited"); err != nil {
			return rl, nil, err
		}
	}
	replaces, err := w.replaces(fs, rl.Name)
	if err != nil {
		return rl, nil, err
	}

	if rl.Unlimited {
		// The reference rejects only a unit here; sluice rejects every field
		// that would otherwise be silently ignored.
		for _, name := range []string{"unit", "requests_per_unit", "algorithm", "burst", "unit_multiplier", "count_refused", "calendar", "holder"} {
			if f, ok := set(name); ok {
				return rl, nil, w.errorf(f.key, "unlimited: true cannot be combined with %s", name)
			}
		}
		return rl, replaces, nil
	}

	f, ok := set("unit")
	if !ok {
		return rl, nil, w.errorf(block.key, "rate_limit needs a unit (second, minute, hour, day, week, month or year) or unlimited: true")
	}
	s, err := w.str(f.val, "unit")
	if err != nil {
		return rl, nil, err
	}
	if rl.Unit, err = ParseUnit(s); err != nil {
		return rl, nil, w.errorf(f.val, "%v", err)
	}

	f, ok = set("requests_per_unit")
	if !ok {
		return rl, nil, w.errorf(block.key, "rate_limit needs requests_per_unit or unlimited: true")
	}
	rpu := f.val
	if rl.RequestsPerUnit, err = w.integer(rpu, "requests_per_unit"); err != nil {
		return rl, nil, err
	}
	// requests_per_unit: 0 is the reference's "deny everything" (see
	// RateLimit.Blocks); the algorithms never see it.

	if f, ok := set("algorithm"); ok {
		s, err := w.str(f.val, "algorithm")
		if err != nil {
			return rl, nil, err
		}
		if rl.Algorithm, err = algorithm.ParseKind(s); err != nil {
			if len(s) > MaxQuotedBytes { // ParseKind quotes it whole
				err = fmt.Errorf("unknown algorithm %s", Quote(s))
			}
			return rl, nil, w.errorf(f.val, "%v", err)
		}
		rl.AlgorithmSet = true
	}

	if f, ok := set("count_refused"); ok {
		if rl.CountRefused, err = w.boolean(f.val, "count_refused"); err != nil {
			return rl, nil, err
		}
	}
	if f, ok := set("holder"); ok {
		if rl.Holder, err = w.boolean(f.val, "holder"); err != nil {
			return rl, nil, err
		}
	}
	if rl.Algorithm == algorithm.Concurrency {
		switch {
		case !rl.Holder:
			return rl, nil, w.errorf(block.key, "algorithm: concurrency needs holder: true on a descriptor whose value names each request (x-request-id, say): a refund frees its own request's units, and without a name no refund can be matched to what it settles")
		case rl.CountRefused:
			return rl, nil, w.errorf(fs["count_refused"].key, "count_refused does not apply to concurrency: a refused request holds nothing")
		}
	} else if rl.Holder {
		return rl, nil, w.errorf(fs["holder"].key, "holder applies only to algorithm: concurrency, not %s", rl.Algorithm)
	}
	if f, ok := set("unit_multiplier"); ok {
		if rl.UnitMultiplier, err = w.integer(f.val, "unit_multiplier"); err != nil {
			return rl, nil, err
		}
		if err := CheckWindow(rl.Unit, rl.UnitMultiplier); err != nil {
			return rl, nil, w.errorf(f.val, "%v", err)
		}
	}

	if f, ok := set("calendar"); ok {
		zone, err := w.str(f.val, "calendar")
		if err != nil {
			return rl, nil, err
		}
		if rl.Calendar, err = LoadZone(zone); err != nil {
			return rl, nil, w.errorf(f.val, "%v", err)
		}
		if rl.Algorithm != algorithm.FixedWindow || rl.UnitMultiplier != 1 {
			return rl, nil, w.errorf(f.key, "calendar applies to algorithm: fixed_window with no unit_multiplier (its windows are the calendar's)")
		}
	}
	rl.Burst = rl.RequestsPerUnit
	if f, ok := set("burst"); ok {
		if !rl.Algorithm.HasBurst() {
			return rl, nil, w.errorf(f.key, "burst applies only to token_bucket and gcra, not %s", rl.Algorithm)
		}
		if rl.Burst, err = w.integer(f.val, "burst"); err != nil {
			return rl, nil, err
		}
		if rl.Burst < 1 {
			return rl, nil, w.errorf(f.val, "burst must be at least 1")
		}
	}

	if err := CheckAlgorithm(rl.Algorithm, rl.RequestsPerUnit, rl.Burst); err != nil {
		return rl, nil, w.errorf(rpu, "%v", err)
	}
	return rl, replaces, nil
}

// replaces reads the `replaces` list: names of limits that this one
// replaces when both match one request.
func (w *walker) replaces(fs map[string]field, self string) ([]string, error) {
	f, ok := fs["replaces"]
	if !ok {
		return nil, nil
	}
	items, err := w.seq(f.val, "replaces")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, item := range items {
		rf, err := w.fields(item, "replaces entry", replacesFields, 0)
		if err != nil {
			return nil, err
		}
		var name string
		if nf, ok := rf["name"]; ok {
			if name, err = w.label(nf.val, "name"); err != nil {
				return nil, err
			}
		}
		if name == "" {
			return nil, w.errorf(item, "replaces entry has no name")
		}
		if name == self {
			return nil, w.errorf(item, "a limit cannot replace itself (%s)", Quote(name))
		}
		names = append(names, name)
	}
	return names, nil
}

// String describes the limit as a config file would, for logs and `check`.
func (r RateLimit) String() string {
	if r.Unlimited {
		return "unlimited"
	}
	unit := r.Unit.String()
	if r.UnitMultiplier > 1 {
		unit = fmt.Sprintf("%d %ss", r.UnitMultiplier, unit) // "5 minutes"
	}
	s := fmt.Sprintf("%d per %s, %s", r.RequestsPerUnit, unit, r.Algorithm)
	if r.HasBurst() && r.Burst != r.RequestsPerUnit {
		s += fmt.Sprintf(", burst %d", r.Burst)
	}
	return s
}
