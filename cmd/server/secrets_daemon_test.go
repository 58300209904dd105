package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/gobuild"
)

// buildDaemons builds cmd/server and cmd/localfilter into a temporary
// directory of t and returns it: tests that look at what a process prints
// and serves (its command line included) need the real binaries.
func buildDaemons(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := gobuild.Command(dir+string(filepath.Separator),
		"github.com/sluicehq/sluice/cmd/server", "github.com/sluicehq/sluice/cmd/localfilter")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return dir
}

// daemon is one started binary: everything it printed, and the addresses
// it listens on once it does.
type daemon struct {
	cmd                *exec.Cmd
	out                *lockedBuffer // stdout and stderr
	done               chan struct{}
	grpcAddr, httpAddr string
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// runDaemon starts bin with args and no environment but env (and PATH):
// a machine's own REDIS_URL or SLUICE_ variables must not change it. It
// returns once the process logs that it listens, or once it has exited.
func runDaemon(t *testing.T, bin string, env []string, args ...string) *daemon {
	t.Helper()
	d := &daemon{out: &lockedBuffer{}, done: make(chan struct{})}
	d.cmd = exec.Command(bin, args...)
	d.cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.cmd.Wait(); close(d.done) }()
	t.Cleanup(d.stop)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if d.grpcAddr, d.httpAddr = listeningIn(d.out.String()); d.grpcAddr != "" {
			return d
		}
		select {
		case <-d.done:
			return d
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s neither listens nor exits within 30s:\n%s", filepath.Base(bin), d.out)
		}
	}
}

// listeningIn reads the addresses from a "... listening" JSON log line.
func listeningIn(out string) (grpcAddr, httpAddr string) {
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var line struct {
			Msg      string `json:"msg"`
			GRPCAddr string `json:"grpc_addr"`
			HTTPAddr string `json:"http_addr"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && strings.HasSuffix(line.Msg, " listening") {
			return line.GRPCAddr, line.HTTPAddr
		}
	}
	return "", ""
}

// exited waits for the process to end by itself, up to d, and reports its
// exit code.
func (d *daemon) exited(wait time.Duration) (code int, ok bool) {
	select {
	case <-d.done:
		return d.cmd.ProcessState.ExitCode(), true
	case <-time.After(wait):
		return 0, false
	}
}

// stop ends the process as an orchestrator does (SIGTERM, SIGKILL after
// 15 s) and waits for it, so that all it prints is in out.
func (d *daemon) stop() {
	select {
	case <-d.done:
		return
	default:
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(15 * time.Second):
		d.cmd.Process.Kill()
		<-d.done
	}
}
