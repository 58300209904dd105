package limiter

import (
	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/config"
)

// withOverride applies a descriptor's per-request limit, already validated
// (validateDescriptor). As in envoyproxy/ratelimit, an override applies
// whenever the domain is configured, matched or not; it keeps a matched
// limit's algorithm, shadow mode and name, and counts on its own key (its
// path says "override" and the window) so it never shares state with the
// configured limit.
//
// The override is held to the rules of config files: past an algorithm's
// own bounds (a sliding_log past algorithm.MaxSlidingLogLimit, which a file
// may not have), it is counted by the sliding window, as the file rule
// advises (refusing the request instead would let Envoy admit it). What it
// reports and counts under is bounded by the config, whatever windows
// requests carry: the matched limit's name, or its path (the domain's when
// unmatched) followed by ".override".
func withOverride(domain string, matched *config.Limit, o Override) *config.Limit {
	l := &config.Limit{Domain: domain, Path: domain}
	if matched != nil {
		*l = *matched
	}
	rl := &l.RateLimit
	rl.Unit, rl.UnitMultiplier = o.Unit, o.Multiplier
	rl.RequestsPerUnit, rl.Burst = o.RequestsPerUnit, o.RequestsPerUnit
	rl.Unlimited = false
	if config.CheckAlgorithm(rl.Algorithm, rl.RequestsPerUnit, rl.Burst) != nil {
		rl.Algorithm = algorithm.SlidingWindow
	}
	if rl.Name == "" {
		rl.Name = l.Path + ".override"
	}
	l.Path += ".override." + rl.Window().String()
	l.Replaces = nil
	return l
}
