package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// resumeEntry is one upload the CLI started and has not seen complete: the file (by
// absolute path, size and modification time) and the place (server and requested key;
// "" is the server's default key) that identify it, and its upload id.
type resumeEntry struct {
	Path     string    `json:"path"`
	Size     int64     `json:"size"`
	ModTime  time.Time `json:"mtime"`
	Server   string    `json:"server"`
	Key      string    `json:"key"`
	UploadID string    `json:"upload_id"`
	Updated  time.Time `json:"updated"`
}

// samePlace reports whether e and o are uploads of the same path to the same place.
func (e resumeEntry) samePlace(o resumeEntry) bool {
	return e.Path == o.Path && e.Server == o.Server && e.Key == o.Key
}

// resumeForget is how long an entry is kept without use: far beyond the server's
// default time to live of an idle upload (24 h), after which it cannot be resumed.
const resumeForget = 30 * 24 * time.Hour

// resumeState is the file of the uploads the CLI started, so that uploading the same
// file to the same place again resumes the upload instead of starting over. Several
// CLI processes may share it: each change takes an exclusive flock(2) on a lock file
// beside it, reads it, and replaces it whole (write, then rename).
type resumeState struct {
	path string
	mu   sync.Mutex // the goroutines of this process, one at a time
	// What lookup reads: the file as it was at the first lookup of the run. Entries
	// other processes record meanwhile are uploads in progress elsewhere, not for this
	// run to resume, and reading the file once spares each file of a run a lock and a
	// read.
	read    sync.Once
	snap    []resumeEntry
	snapErr error
}

// stateMin is the size up to which a file's upload through chunkup is not recorded:
// the SDK sends such a file in one message (its create and every byte), so an
// interrupted upload of it holds nothing a resume would not send again, and recording
// it cost the state file's lock, read and write twice per file, which held back --jobs
// uploads of many small files (docs/performance.md, run J). A direct upload of any size
// is several requests (create, sign, PUT, complete), so it is recorded.
const stateMin = 5 << 20

// recordable reports whether e's upload (direct or not) is recorded in the state.
func recordable(e resumeEntry, direct bool) bool { return direct || e.Size > stateMin }

// stateDir is where the CLI keeps its state: $CHUNKUP_STATE_DIR, else
// $XDG_STATE_HOME/chunkup, else ~/.local/state/chunkup.
func stateDir() (string, error) {
	if d := os.Getenv("CHUNKUP_STATE_DIR"); d != "" {
		return d, nil
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "chunkup"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".local", "state", "chunkup"), nil
}

func openResumeState() (*resumeState, error) {
	dir, err := stateDir()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &resumeState{path: filepath.Join(dir, "uploads.json")}, nil
}

// lookup returns the id of the upload of e's file to e's place, if the file has not
// changed since (same size and modification time); else, as stale, that of an upload
// of the same path to the same place begun before the file changed (as the file was at
// the run's first lookup).
func (s *resumeState) lookup(e resumeEntry) (id, stale string, err error) {
	s.read.Do(func() {
		s.snapErr = s.update(func(entries []resumeEntry) []resumeEntry {
			s.snap = entries
			return nil // unchanged
		})
	})
	if s.snapErr != nil {
		return "", "", s.snapErr
	}
	for _, o := range s.snap {
		switch {
		case !o.samePlace(e):
		case o.Size == e.Size && o.ModTime.Equal(e.ModTime):
			id = o.UploadID
		default:
			stale = o.UploadID
		}
	}
	return id, stale, nil
}

// record notes e, replacing any entry for the same file and place.
func (s *resumeState) record(e resumeEntry) error {
	e.Updated = time.Now().UTC()
	return s.update(func(entries []resumeEntry) []resumeEntry {
		kept := []resumeEntry{e}
		for _, o := range entries {
			if !o.samePlace(e) {
				kept = append(kept, o)
			}
		}
		return kept
	})
}

// drop forgets upload id (once it completed, or cannot be resumed).
func (s *resumeState) drop(id string) error {
	return s.update(func(entries []resumeEntry) []resumeEntry {
		kept := []resumeEntry{}
		for _, o := range entries {
			if o.UploadID != id {
				kept = append(kept, o)
			}
		}
		if len(kept) == len(entries) {
			return nil
		}
		return kept
	})
}

// update runs fn on the entries under the lock and writes what it returns, unless it
// returns nil. Entries unused for resumeForget are dropped on the way.
func (s *resumeState) update(fn func([]resumeEntry) []resumeEntry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	lock, err := os.OpenFile(s.path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close() // releases the flock
	for {
		err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	var file struct {
		Uploads []resumeEntry `json:"uploads"`
	}
	b, err := os.ReadFile(s.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	default:
		if err := json.Unmarshal(b, &file); err != nil {
			// A damaged file only costs resuming what it listed: start a new one.
			file.Uploads = nil
		}
	}
	entries := fn(file.Uploads)
	if entries == nil {
		return nil
	}
	file.Uploads = make([]resumeEntry, 0, len(entries))
	for _, e := range entries {
		if time.Since(e.Updated) < resumeForget {
			file.Uploads = append(file.Uploads, e)
		}
	}
	if b, err = json.MarshalIndent(file, "", "  "); err != nil {
		return err
	}
	tmp := s.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, s.path)
}
