package main

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// exitWithParent has the kernel send this process SIGTERM when the process that started
// it exits, however it exits: `go run` killed leaves its child running otherwise. SIGTERM
// takes the same path as Ctrl-C, a graceful shutdown that stops redis-server too.
func exitWithParent() error {
	parent := os.Getppid()
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGTERM), 0, 0, 0); err != nil {
		return err
	}
	if os.Getppid() != parent { // the parent exited before the request took effect
		return syscall.Kill(os.Getpid(), syscall.SIGTERM)
	}
	return nil
}
