//go:build chaos

package chaos

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/stagingtest"
	"github.com/chunkup/chunkup/test/harness"
)

const (
	bucket    = "chunkup-chaos"
	topic     = "chunkup.uploads"
	MiB       = 1 << 20
	chunkSize = 5 * MiB

	// allRoles is every role but OCR, which these tests do not exercise.
	allRoles = "api,worker,completer,publisher,cleanup"

	// patience bounds every wait of a scenario.
	patience = 3 * time.Minute
)

// ctxFor returns a context that ends after d or when the test ends.
var ctxFor = harness.Ctx

// cluster is one Redis, one MinIO and one Kafka broker shared by a scenario's chunkup
// processes, and the uploads the scenario had acknowledged, to check at the end.
type cluster struct {
	redis  *testenv.Redis
	minio  *testenv.MinIO
	kafka  *testenv.Kafka
	s3     *s3.Client
	rdb    redis.UniversalClient
	stores *stagingtest.Stores

	mu      sync.Mutex
	uploads []tracked
}

// tracked is an upload whose every chunk the server acknowledged, with its input.
type tracked struct {
	id   string
	data []byte
}

func newCluster(t *testing.T, redisOpts ...testenv.RedisOption) *cluster {
	t.Helper()
	harness.Binary(t) // built before the servers start, so that the build does not count against their patience
	c := &cluster{
		redis: testenv.StartRedis(t, redisOpts...),
		minio: testenv.StartMinIO(t),
		kafka: testenv.StartKafka(t, topic),
	}
	c.minio.CreateBucket(t, bucket)
	c.s3 = c.minio.Client(t)
	c.rdb = c.redis.Client(t)
	c.stores = stagingtest.Open(t, c.rdb, staging.Config{})
	return c
}

// hasFlag reports whether `chunkup serve` has the flag --name.
func (c *cluster) hasFlag(t *testing.T, name string) bool {
	t.Helper()
	out, _ := exec.Command(harness.Binary(t), "serve", "-h").CombinedOutput() // -h exits non-zero
	return bytes.Contains(out, []byte("  -"+name+" "))
}

type nodeConfig = harness.NodeConfig

// nodeOption configures startNode.
type nodeOption func(*nodeConfig)

// s3Via points the process's S3 client at a proxy instead of MinIO itself.
func s3Via(p *testenv.Proxy) nodeOption {
	return func(nc *nodeConfig) { nc.S3Endpoint = "http://" + p.Addr }
}

// flags adds chunkup serve flags (later ones win).
func flags(args ...string) nodeOption {
	return func(nc *nodeConfig) { nc.Flags = append(nc.Flags, args...) }
}

// Staging modes (chunkup serve --staging): every scenario runs in both.
var stagingModes = []string{"adaptive", "always"}

// bothModes runs test once per staging mode, as subtests named after the mode.
func bothModes(t *testing.T, test func(*testing.T)) {
	for _, mode := range stagingModes {
		t.Run(mode, test)
	}
}

// stagingMode is the staging mode of the bothModes subtest t runs in.
func stagingMode(t *testing.T) string {
	for seg := range strings.SplitSeq(t.Name(), "/") {
		if slices.Contains(stagingModes, seg) {
			return seg
		}
	}
	return "adaptive"
}

// startNode runs `chunkup serve --roles roles` on the cluster (see harness.StartNode),
// with the staging mode of the subtest t runs in.
func (c *cluster) startNode(t *testing.T, name, roles string, opts ...nodeOption) *harness.Node {
	t.Helper()
	nc := nodeConfig{Name: name, Roles: roles, RedisURL: c.redis.URL(), MinIO: c.minio, Bucket: bucket,
		KafkaAddr: c.kafka.Addr, Topic: topic, Flags: []string{"--staging", stagingMode(t)}}
	for _, o := range opts {
		o(&nc)
	}
	return harness.StartNode(t, nc)
}

// dial connects an SDK client to addr with generous retries, counting chunks with cc
// when it is not nil.
func dial(t *testing.T, addr string, cc *testenv.ChunkCounter, opts ...client.Option) *client.Client {
	t.Helper()
	base := []client.Option{client.WithRetry(200, 50*time.Millisecond, time.Second),
		client.WithPollInterval(50 * time.Millisecond), client.WithWindow(2)}
	if cc != nil {
		base = append(base, client.WithDialOptions(cc.DialOption()))
	}
	return harness.Dial(t, addr, append(base, opts...)...)
}

// upload runs an SDK upload in the background; wait returns its result.
type upload struct {
	data []byte
	done chan struct{}
	up   *chunkupv1.Upload
	err  error

	mu       sync.Mutex
	uploadID string
}

// startUpload starts uploading data with cl; hook, when not nil, gets every progress
// report.
func startUpload(ctx context.Context, cl *client.Client, data []byte, hook func(client.Progress), opts ...client.UploadOption) *upload {
	u := &upload{data: data, done: make(chan struct{})}
	progress := client.WithProgress(func(p client.Progress) {
		u.mu.Lock()
		u.uploadID = p.UploadID
		u.mu.Unlock()
		if hook != nil {
			hook(p)
		}
	})
	opts = append([]client.UploadOption{client.WithSize(int64(len(data))), progress}, opts...)
	go func() {
		defer close(u.done)
		u.up, u.err = cl.Upload(ctx, bytes.NewReader(data), opts...)
	}()
	return u
}

// id waits until the upload has an id (its first progress report) and returns it.
func (u *upload) id(t *testing.T) string {
	t.Helper()
	var id string
	poll(t, "the upload's first progress report", time.Minute, func() error {
		u.mu.Lock()
		id = u.uploadID
		u.mu.Unlock()
		if id == "" {
			select {
			case <-u.done:
				return fmt.Errorf("the upload ended without a progress report: %v", u.err)
			default:
			}
			return errors.New("no progress report yet")
		}
		return nil
	})
	return id
}

// wait waits for the upload to end and tracks it for the invariant checks.
func (u *upload) wait(t *testing.T, c *cluster) *chunkupv1.Upload {
	t.Helper()
	select {
	case <-u.done:
	case <-time.After(patience):
		t.Fatalf("upload did not end within %v", patience)
	}
	if u.err != nil {
		t.Fatalf("upload failed: %v", u.err)
	}
	c.track(u.up.UploadId, u.data)
	return u.up
}

func (c *cluster) track(id string, data []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.uploads = append(c.uploads, tracked{id: id, data: data})
}

// createUpload creates an upload of size bytes and returns its id, for scenarios that
// need the id before the data is sent.
func createUpload(t *testing.T, cl *client.Client, size int) *chunkupv1.Upload {
	t.Helper()
	r, err := cl.API().CreateUpload(ctxFor(t, time.Minute), &chunkupv1.CreateUploadRequest{
		Name: "chaos.bin", ExpectedSize: ptr(int64(size)), ClientNodeId: "chaos-" + ids.New(),
	})
	if err != nil {
		t.Fatalf("create upload: %v", err)
	}
	return r.Upload
}

func ptr[T any](v T) *T { return &v }

// randomBytes returns n reproducible pseudo-random bytes.
var randomBytes = harness.RandomBytes

// poll calls cond until it returns nil, or fails the test with its last error after d.
var poll = harness.Poll

func sortedKeys[V any](m map[uint32]V) []uint32 {
	var out []uint32
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// checkInvariants checks, for every upload the scenario tracked, the invariants the
// suite guards, and logs what it checked:
//
//   - the upload is COMPLETED and its object in MinIO has exactly the input's bytes
//     (SHA-256) and size;
//   - the outbox drains, and the topic holds an UploadCompleted for the upload, every
//     copy with the same event id and a body naming the upload and its size;
//   - nothing is stuck: no chunk leases, an empty pending index, no completion due or
//     deferred, no upload left in the active index;
//   - no multipart upload is left open in MinIO, for the upload's key or in the bucket.
func (c *cluster) checkInvariants(t *testing.T) {
	t.Helper()
	ctx := ctxFor(t, patience)
	c.mu.Lock()
	uploads := slices.Clone(c.uploads)
	c.mu.Unlock()
	if len(uploads) == 0 {
		t.Fatal("no upload to check")
	}

	keys := map[string]string{}
	for _, u := range uploads {
		st, err := c.stores.Uploads.Get(ctx, u.id)
		if err != nil {
			t.Fatalf("upload %s: %v", u.id, err)
		}
		if st.Status != staging.StatusCompleted {
			t.Fatalf("upload %s is %s (%s), want COMPLETED", u.id, st.Status, st.Error)
		}
		got := harness.Object(t, ctx, c.s3, bucket, st.Key)
		if sha256.Sum256(got) != sha256.Sum256(u.data) || st.Size != int64(len(u.data)) {
			t.Fatalf("upload %s: object %s has %d bytes, sha256 %x (recorded size %d); want %d bytes, sha256 %x",
				u.id, st.Key, len(got), sha256.Sum256(got), st.Size, len(u.data), sha256.Sum256(u.data))
		}
		keys[u.id] = st.Key
		t.Logf("CHECK: upload %s COMPLETED; s3://%s/%s is byte-identical to the input (%d bytes, sha256 %x)",
			u.id, bucket, st.Key, len(got), sha256.Sum256(got))
	}

	poll(t, "every outbox to drain to Kafka", patience, func() error {
		n, err := c.stores.Outbox.Len(ctx)
		if err == nil && n != 0 {
			err = fmt.Errorf("%d uploads have unpublished events", n)
		}
		return err
	})
	evs := harness.Events(t, ctx, c.kafka.Addr, topic)
	for _, u := range uploads {
		var ids []string
		for _, ev := range harness.EventsFor(evs, u.id, "chunkup.v1.UploadCompleted") {
			var done chunkupv1.UploadCompleted
			if err := protojson.Unmarshal(ev.Value, &done); err != nil {
				t.Fatalf("upload %s: event %s: %v", u.id, ev.ID, err)
			}
			if done.EventId != ev.ID || done.UploadId != u.id || done.Size != int64(len(u.data)) || done.Key != keys[u.id] {
				t.Errorf("upload %s: event %s (header id %s) does not describe it: %v", u.id, done.EventId, ev.ID, &done)
			}
			ids = append(ids, ev.ID)
		}
		switch {
		case len(ids) == 0:
			t.Errorf("upload %s completed but has no UploadCompleted event on %s (%d events on the topic)", u.id, topic, len(evs))
		case slices.ContainsFunc(ids, func(id string) bool { return id != ids[0] }):
			t.Errorf("upload %s has UploadCompleted events with different event ids %v; a redelivery must keep its id", u.id, ids)
		default:
			t.Logf("CHECK: upload %s has its UploadCompleted event on Kafka (id %s, delivered %d time(s))", u.id, ids[0], len(ids))
		}
	}

	// Far in the future every deferred completion and pending chunk is due, so these
	// list whatever is left in the indexes.
	later := stagingtest.Open(t, c.rdb, staging.Config{Now: func() time.Time { return time.Now().Add(240 * time.Hour) }}).Uploads
	// patience, not less: a chunk or completion may legitimately wait out a backoff of
	// up to 30 s after the faults.
	poll(t, "nothing stuck in Redis", patience, func() error {
		var problems []string
		if n, err := c.stores.Uploads.Chunks().Pending(ctx); err != nil || n != 0 {
			refs, _ := later.Chunks().Due(ctx, 20)
			problems = append(problems, fmt.Sprintf("pending index holds %d chunks %v (%v)", n, refs, err))
		}
		if ids, err := later.Completions().Due(ctx, 20); err != nil || len(ids) != 0 {
			problems = append(problems, fmt.Sprintf("completion index holds %v (%v)", ids, err))
		}
		if ids, err := c.stores.Uploads.Ends().ActiveUploads(ctx, 0, 20); err != nil || len(ids) != 0 {
			problems = append(problems, fmt.Sprintf("active index holds %v (%v)", ids, err))
		}
		if n, err := c.stores.Outbox.Len(ctx); err != nil || n != 0 {
			problems = append(problems, fmt.Sprintf("%d outboxes (%v)", n, err))
		}
		for _, u := range uploads {
			if l, err := c.stores.Uploads.Leases(ctx, u.id); err != nil || len(l) != 0 {
				problems = append(problems, fmt.Sprintf("upload %s: leases on chunks %v (%v)", u.id, sortedKeys(l), err))
			}
		}
		if len(problems) > 0 {
			return errors.New(strings.Join(problems, "; "))
		}
		return nil
	})
	t.Logf("CHECK: nothing stuck: no leases on %d upload(s), pending index empty, completion index empty, active index empty, outbox empty", len(uploads))

	open := c.openMultipart(t, ctx, "")
	for _, u := range uploads {
		open = append(open, c.openMultipart(t, ctx, keys[u.id])...)
	}
	if len(open) > 0 {
		t.Errorf("multipart uploads left open in MinIO: %v", open)
	} else {
		t.Logf("CHECK: no multipart upload left open in MinIO (bucket-wide and for each of the %d keys)", len(uploads))
	}
}

// openMultipart lists the multipart uploads MinIO holds under prefix, as "key/id".
// (MinIO lists a bucket's multipart uploads only for a prefix naming an object, so the
// checks list both the bucket and each key.)
func (c *cluster) openMultipart(t *testing.T, ctx context.Context, prefix string) []string {
	t.Helper()
	in := &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket)}
	if prefix != "" {
		in.Prefix = aws.String(prefix)
	}
	out, err := c.s3.ListMultipartUploads(ctx, in)
	if err != nil {
		t.Fatalf("list multipart uploads: %v", err)
	}
	var open []string
	for _, u := range out.Uploads {
		open = append(open, aws.ToString(u.Key)+"/"+aws.ToString(u.UploadId))
	}
	return open
}
