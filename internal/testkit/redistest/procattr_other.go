//go:build !linux

package redistest

import "syscall"

// sysProcAttr has no parent-death signal to ask for outside Linux; t.Cleanup
// alone ends the processes.
func sysProcAttr() *syscall.SysProcAttr { return nil }
