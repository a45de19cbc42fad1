package chunkworker_test

import (
	"bytes"
	"context"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/chunkup/chunkup/chunkworker"
	"github.com/chunkup/chunkup/cleanup"
	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/staging"
)

// readCounter is the real store, counting the chunks workers read back from Redis.
type readCounter struct {
	*staging.Store
	reads atomic.Int64
}

func (r *readCounter) ChunkData(ctx context.Context, ref staging.ChunkRef, lease time.Duration) ([]byte, error) {
	r.reads.Add(1)
	return r.Store.ChunkData(ctx, ref, lease)
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
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			st, err := staging.New(rdb, staging.Config{})
			if err != nil {
				t.Fatal(err)
			}
			store := &readCounter{Store: st}
			w, err := chunkworker.New(store, s3c, &cleanup.Ender{Store: st, S3: s3c},
				chunkworker.Config{Concurrency: tc.concurrency, SweepInterval: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			ids := make([]string, len(tc.uploads))
			for i, c := range tc.uploads {
				ids[i] = staging.NewID()
				if _, err := st.Create(ctx, staging.NewUpload{ID: ids[i], Bucket: bucket, Key: ids[i], ChunkSize: 5 << 20, ExpectedSize: -1}); err != nil {
					t.Fatal(err)
				}
				ref := staging.ChunkRef{UploadID: ids[i], N: 1}
				handOver := w.Expect(ref)
				if _, err := st.Stage(ctx, ids[i], 1, c.handOver, crc.Checksum(c.handOver), true); err != nil {
					t.Fatal(err)
				}
				handOver(c.handOver, crc.Checksum(c.handOver))
				if c.repeat != nil {
					if _, err := st.Stage(ctx, ids[i], 1, c.repeat, crc.Checksum(c.repeat), true); err != nil {
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
				waitUploaded(ctx, t, st, ids[i])
				out, err := s3c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(ids[i])})
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
func waitUploaded(ctx context.Context, t *testing.T, st *staging.Store, id string) {
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
