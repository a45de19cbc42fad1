package testenv

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// stopGrace is how long Stop waits after SIGTERM before it sends SIGKILL.
const stopGrace = 15 * time.Second

// proc is one started child process, reaped by its own goroutine.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has been reaped
	err  error         // cmd.Wait's result, valid once done is closed
}

func startProc(path string, args, env []string, stdout, stderr io.Writer) (*proc, error) {
	cmd := exec.Command(path, args...)
	cmd.Env = env
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	cmd.SysProcAttr = sysProcAttr()
	// If something the child forked keeps its stdout open, stop waiting for it after a
	// while instead of hanging the test.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process's whole group, unless it has already been reaped.
func (p *proc) signal(sig syscall.Signal) error {
	if p.exited() {
		return os.ErrProcessDone
	}
	// The group id is the child's pid (Setpgid). While the child is not yet reaped its
	// pid cannot be reused; the window between reaping and p.done closing is tiny.
	err := syscall.Kill(-p.pid(), sig)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

// kill sends SIGKILL to the group and waits for the process to be reaped.
func (p *proc) kill() {
	_ = p.signal(syscall.SIGKILL)
	<-p.done
}

// stop sends SIGTERM to the group and waits up to grace for it to exit, then kills it.
// It reports whether SIGKILL was needed.
func (p *proc) stop(grace time.Duration) (killed bool) {
	if p.signal(syscall.SIGTERM) != nil {
		<-p.done
		return false
	}
	_ = p.signal(syscall.SIGCONT) // a stopped (SIGSTOP) process acts on SIGTERM only once continued
	select {
	case <-p.done:
		return false
	case <-time.After(grace):
		p.kill()
		return true
	}
}

// describeExit says how a reaped process ended: "exit status 0", "exit status 3",
// "signal: killed".
func (p *proc) describeExit() string {
	<-p.done
	if p.err == nil {
		return "exit status 0"
	}
	return p.err.Error()
}
