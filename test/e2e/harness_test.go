package e2e

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/redis/go-redis/v9"

	"github.com/chunkup/chunkup/app"
	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/test/harness"
	"github.com/chunkup/chunkup/upload"
)

const bucket = "chunkup-test"

// env is one Redis (or, under TestOnCluster, one Redis Cluster) and one S3 store
// (MinIO, or what CHUNKUP_TEST_S3 names: testenv.StartS3) shared by a test's processes.
type env struct {
	t       testing.TB            // the test it is for (see stagingFor)
	redis   *testenv.Redis        // nil on a cluster
	cluster *testenv.RedisCluster // nil on a single Redis
	minio   testenv.S3Server
	s3      *s3.Client
}

func newEnv(t testing.TB) *env {
	t.Helper()
	e := &env{t: t, minio: testenv.StartS3(t)}
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
		Upload:    upload.Config{Staging: stagingFor(e.t)},
		Worker:    workerCfg(),
		Completer: completerCfg(),
		Logger:    testLogger(),
	}
}

// dial connects a client to addr.
func dial(t testing.TB, addr string) *client.Client { return harness.Dial(t, addr) }

func testLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// running is a process started by start.
type running = harness.Running

// start runs a process until the test ends (or Stop).
func (e *env) start(t testing.TB, cfg app.Config) *running { return harness.StartApp(t, cfg) }

func (e *env) client(t testing.TB, a *running, opts ...client.Option) *client.Client {
	t.Helper()
	return harness.Dial(t, a.GRPCAddr(), opts...)
}

// object reads an object's bytes back from MinIO.
func (e *env) object(t testing.TB, key string) []byte {
	return harness.Object(t, ctx(t), e.s3, bucket, key)
}

// requireExact checks that the upload completed and that MinIO holds exactly want.
func (e *env) requireExact(t testing.TB, up *chunkupv1.Upload, want []byte) {
	t.Helper()
	harness.RequireExact(t, ctx(t), e.s3, bucket, up, want)
}

// openMultipartUploads counts the multipart uploads MinIO still holds.
func (e *env) openMultipartUploads(t testing.TB) int { return e.openMultipartUploadsFor(t, "") }

// openMultipartUploadsFor counts the multipart uploads MinIO still holds for keys that
// begin with prefix.
func (e *env) openMultipartUploadsFor(t testing.TB, prefix string) int {
	t.Helper()
	out, err := e.s3.ListMultipartUploads(ctx(t), &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket), Prefix: aws.String(prefix)})
	if err != nil {
		t.Fatal(err)
	}
	return len(out.Uploads)
}

func ctx(t testing.TB) context.Context { return harness.Ctx(t, 3*time.Minute) }

// randomBytes returns n reproducible pseudo-random bytes.
var randomBytes = harness.RandomBytes

// waitFor polls cond until it holds or the test's patience ends.
var waitFor = harness.Eventually

// serveProcess runs `chunkup serve --roles roles` on e (and Kafka k, if not nil) as its
// own process, and waits until it is ready.
func (e *env) serveProcess(t testing.TB, k *testenv.Kafka, name, roles string, extra ...string) *harness.Node {
	t.Helper()
	cfg := harness.NodeConfig{Name: name, Roles: roles, RedisURL: e.redisURL(), MinIO: e.minio, Bucket: bucket,
		Flags: append([]string{"--lease", "2s", "--completer-lease", "2s", "--log-level", "warn", "--staging", stagingFor(t)}, extra...)}
	if k != nil {
		cfg.KafkaAddr, cfg.Topic = k.Addr, topic
	}
	return harness.StartNode(t, cfg)
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
