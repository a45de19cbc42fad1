package chunkworker_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/chunkup/chunkup/chunkworker"
	"github.com/chunkup/chunkup/cleanup"
	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/s3store"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/stagingtest"
	"github.com/chunkup/chunkup/staging/uploads"
)

// throughRig is a running worker whose S3 goes through a proxy the test can pause.
type throughRig struct {
	st    *uploads.Store
	w     *chunkworker.Worker
	proxy *testenv.Proxy
	s3    *s3.Client // MinIO directly, to read objects back
	reads *readCounter
}

const throughBucket = "through"

func newThroughRig(t *testing.T, cfg chunkworker.Config) *throughRig {
	t.Helper()
	ctx := testenv.Context(t, time.Minute)
	minio := testenv.StartMinIO(t)
	minio.CreateBucket(t, throughBucket)
	proxy := testenv.StartProxy(t, minio.Addr)
	viaProxy, err := s3store.NewClient(ctx, s3store.Config{Endpoint: "http://" + proxy.Addr, AccessKey: minio.AccessKey, SecretKey: minio.SecretKey, MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	st := stagingtest.Open(t, testenv.StartRedis(t).Client(t), staging.Config{}).Uploads
	objects := s3store.New(viaProxy)
	reads := &readCounter{Chunks: st.Chunks()}
	w, err := chunkworker.New(reads, objects, &cleanup.Ender{Store: st.Ends(), S3: objects}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(runCtx) }()
	t.Cleanup(func() { proxy.Resume(); stop(); <-done })
	return &throughRig{st: st, w: w, proxy: proxy, s3: minio.Client(t), reads: reads}
}

// upload creates an upload of total chunks of 5 MiB.
func (r *throughRig) upload(t *testing.T, total uint32) string {
	t.Helper()
	id := ids.New()
	if _, err := r.st.Create(testenv.Context(t, time.Minute), staging.NewUpload{ID: id, Bucket: throughBucket, Key: id, ChunkSize: 5 << 20, ExpectedSize: -1, Total: total}); err != nil {
		t.Fatal(err)
	}
	return id
}

// waitFor polls cond until it holds or ctx ends.
func waitFor(ctx context.Context, t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	for {
		ok, err := cond()
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestWriteThroughStoresAtOnce: with S3 keeping pace, each chunk goes to S3 within the
// call and is recorded as received and stored; the upload becomes ready with its last
// part; Redis never held a chunk's bytes (nothing staged, nothing read back), and the
// completed object is the chunks' bytes.
func TestWriteThroughStoresAtOnce(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	r := newThroughRig(t, chunkworker.Config{Concurrency: 2})
	id := r.upload(t, 2)
	chunks := [][]byte{bytes.Repeat([]byte{1}, 5<<20), []byte("the tail")}
	for i, data := range chunks {
		n := uint32(i + 1)
		res, err := r.w.WriteThrough(ctx, staging.ChunkRef{UploadID: id, N: n}, data, crc.Checksum(data), n == 2, true)
		if err != nil || !res.Stored || res.HandOver != nil || res.Ready != (n == 2) {
			t.Fatalf("chunk %d: %+v %v; want stored (ready with the last)", n, res, err)
		}
	}
	up, err := r.st.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if up.Uploaded != 2 || len(up.ReceivedChunks) != 2 || up.ReceivedBytes != 5<<20+8 {
		t.Fatalf("upload %+v; want both chunks received and stored", up)
	}
	if r.reads.reads.Load() != 0 {
		t.Errorf("chunks read from Redis: %d", r.reads.reads.Load())
	}
	// Complete it as the completer would, with the whole object's CRC32C.
	parts, err := r.st.Completions().Parts(ctx, id, 2)
	if err != nil {
		t.Fatal(err)
	}
	ps := []s3store.Part{{N: 1, ETag: parts[0].ETag, CRC32C: parts[0].CRC32C}, {N: 2, ETag: parts[1].ETag, CRC32C: parts[1].CRC32C}}
	whole := crc.Combine(parts[0].CRC32C, parts[1].CRC32C, parts[1].Size)
	if _, err := s3store.New(r.s3).Complete(ctx, throughBucket, id, up.MultipartID, true, ps, up.UploadedBytes, whole, s3store.Owner{}); err != nil {
		t.Fatal(err)
	}
	out, err := r.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(throughBucket), Key: aws.String(id)})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(out.Body)
	out.Body.Close()
	if !bytes.Equal(got, append(chunks[0], chunks[1]...)) {
		t.Fatalf("object has %d bytes, not the chunks'", len(got))
	}
}

// TestWriteThroughWhenS3IsBehind pauses S3 under a worker of one slot:
//   - a write-through that outlasts SlowPart comes back unstored with a HandOver; the
//     caller stages the chunk and hands it over, and once S3 answers the part is
//     recorded from memory like a staged chunk's (no read from Redis);
//   - meanwhile the slot is busy, so another chunk waits no longer than SlowPart for it
//     and is not written through;
//   - after that slow part, S3 counts as behind: the next chunk is not written through
//     although the slot is free, until parts are fast again.
func TestWriteThroughWhenS3IsBehind(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	r := newThroughRig(t, chunkworker.Config{Concurrency: 1, SlowPart: 200 * time.Millisecond})
	id := r.upload(t, 0)
	other := r.upload(t, 0)
	r.proxy.Pause()
	data := []byte("slow chunk")
	ref := staging.ChunkRef{UploadID: id, N: 1}
	res, err := r.w.WriteThrough(ctx, ref, data, crc.Checksum(data), true, true)
	if err != nil || res.Stored || res.HandOver == nil || !res.InUse {
		t.Fatalf("write-through with S3 paused: %+v %v; want a hand-over", res, err)
	}
	if _, err := r.st.Stage(ctx, id, 1, data, crc.Checksum(data), true); err != nil {
		t.Fatal(err)
	}
	res.HandOver(data, crc.Checksum(data))

	busy, err := r.w.WriteThrough(ctx, staging.ChunkRef{UploadID: other, N: 1}, []byte("x"), crc.Checksum([]byte("x")), true, true)
	if err != nil || busy.Stored || busy.HandOver != nil || busy.InUse {
		t.Fatalf("write-through while the only slot is busy: %+v %v; want nothing done", busy, err)
	}

	r.proxy.Resume()
	// Recorded, then its pending entry dropped (the next round trip): wait for both.
	waitFor(ctx, t, "the slow part to be recorded and leave the pending index", func() (bool, error) {
		up, err := r.st.Get(ctx, id)
		if err != nil || up.Uploaded != 1 {
			return false, err
		}
		n, err := r.st.Chunks().Pending(ctx)
		return n == 0, err
	})
	if r.reads.reads.Load() != 0 {
		t.Errorf("the handed-over chunk was read back from Redis")
	}
	behind, err := r.w.WriteThrough(ctx, staging.ChunkRef{UploadID: other, N: 1}, []byte("x"), crc.Checksum([]byte("x")), true, true)
	if err != nil || behind.Stored || behind.HandOver != nil {
		t.Fatalf("write-through right after a slow part: %+v %v; want it staged instead", behind, err)
	}
	if l, _ := r.st.Leases(ctx, other); len(l) != 0 {
		t.Errorf("leases on a chunk not written through: %v", l)
	}
}

// TestWriteThroughFailureStagesInstead: S3 refusing the part (here: the proxy closes
// every connection) makes the write-through return with nothing done and its lease
// released, so the chunk is staged as if it had never been tried.
func TestWriteThroughFailureStagesInstead(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	r := newThroughRig(t, chunkworker.Config{Concurrency: 2, SlowPart: 10 * time.Second})
	id := r.upload(t, 0)
	r.proxy.Close()
	data := []byte("refused")
	res, err := r.w.WriteThrough(ctx, staging.ChunkRef{UploadID: id, N: 1}, data, crc.Checksum(data), true, true)
	if err != nil || res.Stored || res.HandOver != nil || res.InUse {
		t.Fatalf("write-through with S3 refusing: %+v %v; want nothing done", res, err)
	}
	if l, _ := r.st.Leases(ctx, id); len(l) != 0 {
		t.Fatalf("lease kept after a failed write-through: %v", l)
	}
	if sr, err := r.st.Stage(ctx, id, 1, data, crc.Checksum(data), true); err != nil || sr.Duplicate {
		t.Fatalf("stage after the failed write-through: %+v %v", sr, err)
	}
	up, err := r.st.Get(ctx, id)
	if err != nil || up.Uploaded != 0 || fmt.Sprint(up.ReceivedChunks) != "[1]" {
		t.Fatalf("upload %+v %v; want chunk 1 staged, not stored", up, err)
	}
}
