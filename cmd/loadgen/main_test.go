package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/daemon/serve"
)

// syncBuffer is a bytes.Buffer safe to write from the server goroutine while
// the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startNoop runs `loadgen -serve-noop 127.0.0.1:0` in-process and returns
// the address it reports; the server is stopped in t.Cleanup.
func startNoop(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stderr syncBuffer
	exited := make(chan int, 1)
	go func() { exited <- run(ctx, []string{"-serve-noop", "127.0.0.1:0"}, &bytes.Buffer{}, &stderr) }()
	t.Cleanup(func() {
		cancel()
		if code := <-exited; code != exitOK {
			t.Errorf("serve-noop exited %d: %s", code, stderr.String())
		}
	})
	re := regexp.MustCompile(`serving on (127\.0\.0\.1:\d+)`)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if m := re.FindStringSubmatch(stderr.String()); m != nil {
			return m[1]
		}
		select {
		case code := <-exited:
			exited <- code
			t.Fatalf("serve-noop exited %d before serving: %s", code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve-noop did not report its address within 5s: %q", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestJSONRunAgainstServeNoop(t *testing.T) {
	addr := startNoop(t)
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{
		"-target", addr, "-conns", "2", "-concurrency", "8", "-requests", "200", "-duration", "20s",
		"-keys", "100", "-dist", "zipf", "-zipf-s", "1.2", "-hits", "2", "-descriptors", "generic_key=a;remote_address=%d", "-timeout", "10s", "-json",
	}, &stdout, &stderr)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var res struct {
		Sent, OK, OverLimit, Unknown, Errors uint64
		Latency                              map[string]float64 `json:"latency_us"`
		Dist                                 string
		Conns, Concurrency                   int
		GOGC                                 string
	}
	raw := stdout.String()
	dec := json.NewDecoder(strings.NewReader(raw))
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("stdout is not JSON: %v", err)
	}
	if dec.More() {
		t.Fatalf("stdout holds more than one JSON value")
	}
	if res.Sent != 200 || res.OK+res.OverLimit+res.Unknown+res.Errors != res.Sent || res.OK != 200 {
		t.Fatalf("sent %d ok %d over %d unknown %d errors %d; want 200 OK\n%s", res.Sent, res.OK, res.OverLimit, res.Unknown, res.Errors, raw)
	}
	if l := res.Latency; !(l["p50"] > 0 && l["p50"] <= l["p99"] && l["p99"] <= l["max"]) {
		t.Fatalf("latency_us %v: want 0 < p50 ≤ p99 ≤ max", l)
	}
	if res.Dist != "zipf" || res.Conns != 2 || res.Concurrency != 8 {
		t.Fatalf("dist %q conns %d concurrency %d; want zipf, 2, 8", res.Dist, res.Conns, res.Concurrency)
	}
	// The collector as the daemons run it (-gc-percent overrides GOGC).
	if want := strconv.Itoa(serve.DefaultGCPercent); res.GOGC != want {
		t.Errorf("gogc %q; want -gc-percent's default %s", res.GOGC, want)
	}
}

func TestTextRun(t *testing.T) {
	addr := startNoop(t)
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"-target", addr, "-requests", "20", "-rate", "2000"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{"open loop at 2000/s", "decided/s", "p99.9", "intended", "service"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("text output lacks %q:\n%s", want, stdout.String())
		}
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		code    int
		wantErr string
	}{
		{"non-loopback target", []string{"-target", "10.0.0.1:8081", "-duration", "1s"}, exitError, "not a loopback address"},
		{"non-loopback redis", []string{"-target", "127.0.0.1:1", "-redis-addr", "192.168.1.10:6379"}, exitError, "not a loopback address"},
		{"no target", nil, exitUsage, "-target is required"},
		{"both modes", []string{"-target", "127.0.0.1:1", "-serve-noop", "127.0.0.1:0"}, exitUsage, "exclusive"},
		{"malformed descriptors", []string{"-target", "127.0.0.1:1", "-descriptors", "a=1;;b=2"}, exitError, "descriptor 2 is empty"},
		{"duration over the cap", []string{"-target", "127.0.0.1:1", "-duration", "11m"}, exitError, "duration"},
		{"hits out of range", []string{"-target", "127.0.0.1:1", "-hits", "4294967296"}, exitUsage, "hits"},
		{"bad dist", []string{"-target", "127.0.0.1:1", "-dist", "pareto"}, exitError, "dist"},
		{"stray argument", []string{"-target", "127.0.0.1:1", "extra"}, exitUsage, "unexpected arguments"},
		{"collector off, unbounded", []string{"-target", "127.0.0.1:1", "-gc-percent", "-1", "-memory-limit", "off"}, exitUsage, "nothing would ever collect"},
		{"zero gc percent", []string{"-target", "127.0.0.1:1", "-gc-percent", "0"}, exitUsage, "-gc-percent 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tt.args, &stdout, &stderr)
			if code != tt.code || !strings.Contains(stderr.String(), tt.wantErr) {
				t.Fatalf("run(%q) = %d, stderr %q; want %d mentioning %q", tt.args, code, stderr.String(), tt.code, tt.wantErr)
			}
			if stdout.Len() != 0 {
				t.Fatalf("run(%q) wrote a result on failure: %q", tt.args, stdout.String())
			}
		})
	}
}

func TestHelpDocumentsEveryFlag(t *testing.T) {
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"-h"}, &bytes.Buffer{}, &stderr); code != exitOK {
		t.Fatalf("-h exited %d", code)
	}
	for _, flag := range []string{"target", "conns", "concurrency", "duration", "requests", "rate", "domain",
		"descriptors", "keys", "dist", "zipf-s", "seed", "hits", "redis-addr", "json", "timeout", "warmup",
		"allow-remote", "serve-noop", "cache-keys", "gc-percent", "memory-limit"} {
		if !strings.Contains(stderr.String(), "  -"+flag+" ") && !strings.Contains(stderr.String(), "  -"+flag+"\n") {
			t.Errorf("-h does not document -%s", flag)
		}
	}
}
