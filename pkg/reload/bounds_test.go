package reload

import (
	"bufio"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/xdstest"
	"github.com/sluicehq/sluice/pkg/config"
)

// writeConfigOf writes a valid config of domain big, size bytes long,
// without holding it in memory: descriptors, as a generated file has them.
func writeConfigOf(t *testing.T, path string, size int) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	b := bufio.NewWriterSize(f, 1<<20)
	n, _ := b.WriteString("domain: big\ndescriptors:\n")
	for i := 0; n < size; i++ {
		m, _ := fmt.Fprintf(b, "  - key: k%d\n    rate_limit: {unit: second, requests_per_unit: %d}\n", i, i%1000+1)
		n += m
	}
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestReloadRefusesHugeFile is issue 21's finding 6: a 100 MB file dropped
// into the watched directory cost 3.0-4.6 GB of peak RSS before it was
// refused. Now it is refused before it is read: under 400 MB of peak
// memory, with an error naming the file and the bound, and the last good
// config keeps serving.
func TestReloadRefusesHugeFile(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), conf(1))
	w, err := New(Options{Path: dir, Debounce: 10 * time.Millisecond, Poll: -1})
	if err != nil {
		t.Fatal(err)
	}
	run(t, w)
	tmp := filepath.Join(dir, "big.tmp") // not a config file's name: not read
	writeConfigOf(t, tmp, 100<<20)

	mem := xdstest.MeasureMemory(t)
	if err := os.Rename(tmp, filepath.Join(dir, "big.yaml")); err != nil {
		t.Fatal(err)
	}
	waitWithin(t, 3*time.Minute, "the refusal", func() bool { return w.LastError() != nil })
	mem.Within(t, "a 100 MB config file in the watched directory", 400<<20)

	msg := w.LastError().Error()
	for _, want := range []string{"big.yaml", fmt.Sprint("bound of ", config.DefaultMaxFileBytes)} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %.300q does not name %q", msg, want)
		}
	}
	if got := limitOf(w.Current()); got != 1 {
		t.Errorf("after the huge file the limit is %d; want the last good 1", got)
	}
}

// TestSizesOption: Options.Sizes bound the files New and Reload read.
func TestSizesOption(t *testing.T) {
	path := filepath.Join(t.TempDir(), "limits.yaml")
	write(t, path, conf(1))
	if _, err := New(Options{Path: path, Sizes: config.SizeBounds{MaxFileBytes: 16}}); err == nil || !strings.Contains(err.Error(), "bound of 16") {
		t.Errorf("New of a %d-byte file bound to 16 bytes: %v; want the bound named", len(conf(1)), err)
	}
	w, err := New(Options{Path: path, Sizes: config.SizeBounds{MaxFileBytes: int64(len(conf(1)))}})
	if err != nil {
		t.Fatal(err)
	}
	write(t, path, conf(1)+"# one byte too many\n")
	if err := w.Reload(); err == nil || !strings.Contains(err.Error(), "limits.yaml") {
		t.Errorf("Reload of a file past its bound: %v; want an error naming it", err)
	}
}

// waitWithin polls cond until limit: a refusal on today's code can take
// long, and the test must fail, not hang.
func waitWithin(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// aliasBomb is a small config file (about 36 KB) that aliases expand to
// about 116,000 limits: just under config.MaxNodes YAML nodes.
func aliasBomb(domain string) string {
	var b strings.Builder
	b.WriteString("domain: " + domain + "\ndescriptors:\n  - key: top\n    descriptors: &inner\n")
	for i := range 400 {
		fmt.Fprintf(&b, "      - {key: i%d, rate_limit: {unit: second, requests_per_unit: 1}}\n", i)
	}
	for i := range 285 {
		fmt.Fprintf(&b, "  - {key: o%d, descriptors: *inner}\n", i)
	}
	return b.String()
}

// TestReloadRefusesManyAliasBombs: the node budget bounded each file, so
// a directory of small files, each within the size bounds and its own
// budget, expanded to millions of limits (20 files of 36 KB, 2.3 million
// limits, GBs of heap). The budget bounds the whole config now.
func TestReloadRefusesManyAliasBombs(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), conf(1))
	w, err := New(Options{Path: dir, Debounce: 10 * time.Millisecond, Poll: -1})
	if err != nil {
		t.Fatal(err)
	}
	staging := t.TempDir()
	for i := range 20 {
		write(t, filepath.Join(staging, fmt.Sprintf("bomb%02d.yaml", i)), aliasBomb(fmt.Sprint("bomb", i)))
	}
	mem := xdstest.MeasureMemory(t)
	for i := range 20 {
		name := fmt.Sprintf("bomb%02d.yaml", i)
		if err := os.Rename(filepath.Join(staging, name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	err = w.Reload()
	mem.Within(t, "20 alias bombs of 36 KB", 400<<20)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprint(config.MaxNodes)) {
		t.Errorf("Reload: %.300v; want the node bound named", err)
	}
	if got := limitOf(w.Current()); got != 1 {
		t.Errorf("after the bombs the limit is %d; want the last good 1", got)
	}
}

// TestLogLinesBounded: what a load logs of a config (its domains, its
// errors) is bounded however many and however long its strings are:
// 50 files of 4 KB domains made a 200 KB log line.
func TestLogLinesBounded(t *testing.T) {
	dir := t.TempDir()
	for i := range 50 {
		write(t, filepath.Join(dir, fmt.Sprintf("f%02d.yaml", i)), fmt.Sprintf("domain: %s%02d\n", strings.Repeat("d", config.MaxScalarBytes-2), i))
	}
	var logs strings.Builder
	w, err := New(Options{Path: dir, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	// A change: loaded and logged. Then errors in every file: rejected
	// and logged.
	write(t, filepath.Join(dir, "f00.yaml"), "domain: changed\n")
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		write(t, filepath.Join(dir, fmt.Sprintf("f%02d.yaml", i)), fmt.Sprintf("domain: %s%02d\n? %s\n: 1\n", strings.Repeat("d", 100), i, strings.Repeat("x", config.MaxScalarBytes)))
	}
	if err := w.Reload(); err == nil {
		t.Fatal("a config of unknown fields was loaded")
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d log lines; want 2 (loaded, rejected):\n%.500s", len(lines), logs.String())
	}
	for _, l := range lines {
		if len(l) > 8<<10 {
			t.Errorf("a log line of %d bytes: %.300s…", len(l), l)
		}
	}
	if st := w.Status(); len(st.LastError) > 8<<10 {
		t.Errorf("Status().LastError (shown on /readyz) of %d bytes", len(st.LastError))
	}
}
