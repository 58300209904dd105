package redistest

import (
	"flag"
	"fmt"
	"os"
	"testing"
)

// TestMain skips this package's tests under -short (make unit): every one
// of them starts redis-server, and some check that a missing one fails a
// test, which -short turns into a skip.
func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("redistest: -short: skipped (every test starts redis-server; make test runs them)")
		os.Exit(0)
	}
	os.Exit(m.Run())
}
