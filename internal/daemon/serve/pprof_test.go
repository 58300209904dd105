package serve

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// TestProfileHidesCommandLine: -pprof serves the profiles but not
// /debug/pprof/cmdline, which prints the process's arguments, a
// -redis-url's password among them (the finding).
func TestProfileHidesCommandLine(t *testing.T) {
	mux := http.NewServeMux()
	Profile(mux)
	get := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		return rec
	}
	if rec := get("/debug/pprof/cmdline"); rec.Code == http.StatusOK || strings.Contains(rec.Body.String(), os.Args[0]) {
		t.Errorf("GET /debug/pprof/cmdline = %d %q; want it not served", rec.Code, rec.Body)
	}
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/goroutine"} {
		if rec := get(path); rec.Code != http.StatusOK {
			t.Errorf("GET %s = %d; want 200", path, rec.Code)
		}
	}
}
