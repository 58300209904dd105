package xdstest

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Memory measures the peak memory of the test's own process while a config
// source (a file watch, an xDS stream) works on hostile input: the live Go
// heap sampled every millisecond, and the kernel's peak resident set
// (VmHWM, reset when the measure starts). The heap is the figure tests
// assert on: the race detector's shadow memory inflates the resident set.
//
// Safe for concurrent use; Stop ends the sampling goroutine.
type Memory struct {
	stop     chan struct{}
	done     chan struct{}
	mu       sync.Mutex
	peakHeap uint64
}

// MeasureMemory collects garbage, resets the peak resident set and starts
// sampling. Stop it (t.Cleanup does too).
func MeasureMemory(t testing.TB) *Memory {
	t.Helper()
	runtime.GC()
	debug.FreeOSMemory()
	// Writing 5 resets VmHWM to the current RSS (Linux 4.0 and later).
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Logf("cannot reset the peak RSS (%v): it counts from the process's start", err)
	}
	m := &Memory{stop: make(chan struct{}), done: make(chan struct{})}
	go m.sample()
	t.Cleanup(func() { m.Stop() })
	return m
}

func (m *Memory) sample() {
	defer close(m.done)
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		metrics.Read(s)
		m.mu.Lock()
		m.peakHeap = max(m.peakHeap, s[0].Value.Uint64())
		m.mu.Unlock()
		select {
		case <-m.stop:
			return
		case <-tick.C:
		}
	}
}

// Stop ends the sampling and returns the peak heap (live and not yet
// collected objects) and the peak resident set, in bytes; RSS is 0 where
// /proc is not readable. Later calls return the same peaks.
func (m *Memory) Stop() (heap, rss uint64) {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peakHeap, peakRSS()
}

// peakRSS is VmHWM from /proc/self/status, in bytes.
func peakRSS() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("VmHWM:")); ok {
			kb, _ := strconv.ParseUint(string(bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(rest), []byte("kB")))), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// Within stops the measure and fails t if the peak heap, or (without the
// race detector) the peak resident set, exceeded bound bytes. It logs
// both peaks under what.
func (m *Memory) Within(t testing.TB, what string, bound uint64) {
	t.Helper()
	heap, rss := m.Stop()
	t.Logf("%s: peak heap %d MiB, peak RSS %d MiB (race detector: %v)", what, heap>>20, rss>>20, raceEnabled)
	if heap > bound {
		t.Errorf("%s: peak heap %d MiB; want under %d MiB", what, heap>>20, bound>>20)
	}
	if !raceEnabled && rss > bound {
		t.Errorf("%s: peak RSS %d MiB; want under %d MiB", what, rss>>20, bound>>20)
	}
}
