package chunkworker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chunkup/chunkup/chunkworker"
	"github.com/chunkup/chunkup/cleanup"
	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/internal/s3x"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/staging"
)

// TestS3OutageRetriesThenGivesUp points a worker at an S3 endpoint that refuses
// connections: the chunk is retried (lease released, upload still ACTIVE, bytes still
// staged) until GiveUpAfter has passed on the injected clock, then the upload FAILS with
// a reason that says so.
func TestS3OutageRetriesThenGivesUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clk := testenv.NewClock(time.Now())
	store, err := staging.New(testenv.StartRedis(t).Client(t), staging.Config{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	down := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t)) // nothing listens there
	s3c, err := s3x.New(ctx, s3x.Config{Endpoint: down, AccessKey: "k", SecretKey: "s", MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	w, err := chunkworker.New(store, s3c, &cleanup.Ender{Store: store, S3: s3c},
		chunkworker.Config{GiveUpAfter: 10 * time.Minute, RetryBase: time.Second, RetryMax: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	id := staging.NewID()
	if _, err := store.Create(ctx, staging.NewUpload{ID: id, Bucket: "b", Key: "k", ChunkSize: 5 << 20, ExpectedSize: 3, Total: 1}); err != nil {
		t.Fatal(err)
	}
	data := []byte("abc")
	if _, err := store.Stage(ctx, id, 1, data, crc.Checksum(data), true); err != nil {
		t.Fatal(err)
	}
	ref := staging.ChunkRef{UploadID: id, N: 1}

	for range 3 {
		w.Process(ctx, ref)
		u, err := store.Get(ctx, id)
		if err != nil || u.Status != staging.StatusActive {
			t.Fatalf("during the outage: %+v %v; want ACTIVE", u, err)
		}
		if leases, _ := store.Leases(ctx, id); len(leases) != 0 {
			t.Fatalf("lease kept after a failed attempt: %v", leases)
		}
		clk.Add(4 * time.Minute)
	}
	w.Process(ctx, ref) // 12 minutes after the first failure
	u, err := store.Get(ctx, id)
	if err != nil || u.Status != staging.StatusFailed {
		t.Fatalf("after GiveUpAfter: %+v %v; want FAILED", u, err)
	}
	t.Logf("failed with: %s", u.Error)
}

// splitHook runs between the first command of the next pipeline and the rest of it:
// exactly where another worker's commands can land between Stage's index write and its
// commit.
type splitHook struct {
	mu      sync.Mutex
	between func()
}

func (h *splitHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *splitHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *splitHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		f := h.between
		h.between = nil
		h.mu.Unlock()
		if f == nil || len(cmds) < 2 {
			return next(ctx, cmds)
		}
		if err := next(ctx, cmds[:1]); err != nil {
			return err
		}
		f()
		return next(ctx, cmds[1:])
	}
}

// TestMissingChunkStaysPending: a worker that finds a pending chunk not staged yet (its
// stage is in flight: the index entry is written, the bytes not yet committed) must not
// drop it from the pending index, or the chunk, once committed, would depend on its
// pub/sub wake-up alone.
func TestMissingChunkStaysPending(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clk := testenv.NewClock(time.Now())
	rdb := testenv.StartRedis(t).Client(t)
	hook := &splitHook{}
	rdb.AddHook(hook)
	store, err := staging.New(rdb, staging.Config{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	w, err := chunkworker.New(store, nil, nil, chunkworker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	id := staging.NewID()
	if _, err := store.Create(ctx, staging.NewUpload{ID: id, Bucket: "b", Key: "k", ChunkSize: 4, ExpectedSize: -1}); err != nil {
		t.Fatal(err)
	}
	full := []byte("abcd")
	if _, err := store.Stage(ctx, id, 3, full, crc.Checksum(full), false); err != nil {
		t.Fatal(err)
	}
	// An earlier attempt at chunk 2 that did not commit left its pending entry behind.
	if _, err := store.Stage(ctx, id, 2, []byte("ab"), crc.Checksum([]byte("ab")), true); err == nil {
		t.Fatal("chunk 2 as the last after chunk 3 was accepted")
	}
	ref := staging.ChunkRef{UploadID: id, N: 2}
	clk.Add(3 * time.Second) // the old entry is due
	// The retry: between its (no-op) index write and its commit, a worker visits the chunk.
	hook.mu.Lock()
	hook.between = func() { w.Process(ctx, ref) }
	hook.mu.Unlock()
	if _, err := store.Stage(ctx, id, 2, full, crc.Checksum(full), false); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Minute)
	due, err := store.DuePending(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range due {
		if r == ref {
			return
		}
	}
	t.Fatalf("chunk 2 is staged but not pending (due: %v): only its wake-up would find it", due)
}
