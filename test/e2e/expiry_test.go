package e2e

import (
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chunkup/chunkup/cleanup"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/staging"
)

// offsetClock is the real clock moved forward on demand, so an upload can be made to
// look idle for hours without waiting.
type offsetClock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *offsetClock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return time.Now().Add(c.off) }
func (c *offsetClock) Add(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.off += d }

// TestAbandonedUploadExpires: an upload with parts already in MinIO is abandoned. After
// its idle time, its multipart upload is gone from MinIO, its staged bytes from Redis,
// UploadExpired was published, and GetUpload says EXPIRED until the retention ends.
func TestAbandonedUploadExpires(t *testing.T) {
	e := newEnv(t)
	k := testenv.StartKafka(t, topic)
	clk := &offsetClock{}
	cfg := withKafka(e.config(), k)
	cfg.Staging = staging.Config{StateTTL: time.Hour, Retention: 3 * time.Second, Now: clk.Now}
	cfg.Expirer = cleanup.ExpirerConfig{Interval: 100 * time.Millisecond}
	a := e.start(t, cfg)
	c := e.client(t, a)
	rdb := e.rdb(t)

	created, err := c.API().CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{Name: "abandoned.bin"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.Upload.UploadId
	stream, err := c.API().UploadChunk(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	data := randomBytes(3*chunk, 50)
	for n := 1; n <= 3; n++ { // three full chunks, never a last one
		if err := stream.Send(&chunkupv1.UploadChunkRequest{UploadId: id, ChunkNumber: uint32(n), Data: data[(n-1)*chunk : n*chunk]}); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	_ = stream.CloseSend()
	waitFor(t, "parts in MinIO", func() bool { return getUpload(t, c, id).UploadedChunks == 3 })
	if n := e.openMultipartUploads(t); n != 1 {
		t.Fatalf("%d multipart uploads open before expiry, want 1", n)
	}

	clk.Add(time.Hour + time.Minute)
	waitFor(t, "the upload to expire", func() bool {
		return getUpload(t, c, id).State == chunkupv1.UploadState_UPLOAD_STATE_EXPIRED
	})
	// The state says EXPIRED first; the release (abort in S3) follows, from the durable
	// release index should this process die in between.
	waitFor(t, "the multipart upload to be aborted in MinIO", func() bool { return e.openMultipartUploads(t) == 0 })
	if keys, _ := uploadKeys(t, rdb, id, "*"+id+"*chunk*"); len(keys) != 0 {
		t.Errorf("staged chunk keys left after expiry: %v", keys)
	}
	waitOutboxEmpty(t, a.Outbox())
	if n := len(eventsFor(allEvents(t, k), id, "chunkup.v1.UploadExpired")); n != 1 {
		t.Errorf("%d UploadExpired events, want 1", n)
	}
	// After the retention Redis forgets the upload entirely.
	waitFor(t, "the retention to end", func() bool {
		keys, err := uploadKeys(t, rdb, id, "*"+id+"*")
		return err == nil && len(keys) == 0
	})
	if _, err := c.API().GetUpload(ctx(t), &chunkupv1.GetUploadRequest{UploadId: id}); status.Code(err) != codes.NotFound {
		t.Errorf("GetUpload after retention: %v, want NotFound", err)
	}
}
