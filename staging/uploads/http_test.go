package uploads_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/uploads"
)

// TestAppendLock: one holder at a time; another tenant's or a missing upload cannot be
// locked; renewal and release only by the holder; a lease that runs out frees it.
func TestAppendLock(t *testing.T) {
	s, _ := newStore(t)
	ctx := ctxT(t)
	id := newUpload(t, s, 4, 0)

	if ok, err := s.LockAppend(ctx, id, "", "a", time.Minute); err != nil || !ok {
		t.Fatalf("lock: %v %v", ok, err)
	}
	if ok, err := s.LockAppend(ctx, id, "", "b", time.Minute); err != nil || ok {
		t.Fatalf("second lock: %v %v, want held", ok, err)
	}
	if _, err := s.LockAppend(ctx, id, "other-tenant", "c", time.Minute); !errors.Is(err, staging.ErrNotFound) {
		t.Fatalf("another tenant's lock: %v, want ErrNotFound", err)
	}
	if _, err := s.LockAppend(ctx, ids.New(), "", "c", time.Minute); !errors.Is(err, staging.ErrNotFound) {
		t.Fatalf("lock of a missing upload: %v, want ErrNotFound", err)
	}
	if ok, err := s.RenewAppend(ctx, id, "b", time.Minute); err != nil || ok {
		t.Fatalf("renew by another: %v %v, want false", ok, err)
	}
	if ok, err := s.RenewAppend(ctx, id, "a", time.Minute); err != nil || !ok {
		t.Fatalf("renew by the holder: %v %v", ok, err)
	}
	if err := s.UnlockAppend(ctx, id, "b"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := s.LockAppend(ctx, id, "", "b", time.Minute); ok {
		t.Fatal("another's unlock released the lock")
	}
	if err := s.UnlockAppend(ctx, id, "a"); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.LockAppend(ctx, id, "", "b", 50*time.Millisecond); err != nil || !ok {
		t.Fatalf("lock after release: %v %v", ok, err)
	}
	// b stalls: its lease runs out (Redis' own clock) and c gets the lock.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, err := s.LockAppend(ctx, id, "", "c", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lease never ran out")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ok, _ := s.RenewAppend(ctx, id, "b", time.Minute); ok {
		t.Fatal("a lost lock was renewed")
	}
}

// TestAppendLockFencesWrites: under a lock that is no longer the caller's, Stage and
// DeclareSize are refused with staging.ErrLockLost and change nothing; under the caller's own
// lock, and without one, they work.
func TestAppendLockFencesWrites(t *testing.T) {
	s, _ := newStore(t)
	ctx := ctxT(t)
	id := newUpload(t, s, 4, 0)
	if ok, err := s.LockAppend(ctx, id, "", "mine", time.Minute); err != nil || !ok {
		t.Fatalf("lock: %v %v", ok, err)
	}
	mine := uploads.WithAppendLock(ctx, id, "mine")
	one := []byte("aaaa")
	if _, err := s.Stage(mine, id, 1, one, crc.Checksum(one), false); err != nil {
		t.Fatalf("stage under the lock: %v", err)
	}
	// The lock is lost: another request holds it now.
	if err := s.UnlockAppend(ctx, id, "mine"); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.LockAppend(ctx, id, "", "theirs", time.Minute); err != nil || !ok {
		t.Fatalf("lock by another: %v %v", ok, err)
	}
	before, _ := s.Get(ctx, id)
	two := []byte("bbbb")
	if _, err := s.Stage(mine, id, 2, two, crc.Checksum(two), false); !errors.Is(err, staging.ErrLockLost) {
		t.Fatalf("stage under a lost lock: %v, want staging.ErrLockLost", err)
	}
	if _, err := s.Stage(mine, id, 1, two, crc.Checksum(two), false); !errors.Is(err, staging.ErrLockLost) {
		t.Fatalf("replacing under a lost lock: %v, want staging.ErrLockLost", err)
	}
	if err := s.DeclareSize(mine, id, "", 8); !errors.Is(err, staging.ErrLockLost) {
		t.Fatalf("declare size under a lost lock: %v, want staging.ErrLockLost", err)
	}
	after, _ := s.Get(ctx, id)
	if !slices.Equal(after.ReceivedChunks, before.ReceivedChunks) || after.ReceivedBytes != before.ReceivedBytes ||
		after.ExpectedSize != -1 || after.Chunks[0].CRC32C != crc.Checksum(one) {
		t.Fatalf("a fenced write changed the upload: %+v -> %+v", before, after)
	}
	// A fence names its upload: it does not apply to another one.
	other := newUpload(t, s, 4, 0)
	if _, err := s.Stage(mine, other, 1, one, crc.Checksum(one), false); err != nil {
		t.Fatalf("stage of another upload with this context: %v", err)
	}
	// Without a lock (gRPC), nothing is fenced.
	if _, err := s.Stage(ctx, id, 2, two, crc.Checksum(two), false); err != nil {
		t.Fatalf("stage without a lock: %v", err)
	}
}

// TestDeclareSize: the chunks received must fit the size; the same size again is a
// no-op; another is refused; an upload whose parts are all in S3 when its size is
// declared is ready to complete at once.
func TestDeclareSize(t *testing.T) {
	s, _ := newStore(t)
	ctx := ctxT(t)
	full, short := []byte("aaaa"), []byte("zz")

	t.Run("fits", func(t *testing.T) {
		id := newUpload(t, s, 4, 0)
		for n := uint32(1); n <= 2; n++ {
			if _, err := stage(t, s, id, n, full, false); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.DeclareSize(ctx, id, "", 10); err != nil {
			t.Fatalf("declare: %v", err)
		}
		up, _ := s.Get(ctx, id)
		if up.ExpectedSize != 10 || up.Total != 3 {
			t.Fatalf("after declare: expected %d total %d, want 10 and 3", up.ExpectedSize, up.Total)
		}
		if err := s.DeclareSize(ctx, id, "", 10); err != nil {
			t.Fatalf("the same size again: %v", err)
		}
		var se *staging.SizeError
		if err := s.DeclareSize(ctx, id, "", 12); !errors.As(err, &se) || se.Known != 10 {
			t.Fatalf("another size: %v, want a staging.SizeError knowing 10", err)
		}
		// The last chunk must have the rest: 2 bytes, marked last or not.
		var last *staging.LastChunkError
		if _, err := stage(t, s, id, 3, short, true); err != nil {
			t.Fatalf("last chunk: %v", err)
		}
		if _, err := stage(t, s, id, 2, full, true); !errors.As(err, &last) {
			t.Fatalf("a second last chunk: %v", err)
		}
		if err := s.DeclareSize(ctx, id, "another-tenant", 10); !errors.Is(err, staging.ErrNotFound) {
			t.Fatalf("another tenant: %v, want ErrNotFound", err)
		}
	})

	t.Run("contradicted", func(t *testing.T) {
		id := newUpload(t, s, 4, 0)
		if _, err := stage(t, s, id, 2, full, false); err != nil {
			t.Fatal(err)
		}
		for _, size := range []int64{4, 6, 0} { // chunk 2 beyond the last; chunk 2 not the last's 2 bytes
			var se *staging.SizeError
			if err := s.DeclareSize(ctx, id, "", size); !errors.As(err, &se) || se.N != 2 {
				t.Fatalf("size %d: %v, want a staging.SizeError about chunk 2", size, err)
			}
		}
		up, _ := s.Get(ctx, id)
		if up.ExpectedSize != -1 || up.Total != 0 {
			t.Fatalf("a refused size changed the upload: expected %d total %d", up.ExpectedSize, up.Total)
		}
		// The size a last chunk made known is the only one allowed.
		id2 := newUpload(t, s, 4, 0)
		if _, err := stage(t, s, id2, 1, short, true); err != nil {
			t.Fatal(err)
		}
		if err := s.DeclareSize(ctx, id2, "", 2); err != nil {
			t.Fatalf("the size the last chunk made: %v", err)
		}
		var se *staging.SizeError
		if err := s.DeclareSize(ctx, id2, "", 3); !errors.As(err, &se) || se.Known != 2 {
			t.Fatalf("another size: %v", err)
		}
	})

	t.Run("ready when the parts are stored", func(t *testing.T) {
		id := newUpload(t, s, 4, 0)
		for n := uint32(1); n <= 2; n++ {
			if _, err := stage(t, s, id, n, full, false); err != nil {
				t.Fatal(err)
			}
			ref := staging.ChunkRef{UploadID: id, N: n}
			c, err := s.Chunks().Claim(ctx, ref, "w", time.Minute)
			if err != nil || c.Outcome != uploads.Claimed {
				t.Fatalf("claim: %+v %v", c, err)
			}
			if out, ready, err := s.Chunks().Record(ctx, ref, "w", "etag", crc.Checksum(full), 4); err != nil || out != uploads.Recorded || ready {
				t.Fatalf("record: %v ready %v %v", out, ready, err)
			}
		}
		if due, _ := s.Completions().Due(ctx, 100); slices.Contains(due, id) {
			t.Fatal("an upload of unknown size was ready to complete")
		}
		if err := s.DeclareSize(ctx, id, "", 8); err != nil {
			t.Fatal(err)
		}
		if due, _ := s.Completions().Due(ctx, 100); !slices.Contains(due, id) {
			t.Fatal("the declared size made every part present but the upload is not ready to complete")
		}
		b, err := s.Completions().Begin(ctx, id, "c", time.Minute)
		if err != nil || b.Outcome != staging.Begun || b.Total != 2 {
			t.Fatalf("begin completion: %+v %v", b, err)
		}
	})

	t.Run("ended", func(t *testing.T) {
		id := newUpload(t, s, 4, 0)
		if _, err := s.Ends().End(ctx, uploads.EndRequest{ID: id, Status: staging.StatusAborted, Reason: "test",
			Event: staging.OutboxEvent{ID: ids.New(), Type: "t", UploadID: id}}); err != nil {
			t.Fatal(err)
		}
		var st *staging.StateError
		if err := s.DeclareSize(ctx, id, "", 4); !errors.As(err, &st) || st.Status != staging.StatusAborted {
			t.Fatalf("declare on an aborted upload: %v", err)
		}
		if err := s.DeclareSize(ctx, ids.New(), "", 4); !errors.Is(err, staging.ErrNotFound) {
			t.Fatalf("declare on a missing upload: %v", err)
		}
	})
}
