package redistest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// readyTimeout bounds every wait for a process or a cluster to come up:
	// generous, since it costs nothing when they come up at once, and on a
	// loaded machine, with the packages' tests starting servers, clusters
	// and sentinels in parallel, a cluster's nodes can take seconds to
	// agree.
	readyTimeout = 30 * time.Second
	// pollInterval is the pause between readiness probes.
	pollInterval = 20 * time.Millisecond
	// startAttempts is how many fresh ports a start tries: a port found free
	// can be taken by another process before redis-server binds it.
	startAttempts = 5
	// logTail caps how much of a process log goes into a failure message.
	logTail = 4 << 10
)

const installHint = "run ./scripts/install-test-deps.sh (or apt-get install redis-server redis-tools redis-sentinel)"

// errAddrInUse marks a start that failed only because its port was taken.
var errAddrInUse = errors.New("address already in use")

// lookBinary returns the path of the named binary, failing t (never
// skipping) with install instructions when it is missing.
func lookBinary(t testing.TB, name string) string {
	t.Helper()
	if testing.Short() {
		// make unit: the contributor asked for the tests that need no
		// installed server; make test runs these.
		t.Skipf("-short: needs %s (make test installs and runs it)", name)
	}
	path, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("redistest: %s not found: %v; %s", name, err, installHint)
	}
	return path
}

// freePort returns a port that was free on 127.0.0.1 a moment ago. With
// clusterBus it also checks port+10000, the Redis Cluster bus port, which
// limits the port to 55535.
func freePort(clusterBus bool) (int, error) {
	var lastErr error
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("find a free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if !clusterBus {
			l.Close()
			return port, nil
		}
		if port > 55535 {
			l.Close()
			lastErr = fmt.Errorf("port %d leaves no room for the cluster bus port", port)
			continue
		}
		bus, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
		l.Close()
		if err != nil {
			lastErr = err
			continue
		}
		bus.Close()
		return port, nil
	}
	return 0, fmt.Errorf("find a free port pair for a cluster node: %w", lastErr)
}

// process is one started child and the result of waiting for it.
type process struct {
	cmd       *exec.Cmd
	logPath   string
	logOffset int64         // where this run's output starts in the log
	done      chan struct{} // closed once Wait has returned
	err       error         // Wait's result; read only after done is closed
}

// spawn starts bin with args, appending its stdout and stderr to logPath.
// exec.Command rather than CommandContext: the process lives until kill, not
// until some context ends, and kill both signals and reaps it.
func spawn(bin string, args []string, logPath string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	// The child gets its own copy of the descriptor; ours is not needed after
	// Start, and an *os.File needs no copying goroutine that Wait would block on.
	defer logFile.Close()
	offset, err := logFile.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &process{cmd: cmd, logPath: logPath, logOffset: offset, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// kill sends SIGKILL and returns once the process has been reaped.
func (p *process) kill() {
	_ = p.cmd.Process.Kill() // os.ErrProcessDone if it already exited
	<-p.done
}

// log returns the tail of this run's output, for failure messages.
func (p *process) log() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(read log: %v)", err)
	}
	if p.logOffset <= int64(len(b)) {
		b = b[p.logOffset:]
	}
	if len(b) > logTail {
		b = append([]byte("...\n"), b[len(b)-logTail:]...)
	}
	return string(b)
}

// waitReady polls addr until the process p answers PING and reports its own
// pid, so that another test's Redis that took the port is never mistaken for
// ours. It returns an error wrapping errAddrInUse if p could not bind.
func (p *process) waitReady(addr, password string) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		err := probe(addr, password, p.cmd.Process.Pid)
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			out := p.log()
			if strings.Contains(out, "Address already in use") {
				return fmt.Errorf("%s could not bind %s: %w", filepath.Base(p.cmd.Path), addr, errAddrInUse)
			}
			return fmt.Errorf("%s exited before answering on %s: %v\n--- log ---\n%s", p.cmd.Path, addr, p.err, out)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer PING on %s within %v: %v\n--- log ---\n%s", p.cmd.Path, addr, readyTimeout, err, p.log())
		}
		select {
		case <-p.done: // report the exit on the next pass
		case <-time.After(pollInterval):
		}
	}
}

// probe PINGs addr once and checks that process pid is the one answering.
func probe(addr, password string, pid int) error {
	opt, release, err := dialProbe(addr, password)
	if err != nil {
		return err
	}
	defer release()
	c := redis.NewClient(opt)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		return err
	}
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return err
	}
	if got := infoField(info, "process_id"); got != strconv.Itoa(pid) {
		return fmt.Errorf("%s is served by pid %s, not by pid %d", addr, got, pid)
	}
	return nil
}

// dialProbe dials addr and returns client options that run on that one
// connection and fail fast: the caller's polling loop retries, not go-redis.
// Dialling here makes a refused connection, the normal state while a
// process starts, an error for the loop instead of a line that go-redis's
// pool logs on every attempt; and each probe gets a fresh client because a
// long-lived pool that saw dial errors backs off for a second. Call release
// after closing the client: it closes the connection if the client never
// took it.
func dialProbe(addr, password string) (opt *redis.Options, release func(), err error) {
	conn, err := net.DialTimeout("tcp", addr, 250*time.Millisecond)
	if err != nil {
		return nil, nil, err
	}
	handoff := make(chan net.Conn, 1)
	handoff <- conn
	opt = &redis.Options{
		Addr: addr,
		Dialer: func(context.Context, string, string) (net.Conn, error) {
			select {
			case c := <-handoff:
				return c, nil
			default:
				return nil, errors.New("redistest: probe connection already used")
			}
		},
		Password:        password,
		Protocol:        2,
		DisableIdentity: true,
		MaxRetries:      -1,
		DialerRetries:   1,
		PoolSize:        1,
		ReadTimeout:     500 * time.Millisecond,
		WriteTimeout:    500 * time.Millisecond,
	}
	release = func() {
		select {
		case c := <-handoff:
			c.Close()
		default:
		}
	}
	return opt, release, nil
}

// infoField returns the value of key in the text of an INFO or CLUSTER INFO
// reply ("key:value" lines), or "" if it is absent.
func infoField(info, key string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), key+":"); ok {
			return v
		}
	}
	return ""
}
