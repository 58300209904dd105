package redistest

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestServerKillRestart(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := Start(t)
	c := s.Client(t)
	key := Prefix(t) + "k"

	if err := c.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatalf("Set before Kill: %v", err)
	}
	addr := s.Addr
	s.Kill()
	s.Kill() // a second Kill is a no-op
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Fatalf("dial %s after Kill succeeded; want connection refused", addr)
	}
	// A short deadline: the client would otherwise spend seconds retrying.
	downCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := c.Get(downCtx, key).Err(); err == nil || errors.Is(err, redis.Nil) {
		t.Fatalf("Get after Kill = %v; want a connection error", err)
	}

	s.Restart(t)
	if s.Addr != addr {
		t.Fatalf("Addr after Restart = %s; want %s", s.Addr, addr)
	}
	// The same client reconnects; the key is gone because nothing persists.
	if err := c.Get(ctx, key).Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("Get after Restart = %v; want redis.Nil", err)
	}
	if err := c.Set(ctx, key, "v2", 0).Err(); err != nil {
		t.Fatalf("Set after Restart: %v", err)
	}

	s.Restart(t) // restarting a running server replaces its process
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("Ping after second Restart: %v", err)
	}
}

func TestServerCleanupKillsProcess(t *testing.T) {
	t.Parallel()
	var pid int
	t.Run("owner", func(t *testing.T) {
		s := Start(t)
		pid = s.proc.cmd.Process.Pid
	})
	// The subtest's cleanups have run: the process must be gone and reaped,
	// not a zombie (kill(pid, 0) succeeds on a zombie).
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("kill(%d, 0) after cleanup = %v; want ESRCH", pid, err)
	}
}

func TestServerPassword(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const pw = "p@ss:w/rd"
	s := Start(t, WithPassword(pw))

	anon := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer anon.Close()
	if err := anon.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("Ping without password = %v; want NOAUTH", err)
	}
	if err := s.Client(t).Ping(ctx).Err(); err != nil {
		t.Fatalf("Ping with Client: %v", err)
	}

	opt, err := redis.ParseURL(s.URL())
	if err != nil {
		t.Fatalf("ParseURL(%q): %v", s.URL(), err)
	}
	if opt.Password != pw || opt.Addr != s.Addr {
		t.Fatalf("ParseURL(%q) = addr %q password %q; want %q %q", s.URL(), opt.Addr, opt.Password, s.Addr, pw)
	}
	byURL := redis.NewClient(opt)
	defer byURL.Close()
	if err := byURL.Ping(ctx).Err(); err != nil {
		t.Fatalf("Ping through URL(): %v", err)
	}

	s.Restart(t) // the readiness probe authenticates too
}

func TestServerOptions(t *testing.T) {
	t.Parallel()
	s := Start(t, WithArgs("--maxmemory", "1mb"))
	if got, want := s.URL(), "redis://"+s.Addr; got != want {
		t.Errorf("URL() = %q; want %q", got, want)
	}
	ctx := t.Context()
	c := s.Client(t)
	for param, want := range map[string]string{
		"maxmemory":      "1048576", // WithArgs
		"save":           "",        // no persistence
		"appendonly":     "no",
		"bind":           "127.0.0.1",
		"protected-mode": "no",
		"daemonize":      "no",
	} {
		got, err := c.ConfigGet(ctx, param).Result()
		if err != nil {
			t.Fatalf("CONFIG GET %s: %v", param, err)
		}
		if got[param] != want {
			t.Errorf("CONFIG GET %s = %q; want %q", param, got[param], want)
		}
	}
}

func TestStartDetectsTakenPort(t *testing.T) {
	t.Parallel()
	// Another process holds the port that was free a moment ago: the start
	// must report errAddrInUse, which makes launch retry on a fresh port.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	dir := t.TempDir()
	p, err := spawn(lookBinary(t, "redis-server"), []string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--dir", dir}, dir+"/redis.log")
	if err != nil {
		t.Fatal(err)
	}
	defer p.kill()
	if err := p.waitReady(addr, ""); !errors.Is(err, errAddrInUse) {
		t.Fatalf("waitReady on a taken port = %v; want errAddrInUse", err)
	}
}

func TestProbeRejectsAnotherProcess(t *testing.T) {
	t.Parallel()
	// A Redis that answers on our port but is not our child (another test's,
	// which won the port race) must not count as ready.
	s := Start(t)
	pid := s.proc.cmd.Process.Pid
	if err := probe(s.Addr, "", pid); err != nil {
		t.Fatalf("probe(%s, own pid) = %v; want nil", s.Addr, err)
	}
	if err := probe(s.Addr, "", pid+1); err == nil {
		t.Fatalf("probe(%s, other pid) = nil; want an error", s.Addr)
	}
}
