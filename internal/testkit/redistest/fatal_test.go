package redistest

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// fatalRecorder is a testing.TB whose Fatalf records the message and ends
// the calling goroutine, as the real one does. Fatalf is the only way the
// helpers fail a test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// fatalMessage runs fn with a fatalRecorder and returns what it failed with.
func fatalMessage(t *testing.T, fn func(testing.TB)) string {
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(rec)
	}()
	<-done
	return rec.msg
}

func TestFatal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		fn   func(testing.TB)
		want []string
	}{{
		name: "missing binary",
		fn:   func(t testing.TB) { lookBinary(t, "redis-server-not-installed") },
		want: []string{"redis-server-not-installed", "./scripts/install-test-deps.sh", "apt-get install redis-server redis-tools redis-sentinel"},
	}, {
		name: "bad argument",
		fn:   func(t testing.TB) { Start(t, WithArgs("--no-such-directive", "1")) },
		want: []string{"exited before answering", "--- log ---", "no-such-directive"},
	}, {
		name: "too few masters",
		fn:   func(t testing.TB) { StartCluster(t, 2) },
		want: []string{"StartCluster(2)", "at least 3"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			msg := fatalMessage(t, tc.fn)
			if msg == "" {
				t.Fatal("no Fatalf; want a failure (never a skip)")
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("Fatalf message %q; want it to contain %q", msg, w)
				}
			}
		})
	}
}
