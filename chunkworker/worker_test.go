package chunkworker_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/redis/go-redis/v9"

	"github.com/chunkup/chunkup/chunkworker"
	"github.com/chunkup/chunkup/cleanup"
	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/s3store"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/stagingtest"
	"github.com/chunkup/chunkup/staging/uploads"
)

// TestS3OutageRetriesThenGivesUp points a worker at an S3 endpoint that refuses
// connections: the chunk is retried (lease released, upload still ACTIVE, bytes still
// staged) until GiveUpAfter has passed on the injected clock, then the upload FAILS with
// a reason that says so.
func TestS3OutageRetriesThenGivesUp(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	clk := testenv.NewClock(time.Now())
	store := stagingtest.Open(t, testenv.StartRedis(t).Client(t), staging.Config{Now: clk.Now}).Uploads
	down := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t)) // nothing listens there
	s3c, err := s3store.NewClient(ctx, s3store.Config{Endpoint: down, AccessKey: "k", SecretKey: "s", MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	objects := s3store.New(s3c)
	w, err := chunkworker.New(store.Chunks(), objects, &cleanup.Ender{Store: store.Ends(), S3: objects},
		chunkworker.Config{GiveUpAfter: 10 * time.Minute, RetryBase: time.Second, RetryMax: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	id := ids.New()
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
	ctx := testenv.Context(t, time.Minute)
	clk := testenv.NewClock(time.Now())
	rdb := testenv.StartRedis(t).Client(t)
	hook := &splitHook{}
	rdb.AddHook(hook)
	store := stagingtest.Open(t, rdb, staging.Config{Now: clk.Now}).Uploads
	w, err := chunkworker.New(store.Chunks(), nil, nil, chunkworker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	id := ids.New()
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
	due, err := store.Chunks().Due(ctx, 10)
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

// readCounter is the real store, counting the chunks workers read back from Redis.
type readCounter struct {
	*uploads.Chunks
	reads atomic.Int64
}

func (r *readCounter) Data(ctx context.Context, ref staging.ChunkRef, lease time.Duration) ([]byte, error) {
	r.reads.Add(1)
	return r.Chunks.Data(ctx, ref, lease)
}

var _ chunkworker.Store = (*readCounter)(nil)

// TestLocalFastPath: a chunk staged by this process is uploaded from the bytes the API
// handed over, not read back from Redis; when Redis holds other bytes by the time it is
// claimed (a repeat replaced them), or when the local queue is full, the worker reads
// Redis as usual. Either way the object holds the bytes Redis acknowledged last.
func TestLocalFastPath(t *testing.T) {
	const bucket = "local"
	minio := testenv.StartMinIO(t)
	minio.CreateBucket(t, bucket)
	s3c := minio.Client(t)
	rdb := testenv.StartRedis(t).Client(t)

	type chunk struct {
		handOver []byte // what this process staged and handed to its worker
		repeat   []byte // staged afterwards by another replica, before the claim; nil: none
	}
	for _, tc := range []struct {
		name        string
		concurrency int
		uploads     []chunk
		wantReads   int64
	}{
		{"from memory", 2, []chunk{{handOver: []byte("first bytes")}}, 0},
		{"replaced before the claim", 2, []chunk{{handOver: []byte("old bytes"), repeat: []byte("new bytes!")}}, 1},
		{"local queue full", 1, []chunk{{handOver: []byte("one")}, {handOver: []byte("two")}, {handOver: []byte("three")}}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testenv.Context(t, time.Minute)
			st := stagingtest.Open(t, rdb, staging.Config{}).Uploads
			objects := s3store.New(s3c)
			store := &readCounter{Chunks: st.Chunks()}
			w, err := chunkworker.New(store, objects, &cleanup.Ender{Store: st.Ends(), S3: objects},
				chunkworker.Config{Concurrency: tc.concurrency, SweepInterval: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			upIDs := make([]string, len(tc.uploads))
			for i, c := range tc.uploads {
				upIDs[i] = ids.New()
				if _, err := st.Create(ctx, staging.NewUpload{ID: upIDs[i], Bucket: bucket, Key: upIDs[i], ChunkSize: 5 << 20, ExpectedSize: -1}); err != nil {
					t.Fatal(err)
				}
				ref := staging.ChunkRef{UploadID: upIDs[i], N: 1}
				handOver := w.Expect(ref)
				if _, err := st.Stage(ctx, upIDs[i], 1, c.handOver, crc.Checksum(c.handOver), true); err != nil {
					t.Fatal(err)
				}
				handOver(c.handOver, crc.Checksum(c.handOver))
				if c.repeat != nil {
					if _, err := st.Stage(ctx, upIDs[i], 1, c.repeat, crc.Checksum(c.repeat), true); err != nil {
						t.Fatal(err)
					}
				}
			}
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); _ = w.Run(runCtx) }()
			t.Cleanup(func() { stop(); <-done })

			for i, c := range tc.uploads {
				want := c.handOver
				if c.repeat != nil {
					want = c.repeat
				}
				waitUploaded(ctx, t, st, upIDs[i])
				out, err := s3c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(upIDs[i])})
				if err != nil {
					t.Fatal(err)
				}
				got, err := io.ReadAll(out.Body)
				out.Body.Close()
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("upload %d: object holds %q (%v), want %q", i, got, err, want)
				}
			}
			if got := store.reads.Load(); got != tc.wantReads {
				t.Errorf("chunks read back from Redis: %d, want %d", got, tc.wantReads)
			}
		})
	}
}

// waitUploaded polls until upload id's chunk is recorded as uploaded to S3.
func waitUploaded(ctx context.Context, t *testing.T, st *uploads.Store, id string) {
	t.Helper()
	for {
		u, err := st.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if u.Uploaded == 1 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("upload %s: chunk not uploaded: %+v", id, u)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
