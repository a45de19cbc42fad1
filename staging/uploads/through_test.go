package uploads_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/uploads"
)

// through writes chunk n of id through as a process would: lease, (S3), record.
func through(t *testing.T, s *uploads.Store, id string, n uint32, data []byte, last bool) (uploads.ThroughOutcome, bool, error) {
	t.Helper()
	ref := staging.ChunkRef{UploadID: id, N: n}
	token := ids.NewToken()
	b, err := s.Chunks().BeginThrough(ctxT(t), ref, token, crc.Checksum(data), int64(len(data)), last, time.Minute)
	if err != nil {
		return 0, false, err
	}
	if !b.Begun {
		return 0, false, errStaged
	}
	return s.Chunks().RecordThrough(ctxT(t), ref, token, "etag-"+string(data), crc.Checksum(data), int64(len(data)), last, true)
}

var errStaged = errors.New("BeginThrough said: stage it")

func newStoreClient(t *testing.T) (*uploads.Store, *redis.Client) {
	t.Helper()
	rdb := testenv.StartRedis(t).Client(t)
	return openStore(t, rdb, staging.Config{}), rdb
}

// TestWriteThroughMeetsStagedRecords writes some chunks of an upload through and
// stages the others (one of them uploaded by a worker): the upload's state is what it
// would be had every chunk been staged and uploaded — counters equal to the hashes,
// each chunk listed with its size, CRC32C and stored, the last part making the upload
// ready and indexing its completion — and nothing is left in the pending index or the
// leases.
func TestWriteThroughMeetsStagedRecords(t *testing.T) {
	s, rdb := newStoreClient(t)
	ctx := ctxT(t)
	id := newUpload(t, s, 4, 0) // size unknown: the last chunk sets the total
	chunks := map[uint32][]byte{1: []byte("aaaa"), 2: []byte("bbbb"), 3: []byte("cc")}

	if o, ready, err := through(t, s, id, 2, chunks[2], false); err != nil || o != uploads.ThroughRecorded || ready {
		t.Fatalf("write chunk 2 through: %v %v %v", o, ready, err)
	}
	// Chunk 1 is staged and uploaded by a worker.
	if _, err := stage(t, s, id, 1, chunks[1], false); err != nil {
		t.Fatal(err)
	}
	ref1 := staging.ChunkRef{UploadID: id, N: 1}
	cl, err := s.Chunks().Claim(ctx, ref1, "w", time.Minute)
	if err != nil || cl.Outcome != uploads.Claimed {
		t.Fatalf("claim chunk 1: %+v %v", cl, err)
	}
	if o, _, err := s.Chunks().Record(ctx, ref1, "w", "etag-1", cl.CRC32C, cl.Size); err != nil || o != uploads.Recorded {
		t.Fatalf("record chunk 1: %v %v", o, err)
	}
	// The last chunk, written through, makes it ready.
	o, ready, err := through(t, s, id, 3, chunks[3], true)
	if err != nil || o != uploads.ThroughRecorded || !ready {
		t.Fatalf("write the last chunk through: %v ready %v %v; want recorded and ready", o, ready, err)
	}

	up, err := s.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if up.Total != 3 || up.Uploaded != 3 || up.UploadedBytes != 10 {
		t.Errorf("total %d, uploaded %d (%d bytes); want 3, 3 (10 bytes)", up.Total, up.Uploaded, up.UploadedBytes)
	}
	checkCounters(t, s, rdb, id, []uint32{1, 2, 3}, 10)
	for _, c := range up.Chunks {
		if !c.Stored || c.Size != int64(len(chunks[c.N])) || c.CRC32C != crc.Checksum(chunks[c.N]) {
			t.Errorf("chunk %d: %+v; want stored with its size and CRC32C", c.N, c)
		}
	}
	parts, err := s.Completions().Parts(ctx, id, 3)
	if err != nil || parts[1].ETag != "etag-bbbb" || parts[0].ETag != "etag-1" {
		t.Fatalf("parts %+v %v", parts, err)
	}
	due, err := s.Completions().Due(ctx, 10)
	if err != nil || len(due) != 1 || due[0] != id {
		t.Fatalf("completion index %v %v; want %s", due, err, id)
	}
	if n, _ := s.Chunks().Pending(ctx); n != 0 {
		t.Errorf("%d chunks left in the pending index", n)
	}
	if l, _ := s.Leases(ctx, id); len(l) != 0 {
		t.Errorf("leases left: %v", l)
	}
}

// TestWriteThroughOnlyNewChunks: a chunk received before (staged, stored, or leased
// by another write-through) is not written through, and a refused chunk gets the
// error staging it would.
func TestWriteThroughOnlyNewChunks(t *testing.T) {
	s, rdb := newStoreClient(t)
	ctx := ctxT(t)
	id := newUpload(t, s, 4, 3)
	if _, err := stage(t, s, id, 1, []byte("aaaa"), false); err != nil {
		t.Fatal(err)
	}
	if _, _, err := through(t, s, id, 2, []byte("bbbb"), false); err != nil {
		t.Fatal(err)
	}
	for n, data := range map[uint32][]byte{1: []byte("aaaa"), 2: []byte("bbbb")} {
		if _, _, err := through(t, s, id, n, data, false); !errors.Is(err, errStaged) {
			t.Errorf("chunk %d again: %v; want it staged (Stage decides what a repeat is)", n, err)
		}
	}
	// Another process's write-through of chunk 3 is under way.
	ref3 := staging.ChunkRef{UploadID: id, N: 3}
	if b, err := s.Chunks().BeginThrough(ctx, ref3, "other", 1, 1, true, time.Minute); err != nil || !b.Begun {
		t.Fatalf("begin: %+v %v", b, err)
	}
	if _, _, err := through(t, s, id, 3, []byte("c"), true); !errors.Is(err, errStaged) {
		t.Errorf("a chunk leased to another write-through: %v; want it staged", err)
	}
	// Refusals, as Stage's.
	var oor *staging.OutOfRangeError
	if _, _, err := through(t, s, id, 4, []byte("d"), false); !errors.As(err, &oor) {
		t.Errorf("chunk 4 of 3: %v; want out of range", err)
	}
	var lce *staging.LastChunkError
	if _, _, err := through(t, s, id, 2, []byte("zz"), true); !errors.As(err, &lce) {
		t.Errorf("a second last chunk: %v; want a last-chunk error", err)
	}
	if _, _, err := through(t, s, ids.New(), 1, []byte("a"), false); !errors.Is(err, staging.ErrNotFound) {
		t.Errorf("an unknown upload: %v; want not found", err)
	}
	checkCounters(t, s, rdb, id, []uint32{1, 2}, 8)
}

// TestWriteThroughRacesARepeat: while chunk 2 is written through, a repeat of it is
// staged on another stream (same bytes) — the record finds the staged copy, counts the
// chunk once and drops the staged bytes; with other bytes staged meanwhile the record
// is stale and changes nothing; and after a worker recorded the staged repeat the
// write-through's record is a duplicate.
func TestWriteThroughRacesARepeat(t *testing.T) {
	s, rdb := newStoreClient(t)
	ctx := ctxT(t)
	id := newUpload(t, s, 4, 3)
	data := []byte("bbbb")
	ref := staging.ChunkRef{UploadID: id, N: 2}
	sum := crc.Checksum(data)

	begin := func(token string) {
		t.Helper()
		if b, err := s.Chunks().BeginThrough(ctx, ref, token, sum, 4, false, time.Minute); err != nil || !b.Begun {
			t.Fatalf("begin: %+v %v", b, err)
		}
	}
	record := func(token string, d []byte) uploads.ThroughOutcome {
		t.Helper()
		o, _, err := s.Chunks().RecordThrough(ctx, ref, token, "e", crc.Checksum(d), int64(len(d)), false, true)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}

	// Same bytes staged meanwhile.
	begin("t1")
	if _, err := stage(t, s, id, 2, data, false); err != nil {
		t.Fatal(err)
	}
	if o := record("t1", data); o != uploads.ThroughRecorded {
		t.Fatalf("record with the same bytes staged meanwhile: %v; want recorded", o)
	}
	checkCounters(t, s, rdb, id, []uint32{2}, 4)
	if n, _ := rdb.Exists(ctx, "chunkup:up:{"+id+"}:chunk:2").Result(); n != 0 {
		t.Error("the staged copy of a recorded chunk is still in Redis")
	}

	// Other bytes staged meanwhile (chunk 3): stale, nothing recorded.
	ref3 := staging.ChunkRef{UploadID: id, N: 3}
	if b, err := s.Chunks().BeginThrough(ctx, ref3, "t2", 5, 3, true, time.Minute); err != nil || !b.Begun {
		t.Fatalf("begin 3: %+v %v", b, err)
	}
	if _, err := stage(t, s, id, 3, []byte("ccc"), true); err != nil {
		t.Fatal(err)
	}
	if o, _, err := s.Chunks().RecordThrough(ctx, ref3, "t2", "e3", 5, 3, true, true); err != nil || o != uploads.ThroughStale {
		t.Fatalf("record over other staged bytes: %v %v; want stale", o, err)
	}
	checkCounters(t, s, rdb, id, []uint32{2, 3}, 7)
	up, _ := s.Get(ctx, id)
	if up.Uploaded != 1 {
		t.Errorf("uploaded %d after a stale record; want 1", up.Uploaded)
	}

	// Chunk 1: a worker records the staged repeat first; the write-through's record is a
	// duplicate.
	ref1 := staging.ChunkRef{UploadID: id, N: 1}
	one := []byte("aaaa")
	if b, err := s.Chunks().BeginThrough(ctx, ref1, "t3", crc.Checksum(one), 4, false, time.Second); err != nil || !b.Begun {
		t.Fatalf("begin 1: %+v %v", b, err)
	}
	if _, err := stage(t, s, id, 1, one, false); err != nil {
		t.Fatal(err)
	}
	// A worker: its claim waits for the write-through's lease to lapse.
	later := openStore(t, rdb, staging.Config{Now: func() time.Time { return time.Now().Add(time.Hour) }})
	cl, err := later.Chunks().Claim(ctx, ref1, "w", time.Minute)
	if err != nil || cl.Outcome != uploads.Claimed || !cl.Reclaimed {
		t.Fatalf("claim after the lease: %+v %v", cl, err)
	}
	if o, _, err := s.Chunks().Record(ctx, ref1, "w", "e1", cl.CRC32C, cl.Size); err != nil || o != uploads.Recorded {
		t.Fatalf("worker record: %v %v", o, err)
	}
	if o, _, err := s.Chunks().RecordThrough(ctx, ref1, "t3", "e1", crc.Checksum(one), 4, false, true); err != nil || o != uploads.ThroughDuplicate {
		t.Fatalf("the write-through's record after the worker's: %v %v; want duplicate", o, err)
	}
	checkCounters(t, s, rdb, id, []uint32{1, 2, 3}, 11)
	if up, _ := s.Get(ctx, id); up.Uploaded != 2 {
		t.Errorf("uploaded %d, want 2 (chunks 1 and 2)", up.Uploaded)
	}
}

// TestWriteThroughCrashLeavesNoStrandedUpload: a process that recorded an upload's
// last part written through and died before it indexed the completion leaves the
// chunk in the pending index (as a staged chunk would be), where a worker's claim
// finds it recorded and indexes the completion.
func TestWriteThroughCrashLeavesNoStrandedUpload(t *testing.T) {
	r := testenv.StartRedis(t)
	s := openStore(t, r.Client(t), staging.Config{})
	ctx := ctxT(t)
	id := newUpload(t, s, 4, 1)
	ref := staging.ChunkRef{UploadID: id, N: 1}
	// The record as the dying process made it: the pending entry and the script, then
	// nothing (no completion index, no pending removal).
	if b, err := s.Chunks().BeginThrough(ctx, ref, "t", crc.Checksum([]byte("a")), 1, true, time.Minute); err != nil || !b.Begun {
		t.Fatal(b, err)
	}
	uploads.RecordThroughAndDie(t, s, ref, "t", "e", crc.Checksum([]byte("a")), 1, true)
	if due, _ := s.Completions().Due(ctx, 10); len(due) != 0 {
		t.Fatalf("completion indexed %v before the crash", due)
	}
	later := openStore(t, r.Client(t), staging.Config{Now: func() time.Time { return time.Now().Add(time.Hour) }})
	refs, err := later.Chunks().Due(ctx, 10)
	if err != nil || len(refs) != 1 || refs[0] != ref {
		t.Fatalf("pending after the crash: %v %v; want %v", refs, err, ref)
	}
	if cl, err := later.Chunks().Claim(ctx, ref, "w", time.Minute); err != nil || cl.Outcome != uploads.AlreadyDone {
		t.Fatalf("sweeper's claim: %+v %v; want already done", cl, err)
	}
	if due, _ := later.Completions().Due(ctx, 10); len(due) != 1 || due[0] != id {
		t.Fatalf("completion index after the sweep: %v; want %s", due, id)
	}
}
