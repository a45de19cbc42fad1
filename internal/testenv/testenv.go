// Package testenv starts the real servers chunkup's integration tests talk to — a
// redis-server, a MinIO server, a pausable TCP proxy, and chunkup's own binaries — on
// random loopback ports, and stops each of them when the test that started it ends.
//
// Nothing here is a fake: Redis is Debian's redis-server and MinIO is the upstream server
// built with `go install` at a pinned version ([MinIOVersion]) into [CacheDir]/bin. `make
// test` installs both before running the tests; [MinIOBinary] builds MinIO itself when a
// test runs without make.
//
// Every process is started in its own process group and is killed with the whole group
// when its test ends. On Linux each one also gets SIGKILL if the test binary dies
// (Pdeathsig), so a test killed by `-timeout` leaves no servers behind.
//
// The package is for tests only and works on Linux (and, without Pdeathsig, other Unixes).
package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// CacheDir is where chunkup's test and build tools live between runs: $CHUNKUP_CACHE if
// set, else ${XDG_CACHE_HOME:-$HOME/.cache}/chunkup. The Makefile uses the same rule (and
// exports CHUNKUP_CACHE), so `make deps` and the tests agree on it.
func CacheDir() string {
	if d := os.Getenv("CHUNKUP_CACHE"); d != "" {
		return d
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil || home == "" {
			home = os.TempDir()
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "chunkup")
}

// BinDir is CacheDir()/bin, where `make deps` and `make tools` install binaries.
func BinDir() string { return filepath.Join(CacheDir(), "bin") }

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago. Another process
// may take it before the caller binds it; the Start functions retry with a new port when
// a server cannot bind the one it was given.
func FreePort(t TB) int {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatalf("testenv: free port: %v", err)
	}
	return port
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// withFileLock runs fn while holding an exclusive flock(2) on path, so that test binaries
// of several packages (and `make deps`, which uses flock(1) on the same file) do not
// build the same tool at once.
func withFileLock(path string, fn func() error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("lock %s: %w", path, err)
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN) //nolint:errcheck // closing unlocks too
	return fn()
}

// waitFor polls check every interval until it returns nil, exited is closed, or the
// deadline passes. It returns the last error from check.
func waitFor(timeout time.Duration, exited <-chan struct{}, check func() error) error {
	deadline := time.Now().Add(timeout)
	interval := 5 * time.Millisecond
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("process exited before it was ready (last check: %v)", err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %w", timeout, err)
		}
		select {
		case <-exited:
		case <-time.After(interval):
		}
		if interval < 100*time.Millisecond {
			interval *= 2
		}
	}
}

// tailFile returns up to the last n lines of the file at path.
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// lineLogger is an io.Writer that sends each complete line to a TB's log with a
// prefix, and drops everything once closed (a test's log must not be written after the
// test has ended).
type lineLogger struct {
	mu     sync.Mutex
	t      TB
	prefix string
	buf    bytes.Buffer
	closed bool
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return len(p), nil
	}
	l.buf.Write(p)
	for {
		line, err := l.buf.ReadString('\n')
		if err != nil { // no newline yet: keep the partial line
			l.buf.Reset()
			l.buf.WriteString(line)
			return len(p), nil
		}
		l.t.Logf("%s%s", l.prefix, strings.TrimRight(line, "\r\n"))
	}
}

// close flushes a trailing partial line and stops logging.
func (l *lineLogger) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed && l.buf.Len() > 0 {
		l.t.Logf("%s%s", l.prefix, l.buf.String())
	}
	l.closed = true
}

// syncBuffer is a bytes.Buffer safe for one writer and many readers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
