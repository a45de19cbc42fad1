package testenv

import (
	"sync"
	"syscall"
)

// daemon is a server process that a test can stop, kill and start again: the part
// Redis and MinIO share.
type daemon struct {
	mu sync.Mutex
	p  *proc // the running server, nil when stopped
}

// launch starts the server with start unless it is running.
func (d *daemon) launch(start func() (*proc, error)) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.p != nil && !d.p.exited() {
		return nil
	}
	p, err := start()
	if err != nil {
		return err
	}
	d.p = p
	return nil
}

// Stop shuts the server down with SIGTERM and waits for it to exit (SIGKILL after 15 s).
// It does nothing if the server is not running.
func (d *daemon) Stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.p != nil {
		_ = d.p.signal(syscall.SIGCONT) // a paused server could not handle SIGTERM
		d.p.stop(stopGrace)
		d.p = nil
	}
}

// Kill kills the server with SIGKILL, as a crash would, and waits for it to exit.
func (d *daemon) Kill() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.p != nil {
		d.p.kill()
		d.p = nil
	}
}

// Pid is the running server's process id, or 0 while it is stopped (to read its CPU
// time and memory from /proc, say).
func (d *daemon) Pid() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.p == nil || d.p.exited() {
		return 0
	}
	return d.p.pid()
}

// Pause stops the server with SIGSTOP, as a process that hangs would: its connections
// stay open and its listening socket takes new ones, but nothing is answered until
// Resume. It does nothing if the server is not running.
func (d *daemon) Pause() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.p == nil {
		return nil
	}
	return d.p.signal(syscall.SIGSTOP)
}

// Resume lets a paused server go on (SIGCONT).
func (d *daemon) Resume() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.p == nil {
		return nil
	}
	return d.p.signal(syscall.SIGCONT)
}
