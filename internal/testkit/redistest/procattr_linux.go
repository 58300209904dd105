package redistest

import "syscall"

// sysProcAttr makes the kernel SIGKILL the child if the test binary dies
// without running its cleanups (a -timeout panic, a crash). It is a backstop:
// the signal follows the OS thread that started the child, and t.Cleanup
// remains the way processes end.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
