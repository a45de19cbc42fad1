package completion_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/chunkup/chunkup/completion"
	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/s3store"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/uploads"
)

// TestReadsPerTenant: a direct upload whose client gave no checksums is completed by
// reading its object whole for its CRC32C. One tenant's completions read one object at
// a time; the others wait their turn without holding the completer, so that another
// tenant's completion goes on while a large object of the first is read.
func TestReadsPerTenant(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	const bucket = "reads-test"
	s3c, store := stores(t, bucket)
	objects := &gatedReads{Store: s3store.New(s3c), gate: make(chan struct{}), reading: map[string]int{}, most: map[string]int{}}
	c, err := completion.New(store.Completions(), objects, noEnder{t}, nil, completion.Config{SweepInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ready := func(tenant string) string {
		t.Helper()
		id := ids.New()
		key := tenant + "/" + id
		data := []byte("the bytes of " + key)
		put, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(string(data))})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Create(ctx, staging.NewUpload{ID: id, Bucket: bucket, Key: key, ChunkSize: 5 << 20, ExpectedSize: int64(len(data)),
			Total: 1, Tenant: tenant, Direct: true}); err != nil {
			t.Fatal(err)
		}
		if ok, err := store.RecordDirectParts(ctx, id, []uploads.DirectPart{{N: 1, ETag: aws.ToString(put.ETag), Size: int64(len(data))}}, true); err != nil || !ok {
			t.Fatalf("record the part: ready %v, %v", ok, err)
		}
		return id
	}
	status := func(id string) staging.Status {
		t.Helper()
		u, err := store.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return u.Status
	}
	mallory := []string{ready("mallory"), ready("mallory"), ready("mallory")}
	alice := ready("alice")

	// Mallory's three completions at once (as CompleteDirect starts them): one reads,
	// held at the gate; the others return at once without reading.
	var first sync.WaitGroup
	first.Go(func() {
		if err := c.Complete(ctx, mallory[0]); err != nil {
			t.Error(err)
		}
	})
	eventually(t, "mallory's first read", func() bool { return objects.readingNow("mallory") == 1 })
	for _, id := range mallory[1:] {
		if err := c.Complete(ctx, id); err != nil {
			t.Fatal(err)
		}
		if st := status(id); st != staging.StatusCompleting {
			t.Fatalf("a completion waiting for mallory's read is %s, want COMPLETING", st)
		}
	}
	// Alice's completes while Mallory's object is still being read.
	if err := c.Complete(ctx, alice); err != nil {
		t.Fatal(err)
	}
	if st := status(alice); st != staging.StatusCompleted {
		t.Fatalf("alice's upload is %s while mallory's object is read, want COMPLETED", st)
	}
	// Once the read ends, the completions that waited follow, one read at a time.
	runCtx, stop := context.WithCancel(ctx)
	var run sync.WaitGroup
	run.Go(func() { _ = c.Run(runCtx) })
	t.Cleanup(func() { stop(); run.Wait() })
	close(objects.gate)
	first.Wait()
	for _, id := range mallory {
		eventually(t, "mallory's completions", func() bool { return status(id) == staging.StatusCompleted })
	}
	if n := objects.mostAtOnce("mallory"); n != 1 {
		t.Fatalf("%d of mallory's objects were read at once, want 1", n)
	}
}

// gatedReads is the real S3 store, whose whole-object reads of mallory's objects wait
// at gate, counted per tenant (the key's first segment).
type gatedReads struct {
	*s3store.Store
	gate    chan struct{}
	mu      sync.Mutex
	reading map[string]int
	most    map[string]int
}

func (g *gatedReads) ObjectCRC(ctx context.Context, bucket, key string) (uint32, int64, error) {
	tenant, _, _ := strings.Cut(key, "/")
	g.mu.Lock()
	g.reading[tenant]++
	g.most[tenant] = max(g.most[tenant], g.reading[tenant])
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.reading[tenant]--
		g.mu.Unlock()
	}()
	if tenant == "mallory" {
		select {
		case <-g.gate:
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		}
	}
	return g.Store.ObjectCRC(ctx, bucket, key)
}

func (g *gatedReads) readingNow(tenant string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reading[tenant]
}

func (g *gatedReads) mostAtOnce(tenant string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.most[tenant]
}

// eventually polls cond until it holds, for at most 30 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
