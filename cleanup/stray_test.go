package cleanup_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/chunkup/chunkup/cleanup"
	"github.com/chunkup/chunkup/internal/s3x"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/staging"
)

// TestEndAbortsStrayMultipartUploads leaves multipart uploads in MinIO for an upload's
// key that no record names, as a worker killed between CreateMultipartUpload and
// recording (or aborting) its own does, and ends the upload without completing it: an
// abort, an expiry, and an abort while S3 was unreachable (released later by the
// cleanup sweep) each leave no multipart upload for the key. A key the client chose,
// which another upload may share, is left alone.
func TestEndAbortsStrayMultipartUploads(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	minio := testenv.StartMinIO(t)
	minio.CreateBucket(t, "bkt")
	s3c := minio.Client(t)
	clk := testenv.NewClock(time.Now())
	store, err := staging.New(testenv.StartRedis(t).Client(t), staging.Config{StateTTL: time.Hour, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	down, err := s3x.New(ctx, s3x.Config{Endpoint: fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t)),
		AccessKey: "k", SecretKey: "s", MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	ender := &cleanup.Ender{Store: store, S3: s3c}
	x, err := cleanup.NewExpirer(store, ender, cleanup.ExpirerConfig{})
	if err != nil {
		t.Fatal(err)
	}

	mpu := func(key string) string {
		t.Helper()
		out, err := s3c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String(key)})
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToString(out.UploadId)
	}
	open := func(key string) []string {
		t.Helper()
		return minio.OpenMultipart(t, "bkt", key)
	}
	// upload creates an upload at key (default: one that names it) with strays
	// multipart uploads nobody recorded and, with recorded, one recorded on it.
	upload := func(key string, recorded bool, strays int) (string, string) {
		t.Helper()
		id := staging.NewID()
		if key == "" {
			key = "uploads/" + id + "/f.bin"
		}
		if _, err := store.Create(ctx, staging.NewUpload{ID: id, Bucket: "bkt", Key: key, ChunkSize: 5 << 20, ExpectedSize: -1}); err != nil {
			t.Fatal(err)
		}
		if recorded {
			if _, err := store.SetMultipart(ctx, id, mpu(key)); err != nil {
				t.Fatal(err)
			}
		}
		for range strays {
			mpu(key)
		}
		return id, key
	}

	aborted, abortedKey := upload("", true, 2)
	expired, expiredKey := upload("", false, 1)
	offline, offlineKey := upload("", false, 1)
	chosen, chosenKey := upload("shared/f.bin", true, 0)
	other := mpu(chosenKey) // maybe another upload's, to the same key

	if err := ender.End(ctx, aborted, staging.StatusAborted, "test", ""); err != nil {
		t.Fatal(err)
	}
	if left := open(abortedKey); len(left) != 0 {
		t.Errorf("aborted upload: multipart uploads left for its key: %v", left)
	}
	if err := ender.End(ctx, chosen, staging.StatusAborted, "test", ""); err != nil {
		t.Fatal(err)
	}
	if left := open(chosenKey); !slices.Equal(left, []string{other}) {
		t.Errorf("aborted upload with a key the client chose: %v left for it, want only %s (not its own)", left, other)
	}
	if err := (&cleanup.Ender{Store: store, S3: down}).End(ctx, offline, staging.StatusAborted, "test", ""); err != nil {
		t.Fatal(err)
	}
	if left := open(offlineKey); len(left) != 1 {
		t.Fatalf("upload aborted while S3 was down: %v left, want its stray still there", left)
	}

	// The expirer ends the idle upload and, past the offline ender's grace, retries the
	// offline one's release.
	clk.Add(2 * time.Hour)
	if n, err := x.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("sweep expired %d uploads (%v), want 1", n, err)
	}
	if u, err := store.Get(ctx, expired); err != nil || u.Status != staging.StatusExpired {
		t.Fatalf("idle upload after the sweep: %+v %v", u, err)
	}
	for name, key := range map[string]string{"expired": expiredKey, "released by the sweep": offlineKey} {
		if left := open(key); len(left) != 0 {
			t.Errorf("%s upload: multipart uploads left for its key: %v", name, left)
		}
	}
	if due, _ := store.DueReleases(ctx, 10); len(due) != 0 {
		t.Errorf("releases still due: %v", due)
	}
}
