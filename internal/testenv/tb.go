package testenv

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

// TB is the part of testing.TB that testenv uses. testing.TB satisfies it; Main
// provides one for TestMain, so that a package's examples can use real servers too.
type TB interface {
	Helper()
	Cleanup(func())
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Failed() bool
	TempDir() string
}

var _ TB = (testing.TB)(nil)

// Main runs setup with a TB, then the package's tests and examples, then the cleanups
// setup registered; it returns the exit code for os.Exit. A Fatalf in setup fails the
// whole run.
func Main(m *testing.M, setup func(TB)) int {
	return Run(func(tb TB) {
		setup(tb)
		if !tb.Failed() {
			if code := m.Run(); code != 0 {
				tb.Errorf("tests failed (exit code %d)", code)
			}
		}
	})
}

// Run runs f with a TB that logs to stderr, then the cleanups f registered, and returns
// 1 if f failed (a Fatalf ends f at once), else 0. It lets a program that is not a test
// (`make bench`) start real servers the way tests do.
func Run(f func(TB)) (code int) {
	tb := &mainTB{}
	defer tb.cleanup()
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(fatal); !ok {
				panic(r)
			}
			code = 1
		}
	}()
	f(tb)
	if tb.Failed() {
		return 1
	}
	return 0
}

type fatal struct{}

// mainTB is a TB for TestMain: it logs to stderr, and Fatalf unwinds to Main.
type mainTB struct {
	mu       sync.Mutex
	cleanups []func()
	failed   bool
}

func (t *mainTB) Helper()                      {}
func (t *mainTB) Logf(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) }

func (t *mainTB) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

func (t *mainTB) Errorf(format string, a ...any) {
	t.Logf(format, a...)
	t.mu.Lock()
	t.failed = true
	t.mu.Unlock()
}

func (t *mainTB) Fatalf(format string, a ...any) {
	t.Errorf(format, a...)
	panic(fatal{})
}

func (t *mainTB) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

func (t *mainTB) TempDir() string {
	dir, err := os.MkdirTemp("", "chunkup-testmain-*")
	if err != nil {
		t.Fatalf("testenv: temp dir: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func (t *mainTB) cleanup() {
	t.mu.Lock()
	cs := t.cleanups
	t.cleanups = nil
	t.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}

// Context returns a context that ends after d or when the test ends.
func Context(t TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
