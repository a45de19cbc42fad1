package uploads_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/uploads"
)

// A tail is kept under the append lock only, shows in Get, is read back exact, is
// replaced by the next, cannot begin a chunk already received, and is dropped on
// request; a caller that lost the lock changes nothing.
func TestTail(t *testing.T) {
	s, _ := newStore(t)
	ctx := ctxT(t)
	id := newUpload(t, s, 4, 3)
	if ok, err := s.LockAppend(ctx, id, "", "a", time.Minute); err != nil || !ok {
		t.Fatalf("lock: %v %v", ok, err)
	}
	held := uploads.WithAppendLock(ctx, id, "a")
	tail := func() staging.Tail {
		t.Helper()
		u, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return u.Tail
	}

	if err := s.SaveTail(ctx, id, 1, []byte("ab")); err == nil {
		t.Fatal("a tail saved without the lock")
	}
	if err := s.SaveTail(uploads.WithAppendLock(ctx, id, "b"), id, 1, []byte("ab")); !errors.Is(err, staging.ErrLockLost) {
		t.Fatalf("a tail under another's lock: %v, want staging.ErrLockLost", err)
	}
	if got := tail(); got != (staging.Tail{}) {
		t.Fatalf("refused saves left a tail: %+v", got)
	}
	if err := s.SaveTail(held, id, 1, []byte("abc")); err != nil {
		t.Fatal(err)
	}
	want := staging.Tail{N: 1, Size: 3, CRC32C: crc.Checksum([]byte("abc"))}
	if got := tail(); got != want {
		t.Fatalf("tail %+v, want %+v", got, want)
	}
	if data, err := s.ReadTail(ctx, id, want); err != nil || !bytes.Equal(data, []byte("abc")) {
		t.Fatalf("read back %q %v", data, err)
	}
	// Chunk 1 arrives (the tail went into it); a tail for chunk 1 is refused then,
	// and one for chunk 2 replaces the old.
	if _, err := stage(t, s, id, 1, []byte("abcd"), false); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveTail(held, id, 1, []byte("ab")); !errors.Is(err, staging.ErrChunkBusy) {
		t.Fatalf("a tail of a received chunk: %v", err)
	}
	if err := s.SaveTail(held, id, 2, []byte("e")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadTail(ctx, id, want); !errors.Is(err, staging.ErrChunkMissing) {
		t.Fatalf("reading a replaced tail: %v, want ErrChunkMissing", err)
	}
	if err := s.SaveTail(held, id, 2, nil); err != nil {
		t.Fatal(err)
	}
	if got := tail(); got != (staging.Tail{}) {
		t.Fatalf("a dropped tail shows: %+v", got)
	}
}
