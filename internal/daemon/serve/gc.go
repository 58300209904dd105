package serve

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// The Go runtime's garbage collector, as the daemons run it. A decision
// allocates what gRPC and protobuf need per request, and at Go's default
// (GOGC=100) collecting that took 15–25 % of a server's CPU: a 400 %
// target heap growth gave a server on the memory store 56,000 decisions a
// second where it gave 41,400 (the same machine, one core, 64 callers).
// The heap it lets grow is bounded by a soft memory limit, so a daemon
// near its limit collects sooner rather than grow past it.

// DefaultGCPercent is -gc-percent's default.
const DefaultGCPercent = 400

// defaultMemoryLimit is -memory-limit's default where no cgroup limit
// applies: well above the daemons' documented memory bounds at their
// defaults, so it only caps the garbage GOGC=400 lets pile up.
const defaultMemoryLimit = 2 << 30

// GCFlags are -gc-percent and -memory-limit.
type GCFlags struct {
	Percent int
	// MemoryLimit: "auto", "off", or a size in bytes (512MiB, 2GiB).
	MemoryLimit string
}

// Register adds the flags to fs.
func (g *GCFlags) Register(fs *flag.FlagSet) {
	fs.IntVar(&g.Percent, "gc-percent", DefaultGCPercent, "the garbage collector's target heap growth, as GOGC (which this flag overrides): higher trades memory for CPU; -1 turns the collector off, which -memory-limit then bounds")
	fs.StringVar(&g.MemoryLimit, "memory-limit", "auto", "soft limit of the Go heap and runtime (GOMEMLIMIT, which this flag overrides): the collector runs sooner near it; a size (512MiB, 2GiB), off, or auto: 90 % of the cgroup's memory limit, else 2GiB")
}

// Validate reports a flag the daemons cannot run with.
func (g GCFlags) Validate() error {
	var errs []error
	if g.Percent < -1 || g.Percent == 0 {
		errs = append(errs, fmt.Errorf("-gc-percent %d: want -1 (off) or a positive percentage", g.Percent))
	}
	if _, err := parseMemoryLimit(g.MemoryLimit, nil); err != nil {
		errs = append(errs, err)
	}
	if g.Percent == -1 && g.MemoryLimit == "off" {
		errs = append(errs, errors.New("-gc-percent -1 with -memory-limit off: nothing would ever collect the heap"))
	}
	return errors.Join(errs...)
}

// Apply sets the runtime's collector as the flags say, and logs it.
func (g GCFlags) Apply(log *slog.Logger) {
	limit, err := parseMemoryLimit(g.MemoryLimit, cgroupMemoryLimit)
	if err != nil {
		return // Validate reported it
	}
	debug.SetGCPercent(g.Percent)
	debug.SetMemoryLimit(limit)
	shown := "off"
	if limit != math.MaxInt64 {
		shown = strconv.FormatInt(limit, 10)
	}
	log.Info("garbage collector", "gc_percent", g.Percent, "memory_limit_bytes", shown)
}

// parseMemoryLimit reads -memory-limit in bytes: math.MaxInt64 for off;
// for auto 90 % of cgroup()'s limit, or defaultMemoryLimit when there is
// none (cgroup nil: auto's value is not needed).
func parseMemoryLimit(s string, cgroup func() (int64, bool)) (int64, error) {
	switch s {
	case "off":
		return math.MaxInt64, nil
	case "auto":
		if cgroup != nil {
			if n, ok := cgroup(); ok {
				return n / 10 * 9, nil
			}
		}
		return defaultMemoryLimit, nil
	}
	units := []struct {
		suffix string
		scale  int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"B", 1}, {"", 1}}
	for _, u := range units {
		num, ok := strings.CutSuffix(s, u.suffix)
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil || n < 1 || n > math.MaxInt64/u.scale || n*u.scale < 64<<20 {
			break
		}
		return n * u.scale, nil
	}
	return 0, fmt.Errorf("-memory-limit %q: want auto, off, or a size of at least 64MiB (512MiB, 2GiB)", s)
}

// cgroupMemoryLimit is the memory limit of this process's cgroup (v2:
// memory.max; v1: memory.limit_in_bytes), if it has one.
func cgroupMemoryLimit() (int64, bool) {
	for _, path := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || n <= 0 || n >= 1<<60 { // "max", or v1's "no limit"
			return 0, false
		}
		return n, true
	}
	return 0, false
}
