package cleanup_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/chunkup/chunkup/cleanup"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/staging"
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
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rdb := testenv.StartRedis(t).Client(t)
	minio := testenv.StartMinIO(t)
	minio.CreateBucket(t, "bkt")
	s3c := minio.Client(t)
	clk := testenv.NewClock(time.Now())
	store, err := staging.New(rdb, staging.Config{StateTTL: time.Hour, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}

	const n = 6
	var ids []string
	for range n {
		id := staging.NewID()
		if _, err := store.Create(ctx, staging.NewUpload{ID: id, Bucket: "bkt", Key: "k/" + id, ChunkSize: 5 << 20, ExpectedSize: -1}); err != nil {
			t.Fatal(err)
		}
		mpu, err := s3c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String("k/" + id)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.SetMultipart(ctx, id, *mpu.UploadId); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	// One upload stays active: it must survive the sweep.
	busy := ids[n-1]
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
		x, err := cleanup.NewExpirer(store, &cleanup.Ender{Store: store, S3: cs}, cleanup.ExpirerConfig{})
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
	for _, id := range ids {
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
		evs, _, err := store.OutboxEvents(ctx, id)
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
