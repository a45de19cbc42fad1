package client_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chunkup/chunkup/app"
	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/testenv"
)

const (
	bucket = "chunkup-test"
	MiB    = 1 << 20
)

type env struct {
	redis *testenv.Redis
	minio *testenv.MinIO
}

func newEnv(t testing.TB) *env {
	t.Helper()
	return &env{redis: testenv.StartRedis(t), minio: testenv.StartMinIO(t)}
}

func ctxT(t testenv.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// serve runs a whole chunkup process in this test process and returns its address.
func (e *env) serve(t testenv.TB) string {
	t.Helper()
	a, err := app.New(ctxT(t), app.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "off", RedisURL: e.redis.URL(),
		S3: e.minio.S3Config(), Bucket: bucket})
	if err != nil {
		t.Fatalf("start chunkup: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return a.GRPCAddr()
}

func (e *env) object(t testing.TB, key string) []byte {
	t.Helper()
	return e.minio.Object(t, bucket, key)
}

func (e *env) requireExact(t testing.TB, up *chunkupv1.Upload, want []byte) {
	t.Helper()
	if up.State != chunkupv1.UploadState_UPLOAD_STATE_COMPLETED {
		t.Fatalf("upload is %v: %s", up.State, up.Error)
	}
	if got := e.object(t, up.Key); sha256.Sum256(got) != sha256.Sum256(want) {
		t.Fatalf("object has %d bytes, sha256 %x; want %d bytes, %x", len(got), sha256.Sum256(got), len(want), sha256.Sum256(want))
	}
}

func randomBytes(n int, seed byte) []byte {
	b := make([]byte, n)
	_, _ = rand.NewChaCha8([32]byte{seed}).Read(b)
	return b
}

// onlyReader hides every method but Read, as stdin would.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

func dial(t testing.TB, addr string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.Dial(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestUpload(t *testing.T) {
	e := newEnv(t)
	addr := e.serve(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		size int
		opts []client.Option
		file bool
	}{
		{"file", 2*8*MiB + 100, nil, true},
		{"unknown length with a tail", 2*8*MiB + 100, nil, false},
		{"unknown length at a chunk boundary", 2 * 8 * MiB, nil, false},
		{"unknown length, empty", 0, nil, false},
		{"parallel streams", 6*8*MiB + 1, []client.Option{client.WithParallel(3), client.WithWindow(2)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := randomBytes(tc.size, byte(tc.size))
			c := dial(t, addr, tc.opts...)
			var last client.Progress
			progress := client.WithProgress(func(p client.Progress) { last = p })
			var up *chunkupv1.Upload
			var err error
			if tc.file {
				path := filepath.Join(dir, "in.bin")
				if err := os.WriteFile(path, data, 0o600); err != nil {
					t.Fatal(err)
				}
				up, err = c.UploadFile(ctxT(t), path, progress)
			} else {
				up, err = c.Upload(ctxT(t), onlyReader{bytes.NewReader(data)}, progress)
			}
			if err != nil {
				t.Fatal(err)
			}
			e.requireExact(t, up, data)
			if last.BytesAcked != int64(len(data)) || last.BytesSent != int64(len(data)) || last.ChunksUploaded != up.TotalChunks {
				t.Errorf("final progress %+v; want %d bytes sent and acked, %d chunks uploaded", last, len(data), up.TotalChunks)
			}
		})
	}
}

// TestResumeAfterServerKilled kills (-9) the server process in the middle of an upload
// and starts it again on the same address: the same Upload call finishes, no chunk the
// server acknowledged before the kill is sent again, and the object is exact.
func TestResumeAfterServerKilled(t *testing.T) {
	e := newEnv(t)
	bin := testenv.BuildBinary(t, "github.com/chunkup/chunkup/cmd/chunkup")
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	args := []string{"serve", "--grpc-addr", addr, "--http-addr", "off", "--redis-url", e.redis.URL(),
		"--s3-endpoint", e.minio.Endpoint, "--s3-bucket", bucket, "--chunk-size", "5MiB", "--lease", "1s",
		"--sweep-interval", "100ms"}
	envv := []string{"AWS_ACCESS_KEY_ID=" + e.minio.AccessKey, "AWS_SECRET_ACCESS_KEY=" + e.minio.SecretKey}
	server := testenv.StartProcess(t, bin, args, envv)

	cc := testenv.NewChunkCounter()
	c := dial(t, addr, client.WithDialOptions(cc.DialOption()),
		client.WithRetry(100, 50*time.Millisecond, 300*time.Millisecond), client.WithWindow(2))
	data := randomBytes(16*5*MiB+12345, 77)
	kill := make(chan struct{})
	var once sync.Once
	progress := client.WithProgress(func(p client.Progress) {
		if p.BytesAcked >= 5*5*MiB {
			once.Do(func() { close(kill) })
		}
	})
	var ackedBeforeKill map[uint32]bool
	go func() {
		<-kill
		server.Kill()
		_, ackedBeforeKill = cc.Snapshot()
		testenv.StartProcess(t, bin, args, envv)
	}()
	up, err := c.Upload(ctxT(t), onlyReader{bytes.NewReader(data)}, progress)
	if err != nil {
		t.Fatal(err)
	}
	e.requireExact(t, up, data)
	sent, _ := cc.Snapshot()
	if len(ackedBeforeKill) == 0 {
		t.Fatal("no chunk was acknowledged before the kill")
	}
	resent := 0
	for n, k := range sent {
		if k > 1 {
			resent++
			if ackedBeforeKill[n] {
				t.Errorf("chunk %d was acknowledged before the kill and sent %d times", n, k)
			}
		}
	}
	t.Logf("%d chunks acknowledged before the kill; %d unacknowledged chunks sent again; %d chunks in all",
		len(ackedBeforeKill), resent, up.TotalChunks)
}
