package e2e

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/stagingtest"
)

// TestRedisDown stops Redis under a running process: calls fail at once with
// UNAVAILABLE, /readyz says why, and when Redis is back (with its AOF) everything
// resumes by itself: the upload acknowledged before the outage completes.
func TestRedisDown(t *testing.T) {
	e := &env{t: t, redis: testenv.StartRedis(t, testenv.WithAOF()), minio: testenv.StartMinIO(t)}
	e.s3 = e.minio.Client(t)
	a := e.start(t, e.config())
	c := e.client(t, a)
	ready := func() (int, string) {
		r, err := http.Get("http://" + a.HTTPAddr() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}
	if code, _ := ready(); code != http.StatusOK {
		t.Fatalf("/readyz %d before the outage", code)
	}

	e.redis.Stop()
	_, err := c.API().CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{})
	if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "retry later") {
		t.Fatalf("create while Redis is down: %v, want UNAVAILABLE", err)
	}
	if code, body := ready(); code != http.StatusServiceUnavailable || !strings.Contains(body, "redis") {
		t.Fatalf("/readyz while Redis is down: %d %q", code, body)
	}

	e.redis.Start(t)
	waitFor(t, "/readyz after Redis is back", func() bool { code, _ := ready(); return code == http.StatusOK })
	data := randomBytes(2*chunk+3, 80)
	up, err := c.Upload(ctx(t), reader(data))
	if err != nil {
		t.Fatal(err)
	}
	e.requireExact(t, up, data)
}

// TestShutdownDrainsStreams stops a process while a client streams: the stream ends
// right away with UNAVAILABLE saying to resume elsewhere, and the chunk acknowledged
// before is kept.
func TestShutdownDrainsStreams(t *testing.T) {
	e := newEnv(t)
	cfg := e.config("api")
	a := e.start(t, cfg)
	c := e.client(t, a)
	created, err := c.API().CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.API().UploadChunk(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&chunkupv1.UploadChunkRequest{UploadId: created.Upload.UploadId, ChunkNumber: 1, Data: randomBytes(chunk, 81)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	a.Stop() // waits for the process; a stream left open would hold it for ShutdownTimeout
	_, err = s.Recv()
	if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "resume the upload on another server") {
		t.Fatalf("stream after shutdown: %v, want UNAVAILABLE telling to resume", err)
	}
	store := stagingtest.Open(t, e.rdb(t), staging.Config{}).Uploads
	up, err := store.Get(ctx(t), created.Upload.UploadId)
	if err != nil || len(up.ReceivedChunks) != 1 {
		t.Fatalf("after shutdown: %+v %v; want chunk 1 kept", up, err)
	}
}
