package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/redis/go-redis/v9"

	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/app"
	"github.com/chunkup/chunkup/internal/testenv"
)

const bucket = "chunkup-test"

// env is one Redis (or, under TestOnCluster, one Redis Cluster) and one MinIO shared
// by a test's processes.
type env struct {
	redis   *testenv.Redis        // nil on a cluster
	cluster *testenv.RedisCluster // nil on a single Redis
	minio   *testenv.MinIO
	s3      *s3.Client
}

func newEnv(t testing.TB) *env {
	t.Helper()
	e := &env{minio: testenv.StartMinIO(t)}
	if e.cluster = clusterFor(t); e.cluster == nil {
		e.redis = testenv.StartRedis(t)
	} else {
		// The tests share the cluster: start each with an empty one, as with a Redis
		// of its own (the processes of the test before have stopped).
		err := e.cluster.Client(t).ForEachMaster(ctx(t), func(ctx context.Context, node *redis.Client) error {
			return node.FlushAll(ctx).Err()
		})
		if err != nil {
			t.Fatalf("flush the cluster: %v", err)
		}
	}
	e.s3 = e.minio.Client(t)
	return e
}

// redisURL is the URL chunkup processes connect to.
func (e *env) redisURL() string {
	if e.cluster != nil {
		return e.cluster.URL()
	}
	return e.redis.URL()
}

// uploadKeys lists the keys matching pattern in the slot of upload id's keys (on a
// cluster, KEYS asks one node: the one that serves that slot).
func uploadKeys(t testing.TB, rdb redis.UniversalClient, id, pattern string) ([]string, error) {
	t.Helper()
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx(t), "{"+id+"}")
		if err != nil {
			return nil, err
		}
		return node.Keys(ctx(t), pattern).Result()
	}
	return rdb.Keys(ctx(t), pattern).Result()
}

// rdb is a client of e's Redis, to look at or stage state directly.
func (e *env) rdb(t testing.TB) redis.UniversalClient {
	t.Helper()
	if e.cluster != nil {
		return e.cluster.Client(t)
	}
	return e.redis.Client(t)
}

// config is a process configuration on e with fast sweeps and short leases, so that
// recovery paths run within a test's patience.
func (e *env) config(roles ...string) app.Config {
	return app.Config{
		GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", RedisURL: e.redisURL(),
		S3: e.minio.S3Config(), Bucket: bucket, Roles: roles, ShutdownTimeout: 5 * time.Second,
		Worker:    workerCfg(),
		Completer: completerCfg(),
		Logger:    testLogger(),
	}
}

// dial connects a client to addr.
func dial(t testing.TB, addr string) *client.Client {
	t.Helper()
	c, err := client.Dial(addr, client.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func testLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// running is a process started by start.
type running struct {
	*app.App
	stop func()
}

// Stop shuts the process down gracefully and waits for it.
func (r *running) Stop() { r.stop() }

// start runs a process until the test ends (or Stop).
func (e *env) start(t testing.TB, cfg app.Config) *running {
	t.Helper()
	a, err := app.New(ctx(t), cfg)
	if err != nil {
		t.Fatalf("start chunkup: %v", err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("chunkup run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return &running{App: a, stop: stop}
}

func (e *env) client(t testing.TB, a *running, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.Dial(a.GRPCAddr(), append([]client.Option{client.WithPollInterval(20 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// object reads an object's bytes back from MinIO.
func (e *env) object(t testing.TB, key string) []byte {
	t.Helper()
	out, err := e.s3.GetObject(ctx(t), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("get object %s: %v", key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// requireExact checks that the upload completed and that MinIO holds exactly want.
func (e *env) requireExact(t testing.TB, up *chunkupv1.Upload, want []byte) {
	t.Helper()
	if up.State != chunkupv1.UploadState_UPLOAD_STATE_COMPLETED {
		t.Fatalf("upload %s is %v (%s), want COMPLETED", up.UploadId, up.State, up.Error)
	}
	got := e.object(t, up.Key)
	if sha256.Sum256(got) != sha256.Sum256(want) {
		t.Fatalf("object %s: %d bytes with sha256 %x, want %d bytes with sha256 %x",
			up.Key, len(got), sha256.Sum256(got), len(want), sha256.Sum256(want))
	}
	if up.Size != int64(len(want)) {
		t.Fatalf("upload reports size %d, want %d", up.Size, len(want))
	}
}

// openMultipartUploads lists the multipart uploads MinIO still holds.
func (e *env) openMultipartUploads(t testing.TB) int {
	t.Helper()
	out, err := e.s3.ListMultipartUploads(ctx(t), &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatal(err)
	}
	return len(out.Uploads)
}

func ctx(t testing.TB) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return c
}

// randomBytes returns n reproducible pseudo-random bytes.
func randomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 1})
	_, _ = r.Read(b)
	return b
}

// waitFor polls cond until it holds or the test's patience ends.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func getUpload(t testing.TB, c *client.Client, id string) *chunkupv1.Upload {
	t.Helper()
	r, err := c.API().GetUpload(ctx(t), &chunkupv1.GetUploadRequest{UploadId: id})
	if err != nil {
		t.Fatalf("get upload %s: %v", id, err)
	}
	return r.Upload
}

func reader(b []byte) io.Reader { return bytes.NewReader(b) }
