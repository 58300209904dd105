package limiter

// Source names what decided a request: the label of
// sluice_tier_decisions_total (the metric keeps its name and its "tier"
// label, which dashboards read), every value declared here. A Decider
// sets Batch.Source; the Service sets its own.
//
// Sources are plain values, safe to share between goroutines.
type Source string

// Decided by the server.
const (
	SourceStore       Source = "store"        // the Decider, when it names no source
	SourceFlagCache   Source = "flag_cache"   // the flag cache, without the Decider
	SourceConfig      Source = "config"       // a limit with requests_per_unit 0, without the Decider
	SourceFailureMode Source = "failure_mode" // StoreDecider's failure mode, the store unavailable
	SourceShed        Source = "shed"         // StoreDecider's local answer, this process too slow for the store's
)

// Decided by a local tier (pkg/localtier: the sidecar, cached mode).
const (
	SourceLocalBucket Source = "local_bucket" // its local bucket refused, the global limit not asked
	SourceAllowance   Source = "allowance"    // async: its share of a tight key spent
	SourceGlobal      Source = "global"       // the upstream's answer
	SourceSlow        Source = "slow"         // sync: the upstream answers, but not this call in time
	SourceFallback    Source = "fallback"     // the upstream is gone
)

// Sources lists every source, in the order the metric's help gives them.
func Sources() []Source {
	return []Source{SourceFlagCache, SourceStore, SourceShed, SourceFailureMode, SourceConfig,
		SourceLocalBucket, SourceAllowance, SourceGlobal, SourceSlow, SourceFallback}
}

// sourceList is the sources, comma-separated, for the metric's help.
func sourceList() string {
	var b []byte
	for i, s := range Sources() {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, s...)
	}
	return string(b)
}

// Deprecated aliases of the Source constants, for one release.
const (
	TierStore       = SourceStore
	TierFlagCache   = SourceFlagCache
	TierConfig      = SourceConfig
	TierFailureMode = SourceFailureMode
	TierShed        = SourceShed
)
