//go:build !linux

package main

import (
	"os"
	"syscall"
	"time"
)

// exitWithParent sends this process SIGTERM once the process that started it has
// exited (it is then adopted, and its parent id changes): `go run` killed leaves its
// child running otherwise. SIGTERM takes the same path as Ctrl-C.
func exitWithParent() error {
	parent := os.Getppid()
	go func() {
		for os.Getppid() == parent {
			time.Sleep(500 * time.Millisecond)
		}
		_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
	}()
	return nil
}
