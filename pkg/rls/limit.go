package rls

import (
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/config"
)

// overrideUnit maps the unit of an Envoy limit override to ours
// (envoy.type.v3.RateLimitUnit has no week).
func overrideUnit(u typev3.RateLimitUnit) (config.Unit, bool) {
	switch u {
	case typev3.RateLimitUnit_SECOND:
		return config.UnitSecond, true
	case typev3.RateLimitUnit_MINUTE:
		return config.UnitMinute, true
	case typev3.RateLimitUnit_HOUR:
		return config.UnitHour, true
	case typev3.RateLimitUnit_DAY:
		return config.UnitDay, true
	case typev3.RateLimitUnit_MONTH:
		return config.UnitMonth, true
	case typev3.RateLimitUnit_YEAR:
		return config.UnitYear, true
	}
	return 0, false
}

// responseUnit maps our unit to the one a reply's current_limit carries.
func responseUnit(u config.Unit) rlsv3.RateLimitResponse_RateLimit_Unit {
	switch u {
	case config.UnitSecond:
		return rlsv3.RateLimitResponse_RateLimit_SECOND
	case config.UnitMinute:
		return rlsv3.RateLimitResponse_RateLimit_MINUTE
	case config.UnitHour:
		return rlsv3.RateLimitResponse_RateLimit_HOUR
	case config.UnitDay:
		return rlsv3.RateLimitResponse_RateLimit_DAY
	case config.UnitWeek:
		return rlsv3.RateLimitResponse_RateLimit_WEEK
	case config.UnitMonth:
		return rlsv3.RateLimitResponse_RateLimit_MONTH
	case config.UnitYear:
		return rlsv3.RateLimitResponse_RateLimit_YEAR
	}
	return rlsv3.RateLimitResponse_RateLimit_UNKNOWN
}

// CurrentLimitWindow is the window a reply's current_limit describes (its
// unit times its multiplier), or false when its unit is not one of ours.
func CurrentLimitWindow(cl *rlsv3.RateLimitResponse_RateLimit) (time.Duration, bool) {
	for u := config.UnitSecond; u <= config.UnitYear; u++ {
		if responseUnit(u) == cl.GetUnit() {
			return u.Duration() * time.Duration(max(1, cl.GetUnitMultiplier().GetValue())), true
		}
	}
	return 0, false
}

// overrideMultiplier is an override's unit multiplier: unset means 1.
func overrideMultiplier(o *ratelimitv3.RateLimitDescriptor_RateLimitOverride) uint32 {
	if m := o.GetUnitMultiplier(); m != nil {
		return m.GetValue()
	}
	return 1
}

// withOverride applies an Envoy descriptor's limit override, already
// validated (validateDescriptor). As in envoyproxy/ratelimit, an override
// applies whenever the domain is configured, matched or not; it keeps a
// matched limit's algorithm, shadow mode and name, and counts on its own
// key (its path says "override" and the window) so it never shares state
// with the configured limit.
//
// The override is held to the rules of config files: a sliding_log past
// config.MaxSlidingLogLimit, which a file may not have, is counted by the
// sliding window, as the file rule advises (refusing the request instead
// would let Envoy admit it). What it reports and counts under is bounded by
// the config, whatever windows requests carry: the matched limit's name, or
// its path (the domain's when unmatched) followed by ".override".
func withOverride(domain string, matched *config.Limit, o *ratelimitv3.RateLimitDescriptor_RateLimitOverride) *config.Limit {
	unit, _ := overrideUnit(o.GetUnit())
	mult := overrideMultiplier(o)
	l := &config.Limit{Domain: domain, Path: domain}
	if matched != nil {
		*l = *matched
	}
	rl := &l.RateLimit
	rl.Unit, rl.UnitMultiplier = unit, mult
	rl.RequestsPerUnit, rl.Burst = o.GetRequestsPerUnit(), o.GetRequestsPerUnit()
	rl.Unlimited = false
	if config.CheckAlgorithm(rl.Algorithm, rl.RequestsPerUnit, rl.Burst) != nil {
		// Past the algorithm's own bounds (a sliding log's cap): the
		// sliding window counts any limit.
		rl.Algorithm = algorithm.SlidingWindow
	}
	if rl.Name == "" {
		rl.Name = l.Path + ".override"
	}
	l.Path += ".override." + rl.Window().String()
	l.Replaces = nil
	return l
}
