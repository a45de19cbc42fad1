package uploads_test

import (
	"errors"
	"testing"
	"time"

	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/outbox"
	"github.com/chunkup/chunkup/staging/uploads"
)

// The steps of a small upload share round trips (docs/performance.md); these tests pin
// down that each shared step still leaves Redis as the separate steps did, and that a
// step Redis refuses for memory changes nothing.

// TestReserveBindsOnce: Reserve binds a client_node_id to the first id that asks and
// hands that id to every later one; CreateReserved creates the upload and points its
// node id at it; the same id again creates nothing.
func TestReserveBindsOnce(t *testing.T) {
	s, clk := newStore(t)
	ctx := ctxT(t)
	first, second, anon := ids.New(), ids.New(), ids.New()
	for _, tc := range []struct {
		clientNodeID, id, want string
	}{
		{"cn-1", first, first},
		{"cn-1", second, first}, // bound before: the first id comes back
		{"", anon, anon},        // nothing to bind
	} {
		got, err := s.Reserve(ctx, "acme", tc.clientNodeID, tc.id, clk.Now())
		if err != nil || got != tc.want {
			t.Fatalf("Reserve(%q, %s) = %s, %v; want %s", tc.clientNodeID, tc.id, got, err, tc.want)
		}
	}
	node := ids.NewUUID()
	u := staging.NewUpload{ID: first, Bucket: "b", Key: "k", ChunkSize: 8, ExpectedSize: 3, Total: 1, Tenant: "acme",
		ClientNodeID: "cn-1", Document: staging.Document{NodeID: node}, At: clk.Now()}
	if ok, err := s.CreateReserved(ctx, u); err != nil || !ok {
		t.Fatalf("CreateReserved: %v %v", ok, err)
	}
	if id, err := s.UploadForNode(ctx, "acme", node); err != nil || id != first {
		t.Fatalf("node id names %q, %v; want %s", id, err, first)
	}
	up, err := s.Get(ctx, first)
	if err != nil || up.Status != staging.StatusActive || up.ClientNodeID != "cn-1" || up.NodeID != node {
		t.Fatalf("created upload %+v, %v", up, err)
	}
	list, _, err := s.InProgress(ctx, "acme", "", 10)
	if err != nil || len(list) != 1 || list[0].ID != first {
		t.Fatalf("tenant's uploads in progress: %v %v; want only %s (the other hints lead nowhere)", list, err, first)
	}
	// The same id again (ids collide): nothing created, the node index unchanged.
	other := u
	other.Document.NodeID = ids.NewUUID()
	if ok, err := s.CreateReserved(ctx, other); err != nil || ok {
		t.Fatalf("CreateReserved of an existing id: %v %v; want false", ok, err)
	}
	if id, err := s.UploadForNode(ctx, "acme", node); err != nil || id != first {
		t.Fatalf("node id names %q, %v after the refused create", id, err)
	}
}

// TestSharedRoundTripsOutOfMemory: at maxmemory, Reserve, CreateReserved and Finish
// are refused with ErrFull and change nothing (no binding, no upload, no node index, no
// completion, no event); once memory is freed, the same calls succeed.
func TestSharedRoundTripsOutOfMemory(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := r.Client(t)
	s := openStore(t, rdb, staging.Config{})
	ob, err := outbox.New(rdb, staging.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	full := func() {
		t.Helper()
		if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
			t.Fatal(err)
		}
	}
	free := func() {
		t.Helper()
		if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(free)

	id, node := ids.New(), ids.NewUUID()
	at := s.Now()
	full()
	if _, err := s.Reserve(ctx, "", "cn-oom", id, at); !errors.Is(err, staging.ErrFull) {
		t.Fatalf("Reserve at maxmemory: %v, want ErrFull", err)
	}
	u := staging.NewUpload{ID: id, Bucket: "b", Key: "k", ChunkSize: 8, ExpectedSize: 1, Total: 1,
		ClientNodeID: "cn-oom", Document: staging.Document{NodeID: node}, At: at}
	if _, err := s.CreateReserved(ctx, u); !errors.Is(err, staging.ErrFull) {
		t.Fatalf("CreateReserved at maxmemory: %v, want ErrFull", err)
	}
	free()
	if _, err := s.Get(ctx, id); !errors.Is(err, staging.ErrNotFound) {
		t.Fatalf("upload after the refused create: %v, want ErrNotFound", err)
	}
	if _, err := s.UploadForNode(ctx, "", node); !errors.Is(err, staging.ErrNotFound) {
		t.Fatalf("node index after the refused create: %v, want ErrNotFound", err)
	}
	other := ids.New()
	if got, err := s.Reserve(ctx, "", "cn-oom", other, at); err != nil || got != other {
		t.Fatalf("Reserve after memory was freed: %s %v; want %s (nothing was bound)", got, err, other)
	}
	u.ID = other
	if ok, err := s.CreateReserved(ctx, u); err != nil || !ok {
		t.Fatalf("CreateReserved after memory was freed: %v %v", ok, err)
	}

	// Its one chunk written through, then the completion: begun, and refused at Finish.
	data := []byte("x")
	ref := staging.ChunkRef{UploadID: other, N: 1}
	if b, err := s.Chunks().BeginThrough(ctx, ref, "w", crc.Checksum(data), 1, true, time.Minute); err != nil || !b.Begun {
		t.Fatal(b, err)
	}
	if o, ready, err := s.Chunks().RecordThrough(ctx, ref, "w", "etag", crc.Checksum(data), 1, true, false); err != nil || o != uploads.ThroughRecorded || !ready {
		t.Fatalf("RecordThrough: %v %v %v", o, ready, err)
	}
	b, up, parts, err := s.Completions().BeginSnapshot(ctx, other, "c", time.Minute)
	if err != nil || b.Outcome != staging.Begun || up.Status != staging.StatusCompleting || len(parts) != 1 || parts[0].ETag != "etag" {
		t.Fatalf("BeginSnapshot: %+v %+v %v %v", b, up, parts, err)
	}
	ev := staging.OutboxEvent{ID: ids.New(), Type: "t", Payload: []byte("{}"), Created: s.Now()}
	final := staging.Final{ETag: "etag", Size: 1, CRC32C: crc.Checksum(data)}
	full()
	if err := s.Completions().Finish(ctx, other, "c", final, ev, false); !errors.Is(err, staging.ErrFull) {
		t.Fatalf("Finish at maxmemory: %v, want ErrFull", err)
	}
	free()
	if up, err := s.Get(ctx, other); err != nil || up.Status != staging.StatusCompleting {
		t.Fatalf("upload after the refused finish: %+v %v; want COMPLETING", up, err)
	}
	if evs, _, err := ob.Events(ctx, other); err != nil || len(evs) != 0 {
		t.Fatalf("events after the refused finish: %v %v", evs, err)
	}
	if err := s.Completions().Finish(ctx, other, "c", final, ev, false); err != nil {
		t.Fatalf("Finish after memory was freed: %v", err)
	}
	if due, err := ob.Due(ctx, 10); err != nil || len(due) != 1 || due[0] != other {
		t.Fatalf("outbox index after the finish: %v %v; want %s", due, err, other)
	}
	if up, err := s.Get(ctx, other); err != nil || up.Status != staging.StatusCompleted {
		t.Fatalf("upload after the finish: %+v %v; want COMPLETED", up, err)
	}
	if n, err := s.Active(ctx); err != nil || n != 0 {
		t.Fatalf("active index after the finish: %d %v; want empty", n, err)
	}
}

// TestOneChunkRecordIndexesCompletion: the record of a one-chunk upload whose caller
// completes it itself indexes its completion in the record's round trip, due after
// the grace, and leaves no pending entry: a process killed right after it (nothing
// more to do there) leaves the upload where a completer's sweep finds it.
func TestOneChunkRecordIndexesCompletion(t *testing.T) {
	r := testenv.StartRedis(t)
	s := openStore(t, r.Client(t), staging.Config{})
	ctx := ctxT(t)
	id := newUpload(t, s, 4, 1)
	ref := staging.ChunkRef{UploadID: id, N: 1}
	data := []byte("abc")
	if b, err := s.Chunks().BeginThrough(ctx, ref, "t", crc.Checksum(data), 3, true, time.Minute); err != nil || !b.Begun {
		t.Fatal(b, err)
	}
	if o, ready, err := s.Chunks().RecordThrough(ctx, ref, "t", "e", crc.Checksum(data), 3, true, false); err != nil || o != uploads.ThroughRecorded || !ready {
		t.Fatalf("RecordThrough: %v %v %v", o, ready, err)
	}
	if n, err := s.Chunks().Pending(ctx); err != nil || n != 0 {
		t.Fatalf("pending entries: %d %v; want none", n, err)
	}
	if due, err := s.Completions().Due(ctx, 10); err != nil || len(due) != 0 {
		t.Fatalf("completion due at once: %v %v; want it due after the grace (its caller completes it)", due, err)
	}
	later := openStore(t, r.Client(t), staging.Config{Now: func() time.Time { return time.Now().Add(time.Minute) }})
	if due, err := later.Completions().Due(ctx, 10); err != nil || len(due) != 1 || due[0] != id {
		t.Fatalf("completion index after the grace: %v %v; want %s", due, err, id)
	}
	if b, _, parts, err := later.Completions().BeginSnapshot(ctx, id, "heir", time.Minute); err != nil || b.Outcome != staging.Begun || len(parts) != 1 {
		t.Fatalf("a completer's begin after the crash: %+v %v %v", b, parts, err)
	}
}

// TestAckAllManyOutboxes: a publisher reads several outboxes in one call and
// acknowledges them in one; an outbox whose events were all published leaves the
// index, one with an event left (or a malformed record not dropped) stays, and a
// malformed record named in the acknowledgement is dropped.
func TestAckAllManyOutboxes(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := r.Client(t)
	ob, err := outbox.New(rdb, staging.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := uploads.New(rdb, staging.Config{}, ob, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	end := func(id string) {
		t.Helper()
		ev := staging.OutboxEvent{ID: ids.New(), Type: "t", UploadID: id, Created: s.Now(), Payload: []byte("{}")}
		if _, err := s.Ends().End(ctx, uploads.EndRequest{ID: id, Status: staging.StatusAborted, Reason: "test", Event: ev}); err != nil {
			t.Fatal(err)
		}
	}
	done, kept, bad := newUpload(t, s, 4, 1), newUpload(t, s, 4, 1), newUpload(t, s, 4, 1)
	for _, id := range []string{done, kept, bad} {
		end(id)
	}
	if err := rdb.HSet(ctx, "chunkup:up:{"+bad+"}:outbox", "junk", "not a record").Err(); err != nil {
		t.Fatal(err)
	}
	evs, malformed, err := ob.EventsOf(ctx, []string{done, kept, bad})
	if err != nil || len(evs[done]) != 1 || len(evs[kept]) != 1 || len(evs[bad]) != 1 || len(malformed[bad]) != 1 || malformed[bad][0] != "junk" {
		t.Fatalf("EventsOf: %v %v %v", evs, malformed, err)
	}
	// kept's event is not acknowledged (the broker refused it); bad's malformed record is.
	acked := map[string][]string{done: {evs[done][0].ID}, bad: {evs[bad][0].ID, "junk"}}
	if err := ob.AckAll(ctx, acked); err != nil {
		t.Fatal(err)
	}
	due, err := ob.Due(ctx, 10)
	if err != nil || len(due) != 1 || due[0] != kept {
		t.Fatalf("outbox index after the acknowledgement: %v %v; want only %s", due, err, kept)
	}
	for _, id := range []string{done, bad} {
		if n, err := rdb.HLen(ctx, "chunkup:up:{"+id+"}:outbox").Result(); err != nil || n != 0 {
			t.Fatalf("outbox of %s holds %d records (%v); want none", id, n, err)
		}
	}
}
