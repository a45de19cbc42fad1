package e2e

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/chunkup/chunkup/cleanup"
	"github.com/chunkup/chunkup/completion"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/s3store"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/stagingtest"
	"github.com/chunkup/chunkup/staging/uploads"
	"github.com/chunkup/chunkup/test/harness"
)

// TestWorkerKilledHoldingClaim runs a worker as a separate chunkup process whose S3
// traffic goes through a proxy, stalls the proxy so the worker hangs mid-UploadPart with
// its claims held, kills it with SIGKILL, and checks that another worker takes the
// chunks over after their lease and the object is exact.
func TestWorkerKilledHoldingClaim(t *testing.T) {
	e := newEnv(t)
	proxy := testenv.StartProxy(t, strings.TrimPrefix(e.minio.S3Config().Endpoint, "http://"))
	worker := harness.StartNode(t, harness.NodeConfig{Name: "worker", Roles: "worker", RedisURL: e.redisURL(),
		MinIO: e.minio, S3Endpoint: "http://" + proxy.Addr, Bucket: bucket,
		Flags: []string{"--lease", "2s", "--worker-concurrency", "2"}})
	proxy.Pause()

	api := e.start(t, e.config("api"))
	c := e.client(t, api)
	data := randomBytes(3*chunk+99, 5)
	created, err := c.API().CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id := created.Upload.UploadId
	if err := c.Send(ctx(t), created.Upload, reader(data)); err != nil {
		t.Fatal(err)
	}
	var held map[uint32]time.Time
	waitFor(t, "the worker process to claim chunks", func() bool {
		held, err = api.Uploads().Leases(ctx(t), id)
		return err == nil && len(held) > 0
	})
	worker.Kill(t)
	t.Logf("killed the worker (kill -9) while it held chunks %v", keys(held))
	if up := getUpload(t, c, id); up.UploadedChunks != 0 {
		t.Fatalf("%d chunks uploaded before the kill; the proxy should have stalled them", up.UploadedChunks)
	}
	proxy.Resume()

	e.start(t, e.config("worker", "completer"))
	final, err := c.Wait(ctx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	e.requireExact(t, final, data)
}

func keys(m map[uint32]time.Time) []uint32 {
	var out []uint32
	for k := range m {
		out = append(out, k)
	}
	return out
}

// countingS3 is the real MinIO client, counting CompleteMultipartUpload calls.
type countingS3 struct {
	*s3.Client
	completes atomic.Int32
}

func (c *countingS3) CompleteMultipartUpload(ctx context.Context, in *s3.CompleteMultipartUploadInput, opts ...func(*s3.Options)) (*s3.CompleteMultipartUploadOutput, error) {
	c.completes.Add(1)
	return c.Client.CompleteMultipartUpload(ctx, in, opts...)
}

// uploadedNotCompleted sends a three-part upload through a process without a completer
// and waits until every part is in S3.
func uploadedNotCompleted(t *testing.T, e *env, data []byte) string {
	t.Helper()
	a := e.start(t, e.config("api", "worker"))
	c := e.client(t, a)
	created, err := c.API().CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Send(ctx(t), created.Upload, reader(data)); err != nil {
		t.Fatal(err)
	}
	id := created.Upload.UploadId
	waitFor(t, "every part in S3", func() bool { return getUpload(t, c, id).UploadedChunks == 3 })
	if up := getUpload(t, c, id); up.State != chunkupv1.UploadState_UPLOAD_STATE_ACTIVE {
		t.Fatalf("upload is %v without a completer", up.State)
	}
	a.Stop()
	return id
}

func (e *env) completer(t *testing.T, s3c s3store.API, now func() time.Time) (*completion.Completer, *uploads.Store) {
	t.Helper()
	store := stagingtest.Open(t, e.rdb(t), staging.Config{Now: now}).Uploads
	cmp, err := completion.New(store.Completions(), s3store.New(s3c), &cleanup.Ender{Store: store.Ends(), S3: s3store.New(e.s3)}, nil, completion.Config{Lease: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return cmp, store
}

// TestCompletersRace runs two completers on one ready upload at the same moment:
// CompleteMultipartUpload is called once and the upload is COMPLETED, exact.
func TestCompletersRace(t *testing.T) {
	e := newEnv(t)
	data := randomBytes(2*chunk+1234, 9)
	id := uploadedNotCompleted(t, e, data)

	s3c := &countingS3{Client: e.s3}
	a, store := e.completer(t, s3c, time.Now)
	b, _ := e.completer(t, s3c, time.Now)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, cmp := range []*completion.Completer{a, b} {
		wg.Go(func() {
			<-start
			if err := cmp.Complete(ctx(t), id); err != nil {
				t.Error(err)
			}
		})
	}
	close(start)
	wg.Wait()
	if n := s3c.completes.Load(); n != 1 {
		t.Fatalf("CompleteMultipartUpload called %d times, want 1", n)
	}
	up, err := store.Get(ctx(t), id)
	if err != nil || up.Status != staging.StatusCompleted {
		t.Fatalf("upload %+v, %v; want COMPLETED", up, err)
	}
	e.requireExact(t, &chunkupv1.Upload{UploadId: id, State: chunkupv1.UploadState_UPLOAD_STATE_COMPLETED, Key: up.Key, Size: up.Size}, data)
}

// TestCompleterDiesMidway: a completer takes the guard, completes the multipart upload
// in S3 and dies before recording it. After its lease a second completer meets
// NoSuchUpload, finds the object with HeadObject, and records the completion.
func TestCompleterDiesMidway(t *testing.T) {
	e := newEnv(t)
	data := randomBytes(2*chunk+55, 10)
	id := uploadedNotCompleted(t, e, data)

	clk := testenv.NewClock(time.Now())
	s3c := &countingS3{Client: e.s3}
	heir, store := e.completer(t, s3c, clk.Now)

	// The doomed completer's work, done by hand up to its death.
	b, err := store.Completions().Begin(ctx(t), id, "doomed", 10*time.Second)
	if err != nil || b.Outcome != staging.Begun {
		t.Fatalf("begin: %+v %v", b, err)
	}
	parts, err := store.Completions().Parts(ctx(t), id, b.Total)
	if err != nil {
		t.Fatal(err)
	}
	var done []s3store.Part
	var size int64
	var whole uint32
	for _, p := range parts {
		done = append(done, s3store.Part{N: p.N, ETag: p.ETag, CRC32C: p.CRC32C})
		size, whole = size+p.Size, crc.Combine(whole, p.CRC32C, p.Size)
	}
	if _, err := s3store.New(e.s3).Complete(ctx(t), b.Bucket, b.Key, b.MultipartID, b.MultipartChecksummed, done, size, whole, s3store.Owner{UploadID: id}); err != nil {
		t.Fatal(err)
	}

	// While the dead completer's guard lasts, nobody completes.
	if err := heir.Complete(ctx(t), id); err != nil {
		t.Fatal(err)
	}
	if up, _ := store.Get(ctx(t), id); up.Status != staging.StatusCompleting || s3c.completes.Load() != 0 {
		t.Fatalf("during the guard: %s with %d completes, want COMPLETING with none", up.Status, s3c.completes.Load())
	}
	clk.Add(11 * time.Second)
	if err := heir.Complete(ctx(t), id); err != nil {
		t.Fatal(err)
	}
	up, err := store.Get(ctx(t), id)
	if err != nil || up.Status != staging.StatusCompleted || up.Size != int64(len(data)) || up.ETag == "" {
		t.Fatalf("after recovery: %+v %v", up, err)
	}
	e.requireExact(t, &chunkupv1.Upload{UploadId: id, State: chunkupv1.UploadState_UPLOAD_STATE_COMPLETED, Key: up.Key, Size: up.Size}, data)
}

// TestLostIndexEntriesReconciled puts Redis in the states a master's failover can leave
// behind, after every process has started: a staged chunk whose pending entry is gone,
// and a chunk whose part record is gone while its removal from the pending index
// survived (the state of the upload that, in the field, stayed ACTIVE with every chunk
// received and one never uploaded). Only the cleanup role's periodic reconciliation can
// find them; it does, and both uploads complete exact.
func TestLostIndexEntriesReconciled(t *testing.T) {
	e := newEnv(t)
	cleanupCfg := e.config("completer", "cleanup")
	cleanupCfg.Expirer.ReconcileInterval = 300 * time.Millisecond
	cleaner := e.start(t, cleanupCfg) // running before the losses: start-up recovery is behind it
	api := e.start(t, e.config("api"))
	c := e.client(t, api)
	pending := func() int64 {
		n, err := cleaner.Uploads().Chunks().Pending(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	lostEntry := randomBytes(2*chunk+1, 901)
	u1 := createAndSend(t, c, lostEntry, 1, 2, 3)
	stagingtest.LosePending(t, e.rdb(t), staging.ChunkRef{UploadID: u1.UploadId, N: 2})

	lostRecord := randomBytes(chunk+2, 902)
	u2 := createAndSend(t, c, lostRecord, 1, 2)
	ref := staging.ChunkRef{UploadID: u2.UploadId, N: 1}
	chunks := api.Uploads().Chunks()
	cl, err := chunks.Claim(ctx(t), ref, "doomed", time.Minute)
	if err != nil || cl.Outcome != uploads.Claimed {
		t.Fatalf("claim: %+v %v", cl, err)
	}
	if out, _, err := chunks.Record(ctx(t), ref, "doomed", `"etag-the-failover-took"`, cl.CRC32C, cl.Size); err != nil || out != uploads.Recorded {
		t.Fatalf("record: %v %v", out, err)
	}
	stagingtest.LoseRecord(t, e.rdb(t), ref, lostRecord[:chunk], "doomed")

	// Five chunks are staged and unrecorded; two of them have lost their entry.
	waitFor(t, "the reconciliation to index the lost chunks again", func() bool { return pending() == 5 })
	worker := e.config("worker")
	worker.Worker.SweepInterval = 100 * time.Millisecond
	e.start(t, worker)
	for _, u := range []struct {
		up   *chunkupv1.Upload
		data []byte
	}{{u1, lostEntry}, {u2, lostRecord}} {
		done, err := c.Wait(ctx(t), u.up.UploadId)
		if err != nil {
			t.Fatal(err)
		}
		e.requireExact(t, done, u.data)
	}
}
