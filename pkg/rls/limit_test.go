package rls

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/config"
)

// TestCurrentLimitWindow: the window read back from a reply's
// current_limit is the configured one, for every unit.
func TestCurrentLimitWindow(t *testing.T) {
	for u := config.UnitSecond; u <= config.UnitYear; u++ {
		for _, mult := range []uint32{0, 1, 5} {
			l := &config.Limit{RateLimit: config.RateLimit{Unit: u, UnitMultiplier: mult, RequestsPerUnit: 3}}
			got, ok := CurrentLimitWindow(newCurrentLimit(l))
			if want := u.Duration() * time.Duration(max(1, mult)); !ok || got != want {
				t.Errorf("%v × %d: window %v, %v; want %v", u, mult, got, ok, want)
			}
		}
	}
	if _, ok := CurrentLimitWindow(nil); ok {
		t.Error("a reply without current_limit has a window")
	}
}

// TestCurrentLimitName: current_limit.name is the config's name, empty
// for a limit the config names none, as the reference sends it (Envoy
// copies it into the X-RateLimit headers it adds, so a generated name
// would show clients the config's internal paths). sluice's own headers
// and metrics keep naming an unnamed limit by its path.
func TestCurrentLimitName(t *testing.T) {
	named := &config.Limit{Path: "edge.client", RateLimit: config.RateLimit{Name: "per-client", Unit: config.UnitSecond, RequestsPerUnit: 3}}
	unnamed := &config.Limit{Path: "edge.key1_value1.subkey1_subvalue1", RateLimit: config.RateLimit{Unit: config.UnitSecond, RequestsPerUnit: 3}}
	if got := newCurrentLimit(named).GetName(); got != "per-client" {
		t.Errorf("named limit: current_limit.name %q; want per-client", got)
	}
	if got := newCurrentLimit(unnamed).GetName(); got != "" {
		t.Errorf("unnamed limit: current_limit.name %q; want empty, as the reference", got)
	}
	if got := unnamed.PolicyName(); got != unnamed.Path {
		t.Errorf("unnamed limit's own name %q; want its path", got)
	}
}
