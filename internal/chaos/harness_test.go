//go:build chaos

package chaos

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/chunkup/chunkup/client"
	"github.com/chunkup/chunkup/completion"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/staging"
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
func ctxFor(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// cluster is one Redis, one MinIO and one Kafka broker shared by a scenario's chunkup
// processes, and the uploads the scenario had acknowledged, to check at the end.
type cluster struct {
	redis *testenv.Redis
	minio *testenv.MinIO
	kafka *testenv.Kafka
	s3    *s3.Client
	store *staging.Store
	bin   string

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
	c := &cluster{
		bin:   chunkupBinary(t),
		redis: testenv.StartRedis(t, redisOpts...),
		minio: testenv.StartMinIO(t),
		kafka: testenv.StartKafka(t, topic),
	}
	c.minio.CreateBucket(t, bucket)
	c.s3 = c.minio.Client(t)
	var err error
	if c.store, err = staging.New(c.redis.Client(t), staging.Config{}); err != nil {
		t.Fatal(err)
	}
	return c
}

// chunkupBinary is the chunkup binary under test: $CHUNKUP_CHAOS_BIN when set (to
// run the suite against a release build), else cmd/chunkup built from this tree.
func chunkupBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHUNKUP_CHAOS_BIN"); p != "" {
		binOnce.Do(func() { t.Logf("chaos: testing the chunkup binary %s ($CHUNKUP_CHAOS_BIN)", p) })
		return p
	}
	return testenv.BuildBinary(t, "github.com/chunkup/chunkup/cmd/chunkup")
}

var binOnce sync.Once

// hasFlag reports whether `chunkup serve` has the flag --name.
func (c *cluster) hasFlag(t *testing.T, name string) bool {
	t.Helper()
	out, _ := exec.Command(c.bin, "serve", "-h").CombinedOutput() // -h exits non-zero
	return bytes.Contains(out, []byte("  -"+name+" "))
}

// node is one chunkup process, which can be killed and started again with the same
// arguments (and so on the same addresses).
type node struct {
	c                  *cluster
	name               string
	grpcAddr, httpAddr string
	args, env          []string
	proc               *testenv.Process
}

type nodeConfig struct {
	s3Endpoint string
	extra      []string
}

// nodeOption configures startNode.
type nodeOption func(*nodeConfig)

// s3Via points the process's S3 client at a proxy instead of MinIO itself.
func s3Via(p *testenv.Proxy) nodeOption {
	return func(nc *nodeConfig) { nc.s3Endpoint = "http://" + p.Addr }
}

// flags adds chunkup serve flags (later ones win).
func flags(args ...string) nodeOption {
	return func(nc *nodeConfig) { nc.extra = append(nc.extra, args...) }
}

// startAttempts is how many times startNode starts a process on fresh ports: a port
// testenv.FreePort found free may be taken by another process before chunkup binds it.
const startAttempts = 4

// startNode runs `chunkup serve --roles roles` with short leases and sweeps, and waits
// until it is ready.
func (c *cluster) startNode(t *testing.T, name, roles string, opts ...nodeOption) *node {
	t.Helper()
	nc := nodeConfig{s3Endpoint: c.minio.Endpoint}
	for _, o := range opts {
		o(&nc)
	}
	n := &node{
		c: c, name: name,
		env: []string{"AWS_ACCESS_KEY_ID=" + c.minio.AccessKey, "AWS_SECRET_ACCESS_KEY=" + c.minio.SecretKey},
	}
	for attempt := 1; ; attempt++ {
		n.grpcAddr = fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
		n.httpAddr = fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
		n.args = append([]string{"serve",
			"--node-id", name, "--roles", roles,
			"--grpc-addr", n.grpcAddr, "--http-addr", n.httpAddr,
			"--redis-url", c.redis.URL(),
			"--s3-endpoint", nc.s3Endpoint, "--s3-bucket", bucket,
			"--kafka-brokers", c.kafka.Addr, "--kafka-topic", topic,
			"--chunk-size", "5MiB",
			"--lease", "1s", "--completer-lease", "1s", "--sweep-interval", "100ms",
			"--shutdown-timeout", "3s",
		}, nc.extra...)
		err := n.tryStart(t)
		if err == nil {
			return n
		}
		if !errors.Is(err, errAddrInUse) || attempt >= startAttempts {
			t.Fatal(err)
		}
		t.Logf("%v; starting it again on other ports", err)
	}
}

// errAddrInUse says a process could not bind one of its addresses.
var errAddrInUse = errors.New("address already in use")

// start starts the process and waits until /readyz answers 200.
func (n *node) start(t *testing.T) {
	t.Helper()
	if err := n.tryStart(t); err != nil {
		t.Fatal(err)
	}
}

// tryStart starts the process and waits until /readyz answers 200. A process that exits
// first because one of its addresses is taken yields an error wrapping errAddrInUse.
func (n *node) tryStart(t *testing.T) error {
	t.Helper()
	n.proc = testenv.StartProcess(t, n.c.bin, n.args, n.env)
	hc := &http.Client{Timeout: 2 * time.Second}
	defer hc.CloseIdleConnections()
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := hc.Get("http://" + n.httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-n.proc.Done():
			exit := n.proc.Wait()
			if strings.Contains(n.proc.Stderr(), "address already in use") {
				return fmt.Errorf("%s (%s) exited before it was ready: %w (%v)", n.name, n.proc.Name, errAddrInUse, exit)
			}
			return fmt.Errorf("%s (%s) exited before it was ready: %v", n.name, n.proc.Name, exit)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s (%s) not ready after a minute (last: %v)", n.name, n.proc.Name, err)
		}
	}
}

// kill sends SIGKILL to the process (kill -9) and waits for it to die.
func (n *node) kill(t *testing.T) {
	t.Helper()
	pid := n.proc.Pid()
	n.proc.Kill()
	t.Logf("INJECT: kill -9 %s (pid %d)", n.name, pid)
}

// restart starts a killed process again with the same arguments and addresses.
func (n *node) restart(t *testing.T) {
	t.Helper()
	n.start(t)
	t.Logf("INJECT: restarted %s on the same addresses (pid %d)", n.name, n.proc.Pid())
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
	cl, err := client.Dial(addr, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
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
		Name: "chaos.bin", ExpectedSize: ptr(int64(size)), ClientNodeId: "chaos-" + staging.NewID(),
	})
	if err != nil {
		t.Fatalf("create upload: %v", err)
	}
	return r.Upload
}

func ptr[T any](v T) *T { return &v }

// randomBytes returns n reproducible pseudo-random bytes.
func randomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	_, _ = rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 7}).Read(b)
	return b
}

// poll calls cond until it returns nil or the deadline passes, and fails the test with
// cond's last error then.
func poll(t *testing.T, what string, d time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %v", d, what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

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
		st, err := c.store.Get(ctx, u.id)
		if err != nil {
			t.Fatalf("upload %s: %v", u.id, err)
		}
		if st.Status != staging.StatusCompleted {
			t.Fatalf("upload %s is %s (%s), want COMPLETED", u.id, st.Status, st.Error)
		}
		got := c.object(t, ctx, st.Key)
		if sha256.Sum256(got) != sha256.Sum256(u.data) || st.Size != int64(len(u.data)) {
			t.Fatalf("upload %s: object %s has %d bytes, sha256 %x (recorded size %d); want %d bytes, sha256 %x",
				u.id, st.Key, len(got), sha256.Sum256(got), st.Size, len(u.data), sha256.Sum256(u.data))
		}
		keys[u.id] = st.Key
		t.Logf("CHECK: upload %s COMPLETED; s3://%s/%s is byte-identical to the input (%d bytes, sha256 %x)",
			u.id, bucket, st.Key, len(got), sha256.Sum256(got))
	}

	poll(t, "every outbox to drain to Kafka", patience, func() error {
		n, err := c.store.OutboxUploads(ctx)
		if err == nil && n != 0 {
			err = fmt.Errorf("%d uploads have unpublished events", n)
		}
		return err
	})
	evs := c.events(t, ctx)
	for _, u := range uploads {
		var ids []string
		for _, ev := range evs {
			if ev.key != u.id || ev.typ != "chunkup.v1.UploadCompleted" {
				continue
			}
			var done chunkupv1.UploadCompleted
			if err := protojson.Unmarshal(ev.value, &done); err != nil {
				t.Fatalf("upload %s: event %s: %v", u.id, ev.id, err)
			}
			if done.EventId != ev.id || done.UploadId != u.id || done.Size != int64(len(u.data)) || done.Key != keys[u.id] {
				t.Errorf("upload %s: event %s (header id %s) does not describe it: %v", u.id, done.EventId, ev.id, &done)
			}
			ids = append(ids, ev.id)
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
	later, err := staging.New(c.store.Redis(), staging.Config{Now: func() time.Time { return time.Now().Add(240 * time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	// patience, not less: a chunk or completion may legitimately wait out a backoff of
	// up to 30 s after the faults.
	poll(t, "nothing stuck in Redis", patience, func() error {
		var problems []string
		if n, err := c.store.PendingCount(ctx); err != nil || n != 0 {
			refs, _ := later.DuePending(ctx, 20)
			problems = append(problems, fmt.Sprintf("pending index holds %d chunks %v (%v)", n, refs, err))
		}
		if ids, err := later.DueCompletions(ctx, 20); err != nil || len(ids) != 0 {
			problems = append(problems, fmt.Sprintf("completion index holds %v (%v)", ids, err))
		}
		if ids, err := c.store.ActiveUploads(ctx, 0, 20); err != nil || len(ids) != 0 {
			problems = append(problems, fmt.Sprintf("active index holds %v (%v)", ids, err))
		}
		if n, err := c.store.OutboxUploads(ctx); err != nil || n != 0 {
			problems = append(problems, fmt.Sprintf("%d outboxes (%v)", n, err))
		}
		for _, u := range uploads {
			if l, err := c.store.Leases(ctx, u.id); err != nil || len(l) != 0 {
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

// object reads an object from MinIO itself (never through a test's proxy).
func (c *cluster) object(t *testing.T, ctx context.Context, key string) []byte {
	t.Helper()
	out, err := c.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("get object %s: %v", key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatalf("read object %s: %v", key, err)
	}
	return b
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

// event is one message read back from the topic.
type event struct {
	typ, id, key string
	value        []byte
}

// events reads every message on the topic, from the first offset to the last.
func (c *cluster) events(t *testing.T, ctx context.Context) []event {
	t.Helper()
	var last int64
	poll(t, "the Kafka topic's last offset", time.Minute, func() error {
		conn, err := kafka.DialLeader(ctx, "tcp", c.kafka.Addr, topic, 0)
		if err != nil {
			return err
		}
		defer conn.Close()
		last, err = conn.ReadLastOffset()
		return err
	})
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{c.kafka.Addr}, Topic: topic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	var out []event
	for int64(len(out)) < last {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("read the topic: %v", err)
		}
		h := completion.HeadersOf(m.Headers)
		out = append(out, event{key: string(m.Key), value: m.Value, typ: h.Type, id: h.ID})
	}
	return out
}
