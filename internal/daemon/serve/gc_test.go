package serve

import (
	"io"
	"log/slog"
	"math"
	"runtime/debug"
	"testing"
)

func TestMemoryLimit(t *testing.T) {
	cgroup := func(n int64, ok bool) func() (int64, bool) { return func() (int64, bool) { return n, ok } }
	for _, tc := range []struct {
		in     string
		cgroup func() (int64, bool)
		want   int64
		ok     bool
	}{
		{"auto", cgroup(1<<30, true), (1 << 30) / 10 * 9, true},
		{"auto", cgroup(0, false), defaultMemoryLimit, true},
		{"off", nil, math.MaxInt64, true},
		{"512MiB", nil, 512 << 20, true},
		{"2GiB", nil, 2 << 30, true},
		{"134217728", nil, 128 << 20, true},
		{"1MiB", nil, 0, false}, // below 64MiB: the collector would never stop
		{"2Gi", nil, 0, false},
		{"-1GiB", nil, 0, false},
		{"9999999999TiB", nil, 0, false},
		{"", nil, 0, false},
	} {
		got, err := parseMemoryLimit(tc.in, tc.cgroup)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseMemoryLimit(%q) = %d, %v; want %d, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestGCFlags(t *testing.T) {
	for _, tc := range []struct {
		g  GCFlags
		ok bool
	}{
		{GCFlags{Percent: 400, MemoryLimit: "auto"}, true},
		{GCFlags{Percent: -1, MemoryLimit: "1GiB"}, true},
		{GCFlags{Percent: -1, MemoryLimit: "off"}, false},
		{GCFlags{Percent: 0, MemoryLimit: "auto"}, false},
		{GCFlags{Percent: 100, MemoryLimit: "lots"}, false},
	} {
		if err := tc.g.Validate(); (err == nil) != tc.ok {
			t.Errorf("Validate(%+v) = %v; want ok %v", tc.g, err, tc.ok)
		}
	}
	// Apply sets the runtime's collector.
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	GCFlags{Percent: 250, MemoryLimit: "768MiB"}.Apply(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if p := debug.SetGCPercent(250); p != 250 {
		t.Errorf("GC percent after Apply = %d; want 250", p)
	}
	if l := debug.SetMemoryLimit(-1); l != 768<<20 {
		t.Errorf("memory limit after Apply = %d; want 768MiB", l)
	}
}
