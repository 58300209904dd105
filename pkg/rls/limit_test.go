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
