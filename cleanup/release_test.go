package cleanup_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/chunkup/chunkup/cleanup"
	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/internal/s3x"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/staging"
)

// TestReleaseRetriedAfterS3Outage aborts an upload while S3 is unreachable: the upload
// is ABORTED at once, and the multipart upload it left in MinIO is aborted by cleanup's
// sweep once S3 answers again. An aborted one-chunk upload whose object was already
// written leaves no object either.
func TestReleaseRetriedAfterS3Outage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	minio := testenv.StartMinIO(t)
	minio.CreateBucket(t, "bkt")
	s3c := minio.Client(t)
	clk := testenv.NewClock(time.Now())
	store, err := staging.New(testenv.StartRedis(t).Client(t), staging.Config{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	down, err := s3x.New(ctx, s3x.Config{Endpoint: fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t)),
		AccessKey: "k", SecretKey: "s", MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}

	// A multipart upload in MinIO, recorded on an upload.
	multi := staging.NewID()
	if _, err := store.Create(ctx, staging.NewUpload{ID: multi, Bucket: "bkt", Key: "multi", ChunkSize: 5 << 20, ExpectedSize: -1}); err != nil {
		t.Fatal(err)
	}
	mpu, err := s3c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String("multi")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.SetMultipart(ctx, multi, *mpu.UploadId); err != nil {
		t.Fatal(err)
	}
	// A one-chunk upload whose object is written and recorded, not yet completed.
	single := staging.NewID()
	if _, err := store.Create(ctx, staging.NewUpload{ID: single, Bucket: "bkt", Key: "single", ChunkSize: 5 << 20, ExpectedSize: 3, Total: 1}); err != nil {
		t.Fatal(err)
	}
	data := []byte("abc")
	if _, err := store.Stage(ctx, single, 1, data, crc.Checksum(data), true); err != nil {
		t.Fatal(err)
	}
	ref := staging.ChunkRef{UploadID: single, N: 1}
	if _, err := store.Claim(ctx, ref, "w", time.Minute); err != nil {
		t.Fatal(err)
	}
	put, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String("single"), Body: nil})
	if err != nil {
		t.Fatal(err)
	}
	if out, _, err := store.Record(ctx, ref, "w", aws.ToString(put.ETag), crc.Checksum(data), 3); err != nil || out != staging.Recorded {
		t.Fatalf("record: %v %v", out, err)
	}

	// Abort both while S3 is unreachable: the uploads end, S3 keeps its resources.
	offline := &cleanup.Ender{Store: store, S3: down}
	for _, id := range []string{multi, single} {
		if err := offline.End(ctx, id, staging.StatusAborted, "test", ""); err != nil {
			t.Fatal(err)
		}
	}
	if open := listMPUs(t, ctx, s3c); open != 1 {
		t.Fatalf("%d multipart uploads open after the offline abort, want still 1", open)
	}

	// Cleanup, with S3 back, finishes the job once the ending process's grace has passed.
	x, err := cleanup.NewExpirer(store, &cleanup.Ender{Store: store, S3: s3c}, cleanup.ExpirerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.SweepReleases(ctx); err != nil {
		t.Fatal(err)
	}
	if open := listMPUs(t, ctx, s3c); open != 1 {
		t.Fatalf("the sweep released an upload within its ender's grace (%d open)", open)
	}
	clk.Add(2 * time.Minute)
	if err := x.SweepReleases(ctx); err != nil {
		t.Fatal(err)
	}
	if open := listMPUs(t, ctx, s3c); open != 0 {
		t.Fatalf("%d multipart uploads open after cleanup, want 0", open)
	}
	_, err = s3c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("bkt"), Key: aws.String("single")})
	var nf *types.NotFound
	if !errors.As(err, &nf) {
		t.Fatalf("the aborted one-chunk upload's object: %v, want it deleted", err)
	}
	if due, _ := store.DueReleases(ctx, 10); len(due) != 0 {
		t.Fatalf("releases still due: %v", due)
	}
}

func listMPUs(t *testing.T, ctx context.Context, c *s3.Client) int {
	t.Helper()
	out, err := c.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String("bkt")})
	if err != nil {
		t.Fatal(err)
	}
	return len(out.Uploads)
}
