package limiter

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/config"
)

// TestOverrideNames: Envoy's per-descriptor override applies wherever the
// domain is configured, matched or not, never in an unknown domain; it
// keeps a matched limit's name and shadow mode, reports and counts under
// names the config bounds (the matched limit's name, else its path, or the
// domain's when unmatched, and ".override"), and counts on a key of its
// own, apart from the configured limit's.
func TestOverrideNames(t *testing.T) {
	for _, tt := range []struct {
		name, domain string
		d            descriptor
		policy, path string // "" : no limit applies
		want         string // the second request's codes
	}{
		{"on a configured limit", "edge", desc("api_key", "o"), "per-key", "edge.api_key.override.1h0m0s", "OVER_LIMIT:OVER_LIMIT"},
		{"on an unlimited one", "edge", desc("open", "o"), "edge.open.override", "edge.open.override.1h0m0s", "OVER_LIMIT:OVER_LIMIT"},
		{"on no limit", "edge", desc("unconfigured", "o"), "edge.override", "edge.override.1h0m0s", "OVER_LIMIT:OVER_LIMIT"},
		{"on a shadow limit", "edge", desc("generic_key", "shadowed"), "shadow", "edge.generic_key_shadowed.override.1h0m0s", "OK:OK"},
		{"in an unknown domain", "nope", desc("api_key", "o"), "", "", "OK:OK"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, Options{})
			r := &testRequest{domain: tt.domain, descs: []descriptor{tt.d.overridden(1, config.UnitHour, 1)}}
			a := h.decide(t, r)
			st := a.Statuses[0]
			switch {
			case tt.policy == "" && (st.Limited || st.Limit != nil):
				t.Fatalf("status %+v; want no limit", st)
			case tt.policy == "":
			case !st.Overridden || st.Limit.PolicyName() != tt.policy || st.Limit.Path != tt.path ||
				st.Limit.RateLimit.RequestsPerUnit != 1 || st.Limit.RateLimit.Window() != time.Hour:
				t.Fatalf("limit %+v (overridden %v); want 1/hour named %q at %q", st.Limit, st.Overridden, tt.policy, tt.path)
			}
			if got := verdict(h.decide(t, r)); got != tt.want {
				t.Errorf("second request under a 1/hour override: %s; want %s", got, tt.want)
			}
		})
	}
	// The configured limit keeps its own count.
	h := start(t, Options{})
	o := desc("api_key", "o").overridden(1, config.UnitHour, 1)
	h.decide(t, edge(o))
	h.decide(t, edge(o))
	if st := h.decide(t, edge(desc("api_key", "o"))).Statuses[0]; st.Remaining != 19 || st.Overridden {
		t.Errorf("per-key after two requests under an override: %+v; want 19 left, not overridden", st)
	}
}

// TestOverrideCannotLiftTheSlidingLogCap: an override of 2^32−1 on a
// sliding_log limit, with a cost to match, must neither allocate a log of
// that size nor be waved through: it is decided, as the config's own advice
// for limits past the cap says, by the sliding window.
func TestOverrideCannotLiftTheSlidingLogCap(t *testing.T) {
	h := start(t, Options{Config: configOf(t, `domain: edge
descriptors:
  - key: log
    rate_limit: {unit: hour, requests_per_unit: 10000, algorithm: sliding_log}
`)})
	d := desc("log", "attacker").overridden(1<<32-1, config.UnitHour, 1)
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	a := h.decide(t, edge(d.costing(1<<32-1)))
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Errorf("one request allocated %d MB", grew>>20)
	}
	if verdict(a) != "OK:OK" || a.Statuses[0].Limit.RateLimit.Algorithm != algorithm.SlidingWindow {
		t.Fatalf("%s on %v; want the 2^32−1 hits admitted under a 2^32−1 sliding window", verdict(a), a.Statuses[0].Limit.RateLimit.Algorithm)
	}
	if got := headerMap(a)[HeaderPolicy]; !strings.Contains(got, "q=4294967295;w=3600") {
		t.Errorf("RateLimit-Policy = %q; want the override's quota and window", got)
	}
	// The hits were counted: one more is refused.
	if a := h.decide(t, edge(d.costing(1))); verdict(a) != "OVER_LIMIT:OVER_LIMIT" {
		t.Fatalf("after using the whole override: %s; want OVER_LIMIT", verdict(a))
	}
}

// TestOverrideWindows: the longest window an override may have is
// reported without overflowing (a longer one is a bad request:
// TestBadRequests).
func TestOverrideWindows(t *testing.T) {
	h := start(t, Options{})
	a := h.decide(t, edge(desc("api_key", "w").overridden(5, config.UnitYear, 100)))
	if got, want := headerMap(a)[HeaderPolicy], `;q=5;w=3153600000`; !strings.HasSuffix(got, want) {
		t.Errorf("RateLimit-Policy = %q; want it to end %q", got, want)
	}
	if r := a.Statuses[0].ResetAfter; r <= 0 || r > config.MaxWindow {
		t.Errorf("ResetAfter = %v; want within (0, %v]", r, config.MaxWindow)
	}
}

// TestOverrideOfZeroBlocks: an override of 0 requests blocks, as 0 does
// in a config file, rather than failing the request (which Envoy would
// admit by default), and without a store call.
func TestOverrideOfZeroBlocks(t *testing.T) {
	h := start(t, Options{})
	a := h.decide(t, edge(desc("api_key", "z").overridden(0, config.UnitSecond, 1)))
	if verdict(a) != "OVER_LIMIT:OVER_LIMIT" || h.store.calls.Load() != 0 {
		t.Fatalf("override of 0: %s after %d store calls; want OVER_LIMIT, none", verdict(a), h.store.calls.Load())
	}
}

// TestOverrideSeriesBounded: overrides with many different windows add
// no metric series beyond the limit they override.
func TestOverrideSeriesBounded(t *testing.T) {
	h := start(t, Options{})
	for mult := uint32(1); mult <= 300; mult++ {
		for _, key := range []string{"api_key", "unconfigured"} {
			h.decide(t, edge(desc(key, "s").overridden(5, config.UnitSecond, mult)))
		}
	}
	if n := testutil.CollectAndCount(h.reg, "sluice_decisions_total"); n != 2 {
		t.Fatalf("sluice_decisions_total has %d series after 300 override windows on two descriptors; want 2", n)
	}
}
