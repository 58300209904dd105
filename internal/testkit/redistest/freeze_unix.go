//go:build unix

package redistest

import (
	"os/exec"
	"strconv"
	"syscall"
)

// Freeze stops the process (SIGSTOP), as a hung or paused Redis would be:
// connections stay open and nothing answers. Thaw resumes it.
func (s *Server) Freeze() { s.signal(syscall.SIGSTOP) }

// Thaw resumes a frozen process (SIGCONT).
func (s *Server) Thaw() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		_ = s.proc.cmd.Process.Signal(sig)
	}
}

// Prioritize raises the process's scheduling priority to nice -10 (which
// takes root) and, where the system has util-linux's chrt, puts its event
// loop in the lowest real-time class (SCHED_FIFO 1), as a Redis on a host
// of its own is never starved by its clients' machine: a test that slows
// its own process down and must find Redis answering calls it, so that
// busy cores elsewhere on the machine (other tests, busy loops) do not
// stall Redis itself. nice -10 alone still left Redis waiting over 20 ms
// for a core in one `make test` of ten (TestSlowProcessIsNotStalled: 29
// of 800 calls judged stalled). The kernel's real-time throttling keeps
// the machine's other tasks their share.
func (s *Server) Prioritize() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return nil
	}
	pid := s.proc.cmd.Process.Pid
	if err := syscall.Setpriority(syscall.PRIO_PROCESS, pid, -10); err != nil {
		return err
	}
	if chrt, err := exec.LookPath("chrt"); err == nil {
		return exec.Command(chrt, "-f", "-p", "1", strconv.Itoa(pid)).Run()
	}
	return nil
}
