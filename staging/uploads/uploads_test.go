package uploads_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/outbox"
	"github.com/chunkup/chunkup/staging/uploads"
)

func newStore(t *testing.T) (*uploads.Store, *testenv.Clock) {
	t.Helper()
	r := testenv.StartRedis(t)
	clk := testenv.NewClock(time.Unix(1_800_000_000, 0))
	return openStore(t, r.Client(t), staging.Config{Now: clk.Now}), clk
}

// openStore opens the uploads store (with its outbox) on client.
func openStore(t *testing.T, client redis.UniversalClient, cfg staging.Config) *uploads.Store {
	t.Helper()
	ob, err := outbox.New(client, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := uploads.New(client, cfg, ob, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newUpload creates an upload of total chunks of chunkSize bytes (total 0: unknown size).
func newUpload(t *testing.T, s *uploads.Store, chunkSize int64, total uint32) string {
	t.Helper()
	id := ids.New()
	u := staging.NewUpload{ID: id, Bucket: "b", Key: "k", ChunkSize: chunkSize, ExpectedSize: -1, Total: total}
	if total > 0 {
		u.ExpectedSize = int64(total) * chunkSize
	}
	ok, err := s.Create(ctxT(t), u)
	if err != nil || !ok {
		t.Fatalf("create: %v %v", ok, err)
	}
	return id
}

func stage(t *testing.T, s *uploads.Store, id string, n uint32, data []byte, last bool) (staging.StageResult, error) {
	t.Helper()
	return s.Stage(ctxT(t), id, n, data, crc.Checksum(data), last)
}

func TestStageIsIdempotent(t *testing.T) {
	s, _ := newStore(t)
	ctx := ctxT(t)
	id := newUpload(t, s, 4, 0)
	a, b := []byte("aaaa"), []byte("bbbb")

	if res, err := stage(t, s, id, 1, a, false); err != nil || res.Duplicate {
		t.Fatalf("first stage: %+v %v", res, err)
	}
	res, err := stage(t, s, id, 1, a, false)
	if err != nil || !res.Duplicate {
		t.Fatalf("repeat: %+v %v, want duplicate", res, err)
	}
	up, _ := s.Get(ctx, id)
	if len(up.ReceivedChunks) != 1 || up.ReceivedBytes != 4 {
		t.Fatalf("after repeat: received %v, %d bytes; want [1], 4", up.ReceivedChunks, up.ReceivedBytes)
	}

	// Different bytes before the part is recorded replace the staged ones.
	if res, err := stage(t, s, id, 1, b, false); err != nil || res.Duplicate {
		t.Fatalf("replace: %+v %v", res, err)
	}
	claim, err := s.Chunks().Claim(ctx, staging.ChunkRef{UploadID: id, N: 1}, "w1", time.Minute)
	if err != nil || claim.Outcome != uploads.Claimed {
		t.Fatalf("claim: %+v %v", claim, err)
	}
	data, err := s.Chunks().Data(ctx, claim.Ref, time.Minute)
	if err != nil || string(data) != "bbbb" || claim.CRC32C != crc.Checksum(b) {
		t.Fatalf("staged bytes %q crc %08x, want bbbb", data, claim.CRC32C)
	}
	// While a worker holds the chunk it cannot be replaced.
	if _, err := stage(t, s, id, 1, a, false); !errors.Is(err, staging.ErrChunkBusy) {
		t.Fatalf("replace while claimed: %v, want ErrChunkBusy", err)
	}
	if out, _, err := s.Chunks().Record(ctx, claim.Ref, "w1", "etag1", claim.CRC32C, 4); err != nil || out != uploads.Recorded {
		t.Fatalf("record: %v %v", out, err)
	}
	// After the part is recorded: same bytes are a repeat, other bytes an error.
	if res, err := stage(t, s, id, 1, b, false); err != nil || !res.Duplicate {
		t.Fatalf("repeat after record: %+v %v", res, err)
	}
	var pre *staging.PartRecordedError
	if _, err := stage(t, s, id, 1, a, false); !errors.As(err, &pre) {
		t.Fatalf("other bytes after record: %v, want PartRecordedError", err)
	}
	if _, err := s.Chunks().Data(ctx, claim.Ref, time.Minute); !errors.Is(err, staging.ErrChunkMissing) {
		t.Fatalf("staged bytes after record: %v, want them gone", err)
	}
}

func TestStageRejectsWithoutChangingState(t *testing.T) {
	s, _ := newStore(t)
	ctx := ctxT(t)
	id := newUpload(t, s, 4, 0)
	if _, err := stage(t, s, id, 2, []byte("xx"), true); err != nil {
		t.Fatal(err)
	}
	before, _ := s.Get(ctx, id)
	var oor *staging.OutOfRangeError
	var last *staging.LastChunkError
	for name, tc := range map[string]struct {
		n     uint32
		last  bool
		check func(error) bool
	}{
		"beyond last":    {3, false, func(err error) bool { return errors.As(err, &oor) && oor.Total == 2 }},
		"second last":    {1, true, func(err error) bool { return errors.As(err, &last) && last.Last == 2 }},
		"unknown upload": {1, false, nil},
	} {
		t.Run(name, func(t *testing.T) {
			target := id
			if tc.check == nil {
				target = ids.New()
			}
			_, err := stage(t, s, target, tc.n, []byte("zzzz"), tc.last)
			if tc.check == nil && !errors.Is(err, staging.ErrNotFound) || tc.check != nil && !tc.check(err) {
				t.Fatalf("err = %v", err)
			}
			after, _ := s.Get(ctx, id)
			if after.ReceivedBytes != before.ReceivedBytes || len(after.ReceivedChunks) != len(before.ReceivedChunks) || after.Total != before.Total {
				t.Fatalf("state changed: %+v -> %+v", before, after)
			}
		})
	}
	// A higher chunk already received forbids an earlier last chunk.
	id2 := newUpload(t, s, 4, 0)
	if _, err := stage(t, s, id2, 3, []byte("cccc"), false); err != nil {
		t.Fatal(err)
	}
	if _, err := stage(t, s, id2, 2, []byte("cc"), true); !errors.As(err, &last) || last.Max != 3 {
		t.Fatalf("last below a received chunk: %v", err)
	}
}

func TestClaimHasOneWinnerAndLeaseExpires(t *testing.T) {
	s, clk := newStore(t)
	ctx := ctxT(t)
	id := newUpload(t, s, 4, 1)
	if _, err := stage(t, s, id, 1, []byte("abcd"), true); err != nil {
		t.Fatal(err)
	}
	ref := staging.ChunkRef{UploadID: id, N: 1}
	var wins atomic.Int32
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			c, err := s.Chunks().Claim(ctx, ref, ids.NewToken(), 10*time.Second)
			if err != nil {
				t.Error(err)
				return
			}
			if c.Outcome == uploads.Claimed {
				wins.Add(1)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d claims won, want exactly 1", wins.Load())
	}
	// The winner dies. Before its lease ends nobody else gets the chunk; after, one does.
	if c, _ := s.Chunks().Claim(ctx, ref, "late", 10*time.Second); c.Outcome != uploads.Busy {
		t.Fatalf("claim during lease: %v, want Busy", c.Outcome)
	}
	clk.Add(11 * time.Second)
	c, err := s.Chunks().Claim(ctx, ref, "heir", 10*time.Second)
	if err != nil || c.Outcome != uploads.Claimed {
		t.Fatalf("claim after lease: %+v %v", c, err)
	}
	// The staged bytes survive the dead worker and are there for the heir.
	if data, err := s.Chunks().Data(ctx, ref, time.Minute); err != nil || string(data) != "abcd" {
		t.Fatalf("chunk after reclaim: %q %v", data, err)
	}
	// A worker that lost its lease cannot record the part.
	if out, _, _ := s.Chunks().Record(ctx, ref, "late", "e", c.CRC32C, 4); out != uploads.LeaseLost {
		t.Fatalf("record by a non-holder: %v, want LeaseLost", out)
	}
	out, ready, err := s.Chunks().Record(ctx, ref, "heir", "e", c.CRC32C, 4)
	if err != nil || out != uploads.Recorded || !ready {
		t.Fatalf("record by the holder: %v ready=%v %v", out, ready, err)
	}
}

func TestPendingIndexFindsChunksWithoutWakeUps(t *testing.T) {
	s, clk := newStore(t)
	ctx := ctxT(t)
	id := newUpload(t, s, 4, 2)
	for n := uint32(1); n <= 2; n++ {
		if _, err := stage(t, s, id, n, []byte("abcd"), n == 2); err != nil {
			t.Fatal(err)
		}
	}
	if due, _ := s.Chunks().Due(ctx, 10); len(due) != 0 {
		t.Fatalf("due right after staging: %v; wake-ups get a grace period first", due)
	}
	clk.Add(3 * time.Second)
	due, err := s.Chunks().Due(ctx, 10)
	if err != nil || len(due) != 2 {
		t.Fatalf("due after grace: %v %v, want both chunks", due, err)
	}
	// Recording the chunk's part removes it from the index.
	c, _ := s.Chunks().Claim(ctx, due[0], "w", time.Second)
	if out, _, _ := s.Chunks().Record(ctx, due[0], "w", "e", c.CRC32C, c.Size); out != uploads.Recorded {
		t.Fatal("record failed")
	}
	if due, _ := s.Chunks().Due(ctx, 10); len(due) != 1 {
		t.Fatalf("due after one part: %v", due)
	}
}

// A sweeper sleeps past an idle index on what DueNext says of the next entry, so it
// must be the earliest over every shard, and zero when more are due than were asked for.
func TestDueNextSaysWhenTheNextChunkFallsDue(t *testing.T) {
	for _, tc := range []struct {
		name   string
		client func(t *testing.T) redis.UniversalClient
	}{
		{"one Redis", func(t *testing.T) redis.UniversalClient { return testenv.StartRedis(t).Client(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return testenv.StartRedisCluster(t).Client(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Unix(1_800_000_000, 0)
			clk := testenv.NewClock(start)
			client := tc.client(t)
			s := openStore(t, client, staging.Config{Now: clk.Now})
			ctx := ctxT(t)
			if refs, next, err := s.Chunks().DueNext(ctx, 10); err != nil || len(refs) != 0 || next >= 0 {
				t.Fatalf("empty index: %v next %v, %v; want none and a negative next", refs, next, err)
			}
			// Four uploads (over several shards on a cluster), staged a second apart: due
			// 2 s (the wake-up grace) after each.
			var ids []string
			for range 4 {
				id := newUpload(t, s, 4, 1)
				if _, err := stage(t, s, id, 1, []byte("abcd"), true); err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
				clk.Add(time.Second)
			}
			// Seen 2.5 s after the first: one is due, the next (of three not due, on other
			// shards on a cluster) in 0.5 s.
			early := openStore(t, client, staging.Config{Now: testenv.NewClock(start.Add(2500 * time.Millisecond)).Now})
			if refs, next, err := early.Chunks().DueNext(ctx, 10); err != nil || len(refs) != 1 || refs[0].UploadID != ids[0] || next != 500*time.Millisecond {
				t.Fatalf("DueNext at 2.5 s = %v next %v, %v; want the first upload's chunk and 500ms", refs, next, err)
			}
			// Now is 4 s after the first: three are due, the fourth in 1 s.
			refs, next, err := s.Chunks().DueNext(ctx, 10)
			if err != nil || len(refs) != 3 || next != time.Second {
				t.Fatalf("DueNext(10) = %v next %v, %v; want the first three uploads' chunks and 1s", refs, next, err)
			}
			for i, ref := range refs {
				if ref.UploadID != ids[i] {
					t.Fatalf("DueNext(10) = %v; want the uploads in the order they fell due: %v", refs, ids[:3])
				}
			}
			refs, next, err = s.Chunks().DueNext(ctx, 1)
			if err != nil || len(refs) != 1 || refs[0].UploadID != ids[0] || next != 0 {
				t.Fatalf("DueNext(1) = %v next %v, %v; want the first upload's chunk and 0 (more are due)", refs, next, err)
			}
			clk.Add(time.Minute)
			if refs, next, err = s.Chunks().DueNext(ctx, 10); err != nil || len(refs) != 4 || next >= 0 {
				t.Fatalf("all due: %v next %v, %v; want 4 and a negative next", refs, next, err)
			}
		})
	}
}

func TestCompletionGuardIsTakenOnce(t *testing.T) {
	s, clk := newStore(t)
	ctx := ctxT(t)
	id := newUpload(t, s, 4, 1)
	if b, _ := s.Completions().Begin(ctx, id, "c1", 10*time.Second); b.Outcome != staging.NotReady {
		t.Fatalf("begin before parts: %v, want NotReady", b.Outcome)
	}
	if _, err := stage(t, s, id, 1, []byte("abcd"), true); err != nil {
		t.Fatal(err)
	}
	ref := staging.ChunkRef{UploadID: id, N: 1}
	c, _ := s.Chunks().Claim(ctx, ref, "w", time.Second)
	if _, _, err := s.Chunks().Record(ctx, ref, "w", "etag", c.CRC32C, 4); err != nil {
		t.Fatal(err)
	}
	var begun atomic.Int32
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			b, err := s.Completions().Begin(ctx, id, string(rune('a'+i)), 10*time.Second)
			if err == nil && b.Outcome == staging.Begun {
				begun.Add(1)
			}
		})
	}
	wg.Wait()
	if begun.Load() != 1 {
		t.Fatalf("%d completers took the guard, want 1", begun.Load())
	}
	// The holder dies; after its lease a new completer takes over and finishes.
	clk.Add(11 * time.Second)
	if b, _ := s.Completions().Begin(ctx, id, "heir", 10*time.Second); b.Outcome != staging.Begun {
		t.Fatalf("begin after lease: %v", b.Outcome)
	}
	if err := s.Completions().Finish(ctx, id, "a", staging.Final{ETag: "x", Size: 4, CRC32C: 1}, staging.OutboxEvent{}, false); !errors.Is(err, staging.ErrGuardLost) {
		t.Fatalf("finish by the dead holder: %v, want ErrGuardLost", err)
	}
	if err := s.Completions().Finish(ctx, id, "heir", staging.Final{ETag: "etag", Size: 4, CRC32C: c.CRC32C}, staging.OutboxEvent{ID: "ev1", Type: "t"}, false); err != nil {
		t.Fatal(err)
	}
	up, _ := s.Get(ctx, id)
	if up.Status != staging.StatusCompleted || up.ETag != "etag" || up.Size != 4 {
		t.Fatalf("after finish: %+v", up)
	}
	if b, _ := s.Completions().Begin(ctx, id, "late", 10*time.Second); b.Outcome != staging.Finished {
		t.Fatalf("begin after completion: %v, want Finished", b.Outcome)
	}
}

func TestParseChunkRef(t *testing.T) {
	for in, want := range map[string]bool{"abc/1": true, "abc/0": false, "/1": false, "abc": false, "abc/x": false, "a/b/7": true} {
		if _, ok := staging.ParseChunkRef(in); ok != want {
			t.Errorf("ParseChunkRef(%q) ok = %v, want %v", in, ok, want)
		}
	}
	ref := staging.ChunkRef{UploadID: ids.New(), N: 42}
	if got, ok := staging.ParseChunkRef(ref.String()); !ok || got != ref {
		t.Errorf("round trip of %v = %v", ref, got)
	}
}

// TestRepeatRestagesExpiredBytes: when a chunk's staged bytes expired before any worker
// uploaded them, the client's repeat of the same bytes stages them again (instead of
// being acknowledged as a duplicate of bytes that no longer exist).
func TestRepeatRestagesExpiredBytes(t *testing.T) {
	r := testenv.StartRedis(t)
	s := openStore(t, r.Client(t), staging.Config{ChunkTTL: time.Second})
	ctx := ctxT(t)
	id := newUpload(t, s, 4, 0)
	if _, err := stage(t, s, id, 1, []byte("abcd"), false); err != nil {
		t.Fatal(err)
	}
	ref := staging.ChunkRef{UploadID: id, N: 1}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := s.Chunks().Claim(ctx, ref, "probe", time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if c.Outcome == uploads.Expired {
			break
		}
		if c.Outcome == uploads.Claimed {
			_ = s.Chunks().Release(ctx, ref, "probe", time.Now())
		}
		if time.Now().After(deadline) {
			t.Fatal("staged bytes never expired")
		}
		time.Sleep(50 * time.Millisecond) // waiting for Redis' own TTL to pass
	}
	res, err := stage(t, s, id, 1, []byte("abcd"), false)
	if err != nil || res.Duplicate {
		t.Fatalf("repeat after expiry: %+v %v; want it staged again", res, err)
	}
	if data, err := s.Chunks().Data(ctx, ref, time.Minute); err != nil || string(data) != "abcd" {
		t.Fatalf("bytes after the repeat: %q %v", data, err)
	}
}

// TestClaimReportsReclaim: a claim says whether it took over another worker's expired
// lease (the lease-reclaim metric), and only then.
func TestClaimReportsReclaim(t *testing.T) {
	s, clk := newStore(t)
	ctx := ctxT(t)
	id := newUpload(t, s, 4, 2)
	for n := uint32(1); n <= 2; n++ {
		if _, err := stage(t, s, id, n, []byte("abcd"), n == 2); err != nil {
			t.Fatal(err)
		}
	}
	ref := staging.ChunkRef{UploadID: id, N: 1}
	c, err := s.Chunks().Claim(ctx, ref, "first", 10*time.Second)
	if err != nil || c.Outcome != uploads.Claimed || c.Reclaimed {
		t.Fatalf("first claim: %+v %v, want Claimed, not reclaimed", c, err)
	}
	clk.Add(11 * time.Second) // "first" died
	c, err = s.Chunks().Claim(ctx, ref, "heir", 10*time.Second)
	if err != nil || c.Outcome != uploads.Claimed || !c.Reclaimed {
		t.Fatalf("claim after an expired lease: %+v %v, want Claimed and reclaimed", c, err)
	}

	// A lease given back is no reclaim.
	ref2 := staging.ChunkRef{UploadID: id, N: 2}
	if c, _ = s.Chunks().Claim(ctx, ref2, "a", 10*time.Second); c.Outcome != uploads.Claimed {
		t.Fatalf("claim chunk 2: %+v", c)
	}
	if err := s.Chunks().Release(ctx, ref2, "a", clk.Now()); err != nil {
		t.Fatal(err)
	}
	if c, _ = s.Chunks().Claim(ctx, ref2, "b", 10*time.Second); c.Outcome != uploads.Claimed || c.Reclaimed {
		t.Fatalf("claim after a release: %+v, want Claimed, not reclaimed", c)
	}
}

// TestOutboxOldest reads when the longest-waiting outbox got its event.
func TestOutboxOldest(t *testing.T) {
	r := testenv.StartRedis(t)
	clk := testenv.NewClock(time.Unix(1_800_000_000, 0))
	cfg := staging.Config{Now: clk.Now}
	ob, err := outbox.New(r.Client(t), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := uploads.New(r.Client(t), cfg, ob, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if _, ok, err := ob.Oldest(ctx); ok || err != nil {
		t.Fatalf("empty outbox index: ok=%v err=%v", ok, err)
	}
	first := clk.Now()
	var upIDs []string
	for i := range 2 {
		id := newUpload(t, s, 4, 1)
		ev := staging.OutboxEvent{ID: ids.New(), Type: "t", UploadID: id, Created: clk.Now(), Payload: []byte("{}")}
		if _, err := s.Ends().End(ctx, uploads.EndRequest{ID: id, Status: staging.StatusAborted, Reason: "test", Event: ev}); err != nil {
			t.Fatal(err)
		}
		upIDs = append(upIDs, id)
		if i == 0 {
			clk.Add(5 * time.Second)
		}
	}
	got, ok, err := ob.Oldest(ctx)
	if err != nil || !ok || !got.Equal(first) {
		t.Fatalf("oldest outbox %v ok=%v err=%v, want %v", got, ok, err, first)
	}
	if err := ob.Ack(ctx, upIDs[0]); err != nil { // not empty yet: it stays
		t.Fatal(err)
	}
	evs, _, _ := ob.Events(ctx, upIDs[0])
	if err := ob.Ack(ctx, upIDs[0], evs[0].ID); err != nil {
		t.Fatal(err)
	}
	evs, _, _ = ob.Events(ctx, upIDs[1])
	if err := ob.Ack(ctx, upIDs[1], evs[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := ob.Oldest(ctx); ok || err != nil {
		t.Fatalf("after publishing everything: ok=%v err=%v", ok, err)
	}
}

// TestNodeIndex: a tenant's node id names the latest upload that carries it, whatever
// order the writes come in (the document's creation writes it again, later); node ids
// are per tenant; the longer TTL wins.
func TestNodeIndex(t *testing.T) {
	s, clk := newStore(t)
	ctx := ctxT(t)
	node := ids.NewUUID()
	older, newer := ids.New(), ids.New()
	t0 := clk.Now()
	if _, err := s.UploadForNode(ctx, "", node); !errors.Is(err, staging.ErrNotFound) {
		t.Fatalf("unknown node id: %v, want ErrNotFound", err)
	}
	if err := s.IndexNode(ctx, "", node, newer, t0.Add(time.Second), time.Hour); err != nil {
		t.Fatal(err)
	}
	// The older upload's document is created later: it must not take the node id back.
	if err := s.IndexNode(ctx, "", node, older, t0, 30*24*time.Hour); err != nil {
		t.Fatal(err)
	}
	if id, err := s.UploadForNode(ctx, "", node); err != nil || id != newer {
		t.Fatalf("node id names %q, %v; want the newer upload %s", id, err, newer)
	}
	if _, err := s.UploadForNode(ctx, "acme", node); !errors.Is(err, staging.ErrNotFound) {
		t.Fatalf("another tenant's node id: %v, want ErrNotFound", err)
	}
	if err := s.IndexNode(ctx, "", node, newer, t0.Add(time.Second), time.Minute); err != nil { // a shorter TTL again
		t.Fatal(err)
	}
	if id, err := s.UploadForNode(ctx, "", node); err != nil || id != newer {
		t.Fatalf("node id names %q, %v after a repeat", id, err)
	}
}

// TestDocumentFieldsStored: an upload's document identity and place come back as
// created, and its first chunk's time is recorded when it is staged.
func TestDocumentFieldsStored(t *testing.T) {
	s, clk := newStore(t)
	ctx := ctxT(t)
	id := ids.New()
	doc := staging.Document{NodeID: ids.NewUUID(), ConnectorID: "c", ParentID: "p", Path: "/a/b", Drive: "d", CustomMetadata: `{"k":[1,2]}`}
	if ok, err := s.Create(ctx, staging.NewUpload{ID: id, Bucket: "b", Key: "k", ChunkSize: 8, ExpectedSize: 3, Total: 1,
		InstanceID: "api-1", Document: doc}); err != nil || !ok {
		t.Fatalf("create: %v %v", ok, err)
	}
	u, err := s.Get(ctx, id)
	if err != nil || u.Document != doc || u.InstanceID != "api-1" || !u.FirstChunk.IsZero() {
		t.Fatalf("upload %+v %v", u, err)
	}
	clk.Add(time.Minute)
	if _, err := s.Stage(ctx, id, 1, []byte("abc"), crc.Checksum([]byte("abc")), true); err != nil {
		t.Fatal(err)
	}
	if u, err = s.Get(ctx, id); err != nil || !u.FirstChunk.Equal(clk.Now()) {
		t.Fatalf("first chunk at %v (%v), want %v", u.FirstChunk, err, clk.Now())
	}
}

// TestFinishWithoutEventIndexesNoOutbox: a completion that announces nothing (a partial
// upload's) leaves nothing in the outbox index for the publisher to visit; one with an
// event is indexed.
func TestFinishWithoutEventIndexesNoOutbox(t *testing.T) {
	client := testenv.StartRedis(t).Client(t)
	ob, err := outbox.New(client, staging.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := uploads.New(client, staging.Config{}, ob, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	for i, ev := range []staging.OutboxEvent{{}, {ID: "ev1", Type: "t"}} {
		id := newUpload(t, s, 4, 1)
		if _, err := stage(t, s, id, 1, []byte("abcd"), true); err != nil {
			t.Fatal(err)
		}
		ref := staging.ChunkRef{UploadID: id, N: 1}
		c, _ := s.Chunks().Claim(ctx, ref, "w", time.Minute)
		if _, _, err := s.Chunks().Record(ctx, ref, "w", "etag", c.CRC32C, 4); err != nil {
			t.Fatal(err)
		}
		if b, err := s.Completions().Begin(ctx, id, "c", time.Minute); err != nil || b.Outcome != staging.Begun {
			t.Fatalf("begin: %v %v", b.Outcome, err)
		}
		if err := s.Completions().Finish(ctx, id, "c", staging.Final{ETag: "etag", Size: 4, CRC32C: c.CRC32C}, ev, false); err != nil {
			t.Fatal(err)
		}
		if up, _ := s.Get(ctx, id); up.Status != staging.StatusCompleted {
			t.Fatalf("event %q: the upload is %s after its finish", ev.ID, up.Status)
		}
		if n, err := ob.Len(ctx); err != nil || n != int64(i) {
			t.Fatalf("after a finish with event %q: %d outboxes indexed (%v), want %d", ev.ID, n, err, i)
		}
	}
}
