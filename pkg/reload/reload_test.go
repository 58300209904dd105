package reload

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/config"
)

func limitOf(cfg *config.Config) uint32 {
	l := cfg.Match("d", []config.Entry{{Key: "k", Value: "v"}})
	if l == nil {
		return 0
	}
	return l.RateLimit.RequestsPerUnit
}

func conf(n int) string {
	return "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: " + string(rune('0'+n)) + "}\n"
}

// waitFor polls cond with a deadline: no fixed sleeps.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func run(t *testing.T, w *Watcher) {
	ctx, cancel := context.WithCancel(context.Background())
	done, err := w.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestReloadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "limits.yaml")
	write(t, path, conf(1))
	w, err := New(Options{Path: path, Debounce: 10 * time.Millisecond, Poll: -1})
	if err != nil {
		t.Fatal(err)
	}
	run(t, w)

	// A good change is picked up.
	write(t, path, conf(2))
	waitFor(t, "limit 2", func() bool { return limitOf(w.Current()) == 2 })

	// Invalid YAML and an unknown field are rejected; the old config serves.
	for _, bad := range []string{"domain: d\ndescriptors: [\n", conf(3) + "    surprise: true\n"} {
		write(t, path, bad)
		waitFor(t, "a rejection", func() bool { return w.LastError() != nil })
		if got := limitOf(w.Current()); got != 2 {
			t.Fatalf("after an invalid file the limit is %d; want the last good 2", got)
		}
		if !strings.Contains(w.LastError().Error(), "limits.yaml:") {
			t.Errorf("error %q does not name the file and line", w.LastError())
		}
		write(t, path, conf(2))
		waitFor(t, "recovery", func() bool { return w.LastError() == nil })
	}

	// An editor that saves by writing a temporary file and renaming it.
	tmp := filepath.Join(dir, ".limits.yaml.swp")
	write(t, tmp, conf(4))
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "limit 4 after a rename", func() bool { return limitOf(w.Current()) == 4 })
}

// TestReloadConfigMapSwap updates a directory the way the kubelet updates
// a mounted ConfigMap: a new timestamped directory, then an atomic rename
// of the ..data symlink; the visible files are symlinks through ..data.
func TestReloadConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	mk := func(name string, n int) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, name, "limits.yaml"), conf(n))
	}
	mk("..2026_12_01_v1", 1)
	if err := os.Symlink("..2026_12_01_v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/limits.yaml", filepath.Join(dir, "limits.yaml")); err != nil {
		t.Fatal(err)
	}
	w, err := New(Options{Path: dir, Debounce: 10 * time.Millisecond, Poll: -1})
	if err != nil {
		t.Fatal(err)
	}
	if limitOf(w.Current()) != 1 {
		t.Fatalf("initial limit %d; want 1", limitOf(w.Current()))
	}
	run(t, w)
	mk("..2026_12_02_v2", 5)
	if err := os.Symlink("..2026_12_02_v2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "limit 5 after the ..data swap", func() bool { return limitOf(w.Current()) == 5 })
}

func TestNewRejectsInvalid(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.yaml")
	write(t, path, "descriptors: []\n")
	if _, err := New(Options{Path: path}); err == nil || !strings.Contains(err.Error(), "x.yaml:") {
		t.Fatalf("New on a file without a domain = %v; want an error naming the file and line", err)
	}
}

// TestStatus: what the admin page says of the config: the version served
// and since when, and the last attempt's result, a rejection's reason
// included, the served version staying the last good one.
func TestStatus(t *testing.T) {
	path := filepath.Join(t.TempDir(), "limits.yaml")
	write(t, path, conf(1))
	w, err := New(Options{Path: path, Poll: -1})
	if err != nil {
		t.Fatal(err)
	}
	st := w.Status()
	good := w.Current().Version()
	if st.Source != path || st.Version != good || st.LastResult != "loaded" || st.LoadedAt.IsZero() || st.LastError != "" {
		t.Fatalf("after New: %+v", st)
	}
	loaded := st.LoadedAt
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	if st := w.Status(); st.LastResult != "unchanged" || !st.LoadedAt.Equal(loaded) || st.LastAttempt.Before(loaded) {
		t.Fatalf("after an unchanged reload: %+v", st)
	}
	write(t, path, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	if w.Reload() == nil {
		t.Fatal("a bad unit was loaded")
	}
	st = w.Status()
	if st.LastResult != "error" || st.Version != good || !strings.Contains(st.LastError, "limits.yaml:4") {
		t.Fatalf("after a rejected reload: %+v", st)
	}
	write(t, path, conf(2))
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	if st := w.Status(); st.LastResult != "loaded" || st.Version == good || st.LastError != "" || !st.LoadedAt.After(loaded) {
		t.Fatalf("after a good reload: %+v", st)
	}
}
