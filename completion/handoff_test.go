package completion_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/chunkup/chunkup/completion"
	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/stagingtest"
	"github.com/chunkup/chunkup/staging/uploads"
)

// recordingHandoff takes image uploads, failing the first call (as a process killed
// mid-hand-off would), and records the calls.
type recordingHandoff struct {
	mu     sync.Mutex
	calls  []string
	forced int
	fail   int
}

func (h *recordingHandoff) Wants(ct string) bool { return strings.HasPrefix(ct, "image/") }

func (h *recordingHandoff) Handoff(_ context.Context, u *staging.Upload, force bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, u.ID)
	if force {
		h.forced++
	}
	if h.fail > 0 {
		h.fail--
		return errors.New("queue unavailable")
	}
	return nil
}

// readyUpload makes a one-chunk upload of content type ct whose part is recorded, so it
// is ready to complete (a one-chunk upload needs no S3 call to complete).
func readyUpload(t *testing.T, ctx context.Context, s *uploads.Store, ct string) string {
	t.Helper()
	return readyUploadAt(t, ctx, s, "b", "k", ct)
}

// readyUploadAt is readyUpload for object bucket/key.
func readyUploadAt(t *testing.T, ctx context.Context, s *uploads.Store, bucket, key, ct string) string {
	t.Helper()
	id := ids.New()
	if _, err := s.Create(ctx, staging.NewUpload{ID: id, Bucket: bucket, Key: key, ChunkSize: 8, ExpectedSize: 3, Total: 1, ContentType: ct}); err != nil {
		t.Fatal(err)
	}
	data := []byte("abc")
	if _, err := s.Stage(ctx, id, 1, data, crc.Checksum(data), true); err != nil {
		t.Fatal(err)
	}
	ref := staging.ChunkRef{UploadID: id, N: 1}
	if c, err := s.Chunks().Claim(ctx, ref, "w", time.Minute); err != nil || c.Outcome != uploads.Claimed {
		t.Fatalf("claim: %+v %v", c, err)
	}
	if _, ready, err := s.Chunks().Record(ctx, ref, "w", `"etag"`, crc.Checksum(data), 3); err != nil || !ready {
		t.Fatalf("record: ready=%v %v", ready, err)
	}
	return id
}

func TestHandoffAtMostOnceUnlessForced(t *testing.T) {
	ctx := testenv.Context(t, 30*time.Second)
	s := stagingtest.Open(t, testenv.StartRedis(t).Client(t), staging.Config{}).Uploads
	h := &recordingHandoff{fail: 1}
	c, err := completion.New(s.Completions(), nil, nil, nil, completion.Config{Handoff: h, RetryBase: time.Millisecond, RetryMax: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	img := readyUpload(t, ctx, s, "image/png")
	doc := readyUpload(t, ctx, s, "application/zip")

	// The first hand-off fails after the upload is COMPLETED: the completion stays
	// indexed with the hand-off pending.
	if err := c.Complete(ctx, img); err == nil {
		t.Fatal("Complete hid the failed hand-off")
	}
	u, _ := s.Get(ctx, img)
	if u.Status != staging.StatusCompleted || !u.HandoffPending {
		t.Fatalf("after a failed hand-off: %s pending=%v, want COMPLETED and pending", u.Status, u.HandoffPending)
	}
	// The next sweep finds it and hands it off.
	waitDue(t, ctx, s, img)
	if err := c.Complete(ctx, img); err != nil {
		t.Fatal(err)
	}
	// Any later completion attempt leaves it alone.
	for range 3 {
		if err := c.Complete(ctx, img); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Complete(ctx, doc); err != nil {
		t.Fatal(err)
	}
	if len(h.calls) != 2 || h.calls[0] != img || h.calls[1] != img {
		t.Fatalf("hand-off calls %v, want the image twice (one failed, one done) and never the zip", h.calls)
	}
	if u, _ := s.Get(ctx, img); u.HandoffPending {
		t.Fatal("hand-off still pending after success")
	}
	if due, _ := s.Completions().Due(ctx, 10); len(due) != 0 {
		t.Fatalf("completions still indexed: %v", due)
	}
	// Forcing reprocesses on purpose.
	if err := c.HandOff(ctx, img, true); err != nil {
		t.Fatal(err)
	}
	if len(h.calls) != 3 || h.forced != 1 {
		t.Fatalf("after a forced hand-off: %d calls, %d forced", len(h.calls), h.forced)
	}
}

func waitDue(t *testing.T, ctx context.Context, s *uploads.Store, id string) {
	t.Helper()
	for {
		due, err := s.Completions().Due(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range due {
			if d == id {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("completion of %s never came due again", id)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// stores starts MinIO with bucket and a Redis, and returns an S3 client and the
// uploads store on them.
func stores(t *testing.T, bucket string) (*s3.Client, *uploads.Store) {
	t.Helper()
	minio := testenv.StartMinIO(t)
	minio.CreateBucket(t, bucket)
	return minio.Client(t), stagingtest.Open(t, testenv.StartRedis(t).Client(t), staging.Config{}).Uploads
}
