package testenv

import "syscall"

// sysProcAttr puts the child in its own process group (so it can be signalled together
// with anything it forks) and has the kernel SIGKILL it if the test binary dies.
//
// Pdeathsig fires when the OS thread that started the child exits, not the process; Go
// only ends threads whose goroutine exits while locked to one, which this package never
// does, so in practice it fires when the test binary dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
