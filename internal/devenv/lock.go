package devenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// LockFile is the file in the data directory that one process at a time holds an
// exclusive flock(2) on; it contains the holder's process id.
const LockFile = "dev.lock"

// LockedError means another process holds the data directory.
type LockedError struct {
	Dir string
	// PID is the holder's process id, 0 when it could not be read.
	PID int
}

func (e *LockedError) Error() string {
	if e.PID == 0 {
		return fmt.Sprintf("data directory %s is in use by another process (another chunkup dev?)", e.Dir)
	}
	return fmt.Sprintf("data directory %s is in use by process %d (another chunkup dev?)", e.Dir, e.PID)
}

// lockDir takes the data directory's lock, or fails at once with a *LockedError. The
// kernel drops a flock when its holder dies, however it dies, so a lock is never
// stale; the file is opened close-on-exec, so redis-server does not inherit it.
func lockDir(dir string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &LockedError{Dir: dir, PID: readPID(path)}
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

func readPID(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}
