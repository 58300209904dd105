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
