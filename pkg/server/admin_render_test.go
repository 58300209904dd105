package server

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/pkg/console"
)

// adminClock is a clock the test moves.
type adminClock struct{ ns atomic.Int64 }

func (c *adminClock) now() time.Time { return time.Unix(0, c.ns.Load()) }

// adminServer is a server on a config of limits limits (limit-0...), its
// admin routes on clock.
func adminServer(tb testing.TB, limits int, clock *adminClock) (*Server, http.Handler) {
	tb.Helper()
	var cfg strings.Builder
	cfg.WriteString("domain: edge\ndescriptors:\n")
	for i := range limits {
		fmt.Fprintf(&cfg, "  - key: k%d\n    rate_limit: {name: limit-%d, unit: second, requests_per_unit: 1}\n", i, i)
	}
	path := filepath.Join(tb.TempDir(), "limits.yaml")
	if err := os.WriteFile(path, []byte(cfg.String()), 0o600); err != nil {
		tb.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	s, err := newServer(Options{Config: path, Registerer: reg})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	clock.ns.Store(time.Now().UnixNano())
	return s, s.Admin(reg, AdminOptions{Now: clock.now})
}

func adminGet(tb testing.TB, h http.Handler, path string) string {
	tb.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	if rec.Code != http.StatusOK {
		tb.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
	}
	return rec.Body.String()
}

// TestAdminViewsShared: the admin page and /debug/top are rendered once
// per console.MaxAge and shared by every viewer meanwhile: a refusal
// counted after a rendering shows to no viewer until MaxAge has passed,
// then to all.
func TestAdminViewsShared(t *testing.T) {
	clock := &adminClock{}
	s, h := adminServer(t, 3, clock)
	s.top.Refused("limit-0", "k0=first")
	paths := []string{"/", "/?part=main", "/debug/top", "/debug/top?n=5"}
	first := map[string]string{}
	for _, p := range paths {
		first[p] = adminGet(t, h, p)
		if !strings.Contains(first[p], "k0=first") {
			t.Fatalf("GET %s lacks the first refusal", p)
		}
	}
	s.top.Refused("limit-0", "k0=second")
	var wg sync.WaitGroup
	for v := range 64 {
		wg.Go(func() {
			p := paths[v%len(paths)]
			if got := adminGet(t, h, p); got != first[p] {
				t.Errorf("viewer %d, within MaxAge: GET %s was rendered again", v, p)
			}
		})
	}
	wg.Wait()
	clock.ns.Add(int64(console.MaxAge))
	for _, p := range paths {
		if got := adminGet(t, h, p); !strings.Contains(got, "k0=second") {
			t.Errorf("after MaxAge: GET %s lacks the second refusal", p)
		}
	}
}

// TestAdminPageListsBusiest: the page lists the keys of the limits that
// refused most, at most console.MaxTopLimits of them, and says how many
// more refused.
func TestAdminPageListsBusiest(t *testing.T) {
	clock := &adminClock{}
	s, h := adminServer(t, 30, clock)
	for l := range 30 {
		for k := range l + 1 {
			s.top.Refused(fmt.Sprint("limit-", l), fmt.Sprint("k", l, "=", k))
		}
	}
	page := adminGet(t, h, "/")
	if n := strings.Count(page, `class="toplimit"`); n != console.MaxTopLimits {
		t.Errorf("%d limits listed; want %d", n, console.MaxTopLimits)
	}
	if !strings.Contains(page, `data-limit="limit-29"`) || strings.Contains(page, `data-limit="limit-9"`) {
		t.Error("the limits listed are not those that refused most")
	}
	if !strings.Contains(page, "10 more refused") {
		t.Error("the page does not say how many more limits refused")
	}
	if n := strings.Count(page, `class="topkey"`); n != console.MaxTopLimits*console.MaxTopKeys {
		t.Errorf("%d keys listed; want %d", n, console.MaxTopLimits*console.MaxTopKeys)
	}
}

// newServer is a server on its own store, as the server daemon without
// Redis assembles it.
func newServer(o Options) (*Server, error) {
	p, err := NewParts(o)
	if err != nil {
		return nil, err
	}
	return New(p, nil)
}
