package testenv

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is a program started by StartProcess. Its stdout and stderr go to the test log,
// line by line, and are also kept for Stdout and Stderr.
type Process struct {
	// Name prefixes the process's lines in the test log: the binary's base name and pid.
	Name string

	p              *proc
	outLog, errLog *lineLogger
	stdout, stderr syncBuffer
	stopOnce       sync.Once
}

// StartProcess starts the program at path with args. env is added to the test binary's
// own environment (a later entry for the same variable wins). The process runs in its
// own process group; when the test ends it gets SIGTERM and, if it has not exited
// after 15 s, SIGKILL.
func StartProcess(t TB, path string, args []string, env []string) *Process {
	t.Helper()
	pr := &Process{}
	pr.outLog = &lineLogger{t: t}
	pr.errLog = &lineLogger{t: t}
	p, err := startProc(path, args, append(os.Environ(), env...),
		io.MultiWriter(&pr.stdout, pr.outLog), io.MultiWriter(&pr.stderr, pr.errLog))
	if err != nil {
		t.Fatalf("testenv: start %s: %v", path, err)
	}
	pr.p = p
	pr.Name = fmt.Sprintf("%s[%d]", filepath.Base(path), p.pid())
	pr.outLog.setPrefix(pr.Name + " stdout: ")
	pr.errLog.setPrefix(pr.Name + " stderr: ")
	t.Logf("testenv: started %s %s", pr.Name, strings.Join(args, " "))
	t.Cleanup(func() {
		pr.Stop()
		pr.outLog.close()
		pr.errLog.close()
	})
	return pr
}

func (l *lineLogger) setPrefix(prefix string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.prefix = prefix
}

// Pid is the process id (and process group id).
func (pr *Process) Pid() int { return pr.p.pid() }

// Kill sends SIGKILL to the process group, like kill -9, and waits for the process to
// exit. It does nothing if the process has already exited.
func (pr *Process) Kill() {
	pr.p.kill()
	pr.logExit()
}

// Stop sends SIGTERM to the process group and waits for the process to exit, sending
// SIGKILL if it takes longer than 15 s. It does nothing if the process has already exited.
func (pr *Process) Stop() {
	if pr.p.stop(stopGrace) {
		pr.outLog.t.Logf("testenv: %s did not exit %v after SIGTERM; killed it", pr.Name, stopGrace)
	}
	pr.logExit()
}

// Signal sends sig to the process group (e.g. SIGSTOP and SIGCONT to freeze a process).
// It returns os.ErrProcessDone if the process has exited.
func (pr *Process) Signal(sig syscall.Signal) error { return pr.p.signal(sig) }

// Wait waits for the process to exit and returns what exec.Cmd.Wait returned: nil for
// exit status 0, an *exec.ExitError otherwise. It may be called any number of times.
func (pr *Process) Wait() error {
	<-pr.p.done
	pr.logExit()
	return pr.p.err
}

// Done is closed once the process has exited.
func (pr *Process) Done() <-chan struct{} { return pr.p.done }

// ExitCode is the process's exit code, -1 if it was killed by a signal. It waits for the
// process to exit.
func (pr *Process) ExitCode() int {
	<-pr.p.done
	return pr.p.cmd.ProcessState.ExitCode()
}

// Stdout returns everything the process has written to stdout so far.
func (pr *Process) Stdout() string { return pr.stdout.String() }

// Stderr returns everything the process has written to stderr so far.
func (pr *Process) Stderr() string { return pr.stderr.String() }

func (pr *Process) logExit() {
	pr.stopOnce.Do(func() {
		pr.outLog.t.Logf("testenv: %s %s", pr.Name, pr.p.describeExit())
	})
}

type buildResult struct {
	once sync.Once
	path string
	err  error
}

var (
	builds      sync.Map // package path -> *buildResult
	buildDirMu  sync.Mutex
	buildDirVal string
)

// BuildBinary builds the main package pkg (an import path such as
// "github.com/chunkup/chunkup/cmd/chunkup", or a path relative to the test's package
// directory) with `go build` and returns the binary's path. It builds each package once
// per test binary; the result lives in a temporary directory shared by the whole test
// binary, which the next builds remove once it is a day old.
func BuildBinary(t TB, pkg string) string {
	t.Helper()
	v, _ := builds.LoadOrStore(pkg, &buildResult{})
	r := v.(*buildResult)
	r.once.Do(func() {
		start := time.Now()
		r.path, r.err = build(pkg)
		if r.err == nil {
			t.Logf("testenv: built %s in %v", pkg, time.Since(start).Round(time.Millisecond))
		}
	})
	if r.err != nil {
		t.Fatalf("testenv: %v", r.err)
	}
	return r.path
}

func build(pkg string) (string, error) {
	dir, err := buildDir()
	if err != nil {
		return "", err
	}
	name := path.Base(strings.TrimSuffix(pkg, "/"))
	if name == "." || name == "/" || name == "" {
		name = "main"
	}
	// Two packages may share a base name; keep their binaries apart.
	sub, err := os.MkdirTemp(dir, name+"-")
	if err != nil {
		return "", err
	}
	out := filepath.Join(sub, name)
	cmd := exec.Command(goCommand(), "build", "-o", out, pkg)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return out, nil
}

const buildDirPrefix = "chunkup-testbin-"

func buildDir() (string, error) {
	buildDirMu.Lock()
	defer buildDirMu.Unlock()
	if buildDirVal != "" {
		return buildDirVal, nil
	}
	// Remove what earlier test binaries left, once it is old enough not to be in use.
	old, _ := filepath.Glob(filepath.Join(os.TempDir(), buildDirPrefix+"*"))
	for _, d := range old {
		if fi, err := os.Stat(d); err == nil && time.Since(fi.ModTime()) > 24*time.Hour {
			_ = os.RemoveAll(d)
		}
	}
	d, err := os.MkdirTemp("", buildDirPrefix)
	if err != nil {
		return "", err
	}
	buildDirVal = d
	return d, nil
}

// goCommand is the go command that runs the tests: `go test` puts its GOROOT/bin first
// on PATH.
func goCommand() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "go"
}

// WaitReady waits until p answers 200 on http://httpAddr/readyz (see Ready), and fails
// the test if it does not within a minute.
func WaitReady(t TB, p *Process, httpAddr string) {
	t.Helper()
	if err := Ready(p, httpAddr); err != nil {
		t.Fatalf("testenv: %v", err)
	}
}

// Ready waits until p answers 200 on http://httpAddr/readyz. It returns an error if p
// exits first (wrapping ErrAddrInUse when it could not bind an address) or is not ready
// within a minute.
func Ready(p *Process, httpAddr string) error {
	hc := &http.Client{Timeout: 2 * time.Second}
	defer hc.CloseIdleConnections()
	err := waitFor(time.Minute, p.Done(), func() error {
		resp, err := hc.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz: %s", resp.Status)
		}
		return nil
	})
	if err == nil {
		return nil
	}
	select {
	case <-p.Done():
		_ = p.Wait() // its output is all in
		if strings.Contains(p.Stderr(), "address already in use") {
			return fmt.Errorf("%s exited before it was ready: %w (%v)", p.Name, ErrAddrInUse, err)
		}
	default:
	}
	return fmt.Errorf("%s not ready: %w", p.Name, err)
}

// ErrAddrInUse says a process could not bind one of its addresses.
var ErrAddrInUse = errors.New("address already in use")
