//go:build unix

package redistest

import "syscall"

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
// takes root), as a Redis on a host of its own is never starved by its
// clients' machine: a test that slows its own process down and must find
// Redis answering calls it, so that busy cores elsewhere on the machine
// (other tests, busy loops) do not stall Redis itself.
func (s *Server) Prioritize() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return nil
	}
	return syscall.Setpriority(syscall.PRIO_PROCESS, s.proc.cmd.Process.Pid, -10)
}
