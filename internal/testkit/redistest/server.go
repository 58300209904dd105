package redistest

import (
	"errors"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a redis-server process started for one test. Its methods are
// safe for concurrent use.
type Server struct {
	// Addr is 127.0.0.1:port. It stays the same across Kill and Restart.
	Addr string

	bin      string   // redis-server, or redis-sentinel inside a Sentinel
	args     []string // the full command line after bin, port included
	password string
	logPath  string

	mu   sync.Mutex
	proc *process // nil while killed
}

// Option configures [Start].
type Option func(*config)

type config struct {
	password string
	args     []string
	cluster  bool // set by StartCluster
}

// WithPassword sets requirepass, so clients must AUTH with pw.
func WithPassword(pw string) Option {
	return func(c *config) { c.password = pw }
}

// WithArgs appends redis-server arguments (such as "--maxmemory", "1mb")
// after the defaults, which they override.
func WithArgs(extra ...string) Option {
	return func(c *config) { c.args = append(c.args, extra...) }
}

// Start starts a redis-server on a free loopback port and returns once it
// answers PING. The process has no disk persistence, logs into its own
// t.TempDir, and is killed and reaped in t.Cleanup.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	var cfg config
	for _, opt := range opts {
		opt(&cfg)
	}
	bin := lookBinary(t, "redis-server")
	return launch(t, bin, cfg.password, cfg.cluster, func(port int, dir string) []string {
		args := []string{
			"--port", strconv.Itoa(port),
			"--bind", "127.0.0.1",
			"--protected-mode", "no",
			"--save", "",
			"--appendonly", "no",
			"--dir", dir,
		}
		if cfg.password != "" {
			args = append(args, "--requirepass", cfg.password)
		}
		if cfg.cluster {
			args = append(args,
				"--cluster-enabled", "yes",
				"--cluster-config-file", filepath.Join(dir, "nodes.conf"))
		}
		return append(args, cfg.args...)
	})
}

// launch starts bin with the arguments args builds for a port, retrying on
// a fresh port when another process took the chosen one first.
func launch(t testing.TB, bin, password string, clusterBus bool, args func(port int, dir string) []string) *Server {
	t.Helper()
	// TempDir before Cleanup: cleanups run last-in first-out, so the process
	// is dead before its directory is removed.
	dir := t.TempDir()
	s := &Server{bin: bin, password: password, logPath: filepath.Join(dir, "redis.log")}
	t.Cleanup(s.Kill)

	var err error
	for range startAttempts {
		var port int
		port, err = freePort(clusterBus)
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		s.args = args(port, dir)
		s.mu.Lock()
		err = s.startLocked()
		s.mu.Unlock()
		if err == nil {
			return s
		}
		if !errors.Is(err, errAddrInUse) {
			t.Fatalf("redistest: %v", err)
		}
	}
	t.Fatalf("redistest: %s: no free port after %d attempts: %v", filepath.Base(bin), startAttempts, err)
	return nil
}

// startLocked starts the process and waits for it to answer; s.mu is held.
func (s *Server) startLocked() error {
	p, err := spawn(s.bin, s.args, s.logPath)
	if err != nil {
		return err
	}
	if err := p.waitReady(s.Addr, s.password); err != nil {
		p.kill()
		return err
	}
	s.proc = p
	return nil
}

// Kill sends the process SIGKILL, as a crash would, and waits until it has
// exited. Addr is kept for Restart, though nothing holds the port
// meanwhile. Killing a killed server does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
}

func (s *Server) killLocked() {
	if s.proc != nil {
		s.proc.kill()
		s.proc = nil
	}
}

// Restart kills the process if it is running and starts it again with the
// same arguments on the same port, returning once it answers PING. Without
// persistence it comes back empty (a cluster node keeps its nodes.conf). A
// bind failure is retried until a deadline, for the moment the old socket
// takes to let go of the port.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
	deadline := time.Now().Add(readyTimeout)
	backoff := 10 * time.Millisecond
	for {
		err := s.startLocked()
		if err == nil {
			return
		}
		if !errors.Is(err, errAddrInUse) || time.Now().After(deadline) {
			t.Fatalf("redistest: restart: %v", err)
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// URL returns redis://[:password@]addr, the form the server's -redis-url
// flag and redis.ParseURL read.
func (s *Server) URL() string {
	u := url.URL{Scheme: "redis", Host: s.Addr}
	if s.password != "" {
		u.User = url.UserPassword("", s.password)
	}
	return u.String()
}

// Client returns a client for the server, closed in t.Cleanup.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, Password: s.password})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// logTail returns the tail of the running process's log, for failure
// messages.
func (s *Server) logTail() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return "(not running)"
	}
	return s.proc.log()
}
