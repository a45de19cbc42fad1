package cleanup_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/chunkup/chunkup/cleanup"
	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/s3store"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/stagingtest"
	"github.com/chunkup/chunkup/staging/uploads"
)

// countingS3 is the real MinIO client, counting AbortMultipartUpload calls.
type countingS3 struct {
	*s3.Client
	aborts atomic.Int32
}

func (c *countingS3) AbortMultipartUpload(ctx context.Context, in *s3.AbortMultipartUploadInput, opts ...func(*s3.Options)) (*s3.AbortMultipartUploadOutput, error) {
	c.aborts.Add(1)
	return c.Client.AbortMultipartUpload(ctx, in, opts...)
}

// TestTwoReplicasExpireEachUploadOnce runs two cleanup replicas at the same moment over
// abandoned uploads that have multipart uploads open in MinIO: each is aborted once,
// expired once, with one UploadExpired event, and MinIO holds no multipart upload after.
func TestTwoReplicasExpireEachUploadOnce(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	rdb := testenv.StartRedis(t).Client(t)
	minio := testenv.StartMinIO(t)
	minio.CreateBucket(t, "bkt")
	s3c := minio.Client(t)
	clk := testenv.NewClock(time.Now())
	stores := stagingtest.Open(t, rdb, staging.Config{StateTTL: time.Hour, Now: clk.Now})
	store := stores.Uploads

	const n = 6
	var upIDs []string
	for range n {
		id := ids.New()
		if _, err := store.Create(ctx, staging.NewUpload{ID: id, Bucket: "bkt", Key: "k/" + id, ChunkSize: 5 << 20, ExpectedSize: -1}); err != nil {
			t.Fatal(err)
		}
		mpu, err := s3c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String("k/" + id)})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := store.Chunks().SetMultipart(ctx, id, *mpu.UploadId, false); err != nil {
			t.Fatal(err)
		}
		upIDs = append(upIDs, id)
	}
	// One upload stays active: it must survive the sweep.
	busy := upIDs[n-1]
	clk.Add(59 * time.Minute)
	if _, err := store.Stage(ctx, busy, 1, make([]byte, 5<<20), 0, false); err != nil {
		t.Fatal(err)
	}
	clk.Add(2 * time.Minute)

	var counters []*countingS3
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 2 {
		cs := &countingS3{Client: s3c}
		counters = append(counters, cs)
		x, err := cleanup.NewExpirer(&cleanup.Ender{Store: store.Ends(), S3: s3store.New(cs)}, cleanup.ExpirerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			<-start
			if _, err := x.Sweep(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	close(start)
	wg.Wait()

	if got := counters[0].aborts.Load() + counters[1].aborts.Load(); got != n-1 {
		t.Errorf("AbortMultipartUpload called %d times for %d idle uploads", got, n-1)
	}
	for _, id := range upIDs {
		u, err := store.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		want := staging.StatusExpired
		if id == busy {
			want = staging.StatusActive
		}
		if u.Status != want {
			t.Errorf("upload %s is %s, want %s", id, u.Status, want)
		}
		evs, _, err := stores.Outbox.Events(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		wantEvents := 1
		if id == busy {
			wantEvents = 0
		}
		if len(evs) != wantEvents || wantEvents == 1 && evs[0].Type != "chunkup.v1.UploadExpired" {
			t.Errorf("upload %s outbox %+v, want %d UploadExpired", id, evs, wantEvents)
		}
	}
	out, err := s3c.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String("bkt")})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Uploads) != 1 || *out.Uploads[0].Key != "k/"+busy {
		t.Errorf("MinIO still lists %d multipart uploads, want only the active one", len(out.Uploads))
	}
}

// TestReleaseRetriedAfterS3Outage aborts an upload while S3 is unreachable: the upload
// is ABORTED at once, and the multipart upload it left in MinIO is aborted by cleanup's
// sweep once S3 answers again. An aborted one-chunk upload whose object was already
// written leaves no object either.
func TestReleaseRetriedAfterS3Outage(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	minio := testenv.StartMinIO(t)
	minio.CreateBucket(t, "bkt")
	s3c := minio.Client(t)
	clk := testenv.NewClock(time.Now())
	stores := stagingtest.Open(t, testenv.StartRedis(t).Client(t), staging.Config{Now: clk.Now})
	store := stores.Uploads
	down, err := s3store.NewClient(ctx, s3store.Config{Endpoint: fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t)),
		AccessKey: "k", SecretKey: "s", MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}

	// A multipart upload in MinIO, recorded on an upload.
	multi := ids.New()
	if _, err := store.Create(ctx, staging.NewUpload{ID: multi, Bucket: "bkt", Key: "multi", ChunkSize: 5 << 20, ExpectedSize: -1}); err != nil {
		t.Fatal(err)
	}
	mpu, err := s3c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String("multi")})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.Chunks().SetMultipart(ctx, multi, *mpu.UploadId, false); err != nil {
		t.Fatal(err)
	}
	// A one-chunk upload whose object is written and recorded, not yet completed.
	single := ids.New()
	if _, err := store.Create(ctx, staging.NewUpload{ID: single, Bucket: "bkt", Key: "single", ChunkSize: 5 << 20, ExpectedSize: 3, Total: 1}); err != nil {
		t.Fatal(err)
	}
	data := []byte("abc")
	if _, err := store.Stage(ctx, single, 1, data, crc.Checksum(data), true); err != nil {
		t.Fatal(err)
	}
	ref := staging.ChunkRef{UploadID: single, N: 1}
	if _, err := store.Chunks().Claim(ctx, ref, "w", time.Minute); err != nil {
		t.Fatal(err)
	}
	put, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String("single"), Body: nil})
	if err != nil {
		t.Fatal(err)
	}
	if out, _, err := store.Chunks().Record(ctx, ref, "w", aws.ToString(put.ETag), crc.Checksum(data), 3); err != nil || out != uploads.Recorded {
		t.Fatalf("record: %v %v", out, err)
	}

	// Abort both while S3 is unreachable: the uploads end, S3 keeps its resources.
	offline := &cleanup.Ender{Store: store.Ends(), S3: s3store.New(down)}
	for _, id := range []string{multi, single} {
		if err := offline.End(ctx, id, staging.StatusAborted, "test", ""); err != nil {
			t.Fatal(err)
		}
	}
	if open := listMPUs(t, ctx, s3c); open != 1 {
		t.Fatalf("%d multipart uploads open after the offline abort, want still 1", open)
	}

	// Cleanup, with S3 back, finishes the job once the ending process's grace has passed.
	x, err := cleanup.NewExpirer(&cleanup.Ender{Store: store.Ends(), S3: s3store.New(s3c)}, cleanup.ExpirerConfig{})
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
	if due, _ := store.Ends().DueReleases(ctx, 10); len(due) != 0 {
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

// TestEndAbortsStrayMultipartUploads leaves multipart uploads in MinIO for an upload's
// key that no record names, as a worker killed between CreateMultipartUpload and
// recording (or aborting) its own does, and ends the upload without completing it: an
// abort, an expiry, and an abort while S3 was unreachable (released later by the
// cleanup sweep) each leave no multipart upload for the key. A key the client chose,
// which another upload may share, is left alone.
func TestEndAbortsStrayMultipartUploads(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	minio := testenv.StartMinIO(t)
	minio.CreateBucket(t, "bkt")
	s3c := minio.Client(t)
	clk := testenv.NewClock(time.Now())
	stores := stagingtest.Open(t, testenv.StartRedis(t).Client(t), staging.Config{StateTTL: time.Hour, Now: clk.Now})
	store := stores.Uploads
	down, err := s3store.NewClient(ctx, s3store.Config{Endpoint: fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t)),
		AccessKey: "k", SecretKey: "s", MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	ender := &cleanup.Ender{Store: store.Ends(), S3: s3store.New(s3c)}
	x, err := cleanup.NewExpirer(ender, cleanup.ExpirerConfig{})
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
		id := ids.New()
		if key == "" {
			key = "uploads/" + id + "/f.bin"
		}
		if _, err := store.Create(ctx, staging.NewUpload{ID: id, Bucket: "bkt", Key: key, ChunkSize: 5 << 20, ExpectedSize: -1}); err != nil {
			t.Fatal(err)
		}
		if recorded {
			if _, _, err := store.Chunks().SetMultipart(ctx, id, mpu(key), false); err != nil {
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
	if err := (&cleanup.Ender{Store: store.Ends(), S3: s3store.New(down)}).End(ctx, offline, staging.StatusAborted, "test", ""); err != nil {
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
	if due, _ := store.Ends().DueReleases(ctx, 10); len(due) != 0 {
		t.Errorf("releases still due: %v", due)
	}
}

// warnings records the log lines at WARN or above.
type warnings struct {
	mu    sync.Mutex
	lines []string
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	line := r.Message
	r.Attrs(func(a slog.Attr) bool { line += " " + a.String(); return true })
	w.lines = append(w.lines, line)
	return nil
}
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }

// TestEndWithoutDataWarnsNothing: ending an upload that never got data (a DELETE right
// after its creation) finds no multipart upload to abort, on MinIO as on gofakes3,
// chunkup dev's S3, which answers the listing NoSuchUpload: that is nothing to do, not a
// WARN ("abort stray multipart uploads ... NoSuchUpload", which dev logged), and the
// release is done (not left for cleanup to retry).
func TestEndWithoutDataWarnsNothing(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	for _, tc := range testenv.S3Stores {
		for _, status := range []staging.Status{staging.StatusAborted, staging.StatusFailed} {
			t.Run(tc.Name+"/"+string(status), func(t *testing.T) {
				s3c := tc.Start(t, "bkt")
				ctx := testenv.Context(t, time.Minute)
				store := stagingtest.Open(t, rdb, staging.Config{StateTTL: time.Hour}).Uploads
				w := &warnings{}
				ender := &cleanup.Ender{Store: store.Ends(), S3: s3store.New(s3c), Logger: slog.New(w)}
				id := ids.New()
				if _, err := store.Create(ctx, staging.NewUpload{ID: id, Bucket: "bkt", Key: "uploads/" + id + "/f.bin", ChunkSize: 5 << 20, ExpectedSize: 10}); err != nil {
					t.Fatal(err)
				}
				if err := ender.End(ctx, id, status, "test", ""); err != nil {
					t.Fatal(err)
				}
				if u, err := store.Get(ctx, id); err != nil || u.Status != status {
					t.Fatalf("after End: %+v %v", u, err)
				}
				if len(w.lines) != 0 {
					t.Errorf("warnings: %q, want none", w.lines)
				}
				if due, _ := store.Ends().DueReleases(ctx, 10); slices.Contains(due, id) {
					t.Errorf("release of %s still due: %v", id, due)
				}
			})
		}
	}
}
