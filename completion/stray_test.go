package completion_test

import (
	"bytes"
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/chunkup/chunkup/completion"
	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/s3store"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/stagingtest"
	"github.com/chunkup/chunkup/staging/uploads"
)

const strayBucket = "bkt"

// createMPU opens a multipart upload for key directly in MinIO, as a worker does; with
// part, it also uploads a part to it.
func createMPU(t *testing.T, ctx context.Context, s3c *s3.Client, key string, part bool) string {
	t.Helper()
	out, err := s3c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(strayBucket), Key: aws.String(key)})
	if err != nil {
		t.Fatal(err)
	}
	if part {
		if _, err := s3c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String(strayBucket), Key: aws.String(key),
			UploadId: out.UploadId, PartNumber: aws.Int32(1), Body: bytes.NewReader([]byte("stray part"))}); err != nil {
			t.Fatal(err)
		}
	}
	return aws.ToString(out.UploadId)
}

// workerMPU opens a multipart upload for upload id's key as a worker does: it counts
// the attempt first (see staging.Begin.MultipartAttempts). A worker killed next leaves
// it behind.
func workerMPU(t *testing.T, ctx context.Context, store *uploads.Store, s3c *s3.Client, id, key string, part bool) string {
	t.Helper()
	if err := store.Chunks().NoteMultipartAttempt(ctx, id); err != nil {
		t.Fatal(err)
	}
	return createMPU(t, ctx, s3c, key, part)
}

// listCounter is the real S3 client, counting ListMultipartUploads calls.
type listCounter struct {
	*s3.Client
	lists atomic.Int64
}

func (l *listCounter) ListMultipartUploads(ctx context.Context, in *s3.ListMultipartUploadsInput, opts ...func(*s3.Options)) (*s3.ListMultipartUploadsOutput, error) {
	l.lists.Add(1)
	return l.Client.ListMultipartUploads(ctx, in, opts...)
}

// readyMultipart makes upload id at key, of two chunks whose parts are in a multipart
// upload recorded on it, ready to complete. It returns the multipart id and the parts.
func readyMultipart(t *testing.T, ctx context.Context, store *uploads.Store, s3c *s3.Client, id, key string) (string, []types.CompletedPart, int64) {
	t.Helper()
	chunks := [][]byte{bytes.Repeat([]byte{'a'}, 5<<20), []byte("tail")}
	size := int64(len(chunks[0]) + len(chunks[1]))
	if _, err := store.Create(ctx, staging.NewUpload{ID: id, Bucket: strayBucket, Key: key, ChunkSize: 5 << 20, ExpectedSize: size, Total: 2}); err != nil {
		t.Fatal(err)
	}
	mpu := workerMPU(t, ctx, store, s3c, id, key, false)
	if got, _, err := store.Chunks().SetMultipart(ctx, id, mpu, false); err != nil || got != mpu {
		t.Fatalf("set multipart: %q %v", got, err)
	}
	var parts []types.CompletedPart
	for i, data := range chunks {
		n := uint32(i + 1)
		if _, err := store.Stage(ctx, id, n, data, crc.Checksum(data), n == 2); err != nil {
			t.Fatal(err)
		}
		ref := staging.ChunkRef{UploadID: id, N: n}
		if c, err := store.Chunks().Claim(ctx, ref, "w", time.Minute); err != nil || c.Outcome != uploads.Claimed {
			t.Fatalf("claim: %+v %v", c, err)
		}
		out, err := s3c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String(strayBucket), Key: aws.String(key),
			UploadId: aws.String(mpu), PartNumber: aws.Int32(int32(n)), Body: bytes.NewReader(data)})
		if err != nil {
			t.Fatal(err)
		}
		if o, _, err := store.Chunks().Record(ctx, ref, "w", aws.ToString(out.ETag), crc.Checksum(data), int64(len(data))); err != nil || o != uploads.Recorded {
			t.Fatalf("record: %v %v", o, err)
		}
		parts = append(parts, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(int32(n))})
	}
	return mpu, parts, size
}

// noEnder fails the test if a completer tries to fail an upload.
type noEnder struct{ t *testing.T }

func (e noEnder) End(_ context.Context, id string, _ staging.Status, reason string, _ string) error {
	e.t.Errorf("completer failed upload %s: %s", id, reason)
	return nil
}

// TestCompletionAbortsStrayMultipartUploads leaves extra multipart uploads in MinIO for
// an upload's key, as workers killed between CreateMultipartUpload and recording (or
// aborting) theirs do, and completes the upload: the completer aborts every one of them,
// also when a retry finds the object already completed (NoSuchUpload, then HeadObject).
// A neighbouring key and a key the client chose (which another upload may share) are
// left alone.
func TestCompletionAbortsStrayMultipartUploads(t *testing.T) {
	ctx := testenv.Context(t, 2*time.Minute)
	minio := testenv.StartMinIO(t)
	minio.CreateBucket(t, strayBucket)
	s3c := minio.Client(t)
	store := stagingtest.Open(t, testenv.StartRedis(t).Client(t), staging.Config{}).Uploads
	counter := &listCounter{Client: s3c}
	c, err := completion.New(store.Completions(), s3store.New(counter), noEnder{t}, nil, completion.Config{})
	if err != nil {
		t.Fatal(err)
	}
	complete := func(id string, size int64) {
		t.Helper()
		if err := c.Complete(ctx, id); err != nil {
			t.Fatal(err)
		}
		u, err := store.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if u.Status != staging.StatusCompleted || u.Size != size {
			t.Fatalf("upload %s is %s with %d bytes (%s), want COMPLETED with %d", id, u.Status, u.Size, u.Error, size)
		}
	}

	t.Run("completed", func(t *testing.T) {
		id := ids.New()
		key := "uploads/" + id + "/f.bin"
		_, _, size := readyMultipart(t, ctx, store, s3c, id, key)
		workerMPU(t, ctx, store, s3c, id, key, true)
		workerMPU(t, ctx, store, s3c, id, key, false)
		neighbour := createMPU(t, ctx, s3c, key+".other", false)
		if open := minio.OpenMultipart(t, strayBucket, key); len(open) != 3 {
			t.Fatalf("%d multipart uploads open for the key before completing, want 3", len(open))
		}
		complete(id, size)
		if open := minio.OpenMultipart(t, strayBucket, key); len(open) != 0 {
			t.Errorf("multipart uploads still open for %s after completion: %v", key, open)
		}
		if open := minio.OpenMultipart(t, strayBucket, key+".other"); !slices.Equal(open, []string{neighbour}) {
			t.Errorf("the neighbouring key's multipart uploads %v, want %s kept", open, neighbour)
		}
	})

	t.Run("completed before, found by HeadObject", func(t *testing.T) {
		id := ids.New()
		key := "tenant/uploads/" + id + "/f.bin"
		mpu, parts, size := readyMultipart(t, ctx, store, s3c, id, key)
		// A first completer completed it in S3 and died before recording that.
		if _, err := s3c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String(strayBucket),
			Key: aws.String(key), UploadId: aws.String(mpu), MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}}); err != nil {
			t.Fatal(err)
		}
		workerMPU(t, ctx, store, s3c, id, key, true)
		complete(id, size)
		if open := minio.OpenMultipart(t, strayBucket, key); len(open) != 0 {
			t.Errorf("multipart uploads still open for %s after completion: %v", key, open)
		}
	})

	t.Run("every attempt recorded", func(t *testing.T) {
		// The common case: one worker created the multipart upload and recorded it, so
		// no other can exist, and S3 is not asked.
		id := ids.New()
		_, _, size := readyMultipart(t, ctx, store, s3c, id, "uploads/"+id+"/f.bin")
		before := counter.lists.Load()
		complete(id, size)
		if n := counter.lists.Load() - before; n != 0 {
			t.Errorf("%d ListMultipartUploads calls for an upload whose only attempt is recorded, want 0", n)
		}
	})

	t.Run("key chosen by the client", func(t *testing.T) {
		id := ids.New()
		key := "shared/f.bin"
		_, _, size := readyMultipart(t, ctx, store, s3c, id, key)
		other := createMPU(t, ctx, s3c, key, false) // maybe another upload's, to the same key
		complete(id, size)
		if open := minio.OpenMultipart(t, strayBucket, key); !slices.Equal(open, []string{other}) {
			t.Errorf("multipart uploads for the client's key %v, want %s left alone", open, other)
		}
	})
}
