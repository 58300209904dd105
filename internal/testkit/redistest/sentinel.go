package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel is one redis-sentinel process monitoring one master, started for
// one test. The master has no replicas, so the sentinel never fails over:
// it keeps naming Master, which can be killed and restarted on its address.
type Sentinel struct {
	// Addr is the sentinel's 127.0.0.1:port.
	Addr string
	// MasterName is the name the master is monitored under.
	MasterName string
	// Master is the monitored redis-server.
	Master *Server

	proc *Server // the redis-sentinel process, run like a redis-server
}

// StartSentinel starts a master with [Start] and a redis-sentinel that
// monitors it with a quorum of 1, and returns once the sentinel names the
// master's address and has connected to it.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	bin := lookBinary(t, "redis-sentinel")
	s := &Sentinel{MasterName: "mymaster", Master: Start(t)}
	host, port, err := net.SplitHostPort(s.Master.Addr)
	if err != nil {
		t.Fatalf("redistest: master address %q: %v", s.Master.Addr, err)
	}

	// Sentinel rewrites its config file, so it lives in a directory of its
	// own; the per-process settings go on the command line so a retry on a
	// new port overrides whatever an earlier attempt wrote.
	confDir := t.TempDir()
	conf := filepath.Join(confDir, "sentinel.conf")
	body := fmt.Sprintf(`sentinel resolve-hostnames no
sentinel monitor %[1]s %[2]s %[3]s 1
sentinel down-after-milliseconds %[1]s 1000
sentinel failover-timeout %[1]s 5000
`, s.MasterName, host, port)
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		t.Fatalf("redistest: write %s: %v", conf, err)
	}
	s.proc = launch(t, bin, "", false, func(port int, dir string) []string {
		return []string{conf,
			"--port", strconv.Itoa(port),
			"--bind", "127.0.0.1",
			"--protected-mode", "no",
			"--save", "",
			"--appendonly", "no",
			"--dir", dir,
		}
	})
	s.Addr = s.proc.Addr
	s.waitMonitoring(t)
	return s
}

// waitMonitoring polls the sentinel until it names the master's address and
// its link to the master is up (flags exactly "master", not
// "master,disconnected").
func (s *Sentinel) waitMonitoring(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	for {
		problem := s.monitoringProblem()
		if problem == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: sentinel %s not monitoring %s within %v: %s\n--- log ---\n%s",
				s.Addr, s.Master.Addr, readyTimeout, problem, s.proc.logTail())
		}
		time.Sleep(pollInterval)
	}
}

func (s *Sentinel) monitoringProblem() string {
	opt, release, err := dialProbe(s.Addr, "")
	if err != nil {
		return err.Error()
	}
	defer release()
	sc := redis.NewSentinelClient(opt)
	defer sc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	addr, err := sc.GetMasterAddrByName(ctx, s.MasterName).Result()
	if err != nil {
		return fmt.Sprintf("SENTINEL get-master-addr-by-name: %v", err)
	}
	if len(addr) != 2 || net.JoinHostPort(addr[0], addr[1]) != s.Master.Addr {
		return fmt.Sprintf("SENTINEL get-master-addr-by-name = %v; want %s", addr, s.Master.Addr)
	}
	m, err := sc.Master(ctx, s.MasterName).Result()
	if err != nil {
		return fmt.Sprintf("SENTINEL master: %v", err)
	}
	if m["flags"] != "master" {
		return fmt.Sprintf("SENTINEL master flags = %q; want \"master\"", m["flags"])
	}
	return ""
}

// FailoverClient returns a client that finds the master through the
// sentinel, closed in t.Cleanup.
func (s *Sentinel) FailoverClient(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    s.MasterName,
		SentinelAddrs: []string{s.Addr},
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
