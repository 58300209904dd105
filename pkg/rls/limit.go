package rls

import (
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/config"
)

// Params turns a configured limit into the algorithm's parameters.
func Params(r config.RateLimit) algorithm.Params {
	return algorithm.Params{
		Kind:   kind(r.Algorithm),
		Limit:  int64(r.RequestsPerUnit),
		Window: r.Window().Microseconds(),
		Burst:  int64(r.Burst),
	}
}

func kind(a config.Algorithm) algorithm.Kind {
	switch a {
	case config.GCRA:
		return algorithm.GCRA
	case config.SlidingWindow:
		return algorithm.SlidingWindow
	case config.FixedWindow:
		return algorithm.FixedWindow
	case config.SlidingLog:
		return algorithm.SlidingLog
	default:
		return algorithm.TokenBucket
	}
}

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

// withOverride applies an Envoy descriptor's limit override. As in
// envoyproxy/ratelimit, an override applies whenever the domain is
// configured, matched or not; it keeps a matched limit's algorithm,
// shadow mode and name, and counts on its own key (its path says
// "override" and the window) so it never shares state with the
// configured limit.
func withOverride(domain string, matched *config.Limit, o *ratelimitv3.RateLimitDescriptor_RateLimitOverride) *config.Limit {
	unit, _ := overrideUnit(o.GetUnit()) // validated
	mult := uint32(1)
	if m := o.GetUnitMultiplier(); m != nil {
		mult = m.GetValue()
	}
	l := &config.Limit{Domain: domain}
	if matched != nil {
		*l = *matched
	}
	l.RateLimit.Unit = unit
	l.RateLimit.UnitMultiplier = mult
	l.RateLimit.RequestsPerUnit = o.GetRequestsPerUnit()
	l.RateLimit.Burst = o.GetRequestsPerUnit()
	l.RateLimit.Unlimited = false
	l.Path = domain + ".override." + (time.Duration(mult) * unit.Duration()).String()
	if matched != nil {
		l.Path = matched.Path + ".override." + (time.Duration(mult) * unit.Duration()).String()
	}
	l.Replaces = nil
	return l
}
