//go:build unix && !linux

package testenv

import "syscall"

// sysProcAttr puts the child in its own process group, so it can be signalled together
// with anything it forks. (Only Linux has Pdeathsig.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
