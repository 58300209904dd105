package server

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/console"
)

// benchAdmin is a server whose config has 1,000 limits, each of which
// refused 64 distinct keys, and its admin routes.
func benchAdmin(b *testing.B) (*adminClock, http.Handler) {
	b.Helper()
	clock := &adminClock{}
	s, h := adminServer(b, 1000, clock)
	for l := range 1000 {
		for k := range 64 {
			s.top.Refused(fmt.Sprint("limit-", l), fmt.Sprintf("remote_address=10.0.%d.%d", l%256, k))
		}
	}
	return clock, h
}

// BenchmarkAdminPage is one load of the admin page's main part, as its
// script refreshes it: rendered afresh each time (the clock moves past
// console.MaxAge between loads), and shared with the loads before it.
func BenchmarkAdminPage(b *testing.B) {
	benchAdminPath(b, "/?part=main")
}

// BenchmarkDebugTop is one load of /debug/top, rendered afresh or shared.
func BenchmarkDebugTop(b *testing.B) {
	benchAdminPath(b, "/debug/top")
}

func benchAdminPath(b *testing.B, path string) {
	for _, fresh := range []bool{true, false} {
		name := "shared"
		if fresh {
			name = "rendered"
		}
		b.Run(name, func(b *testing.B) {
			clock, h := benchAdmin(b)
			b.ReportAllocs()
			for b.Loop() {
				if fresh {
					clock.ns.Add(int64(console.MaxAge + time.Millisecond))
				}
				adminGet(b, h, path)
			}
		})
	}
}
