package chunkworker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/chunkup/chunkup/chunkworker"
	"github.com/chunkup/chunkup/cleanup"
	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/internal/s3x"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/staging"
)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.now = c.now.Add(d) }

// TestS3OutageRetriesThenGivesUp points a worker at an S3 endpoint that refuses
// connections: the chunk is retried (lease released, upload still ACTIVE, bytes still
// staged) until GiveUpAfter has passed on the injected clock, then the upload FAILS with
// a reason that says so.
func TestS3OutageRetriesThenGivesUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clk := &clock{now: time.Now()}
	store, err := staging.New(testenv.StartRedis(t).Client(t), staging.Config{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	down := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t)) // nothing listens there
	s3c, err := s3x.New(ctx, s3x.Config{Endpoint: down, AccessKey: "k", SecretKey: "s", MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	w, err := chunkworker.New(store, s3c, &cleanup.Ender{Store: store, S3: s3c},
		chunkworker.Config{GiveUpAfter: 10 * time.Minute, RetryBase: time.Second, RetryMax: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	id := staging.NewID()
	if _, err := store.Create(ctx, staging.NewUpload{ID: id, Bucket: "b", Key: "k", ChunkSize: 5 << 20, ExpectedSize: 3, Total: 1}); err != nil {
		t.Fatal(err)
	}
	data := []byte("abc")
	if _, err := store.Stage(ctx, id, 1, data, crc.Checksum(data), true); err != nil {
		t.Fatal(err)
	}
	ref := staging.ChunkRef{UploadID: id, N: 1}

	for range 3 {
		w.Process(ctx, ref)
		u, err := store.Get(ctx, id)
		if err != nil || u.Status != staging.StatusActive {
			t.Fatalf("during the outage: %+v %v; want ACTIVE", u, err)
		}
		if leases, _ := store.Leases(ctx, id); len(leases) != 0 {
			t.Fatalf("lease kept after a failed attempt: %v", leases)
		}
		clk.Add(4 * time.Minute)
	}
	w.Process(ctx, ref) // 12 minutes after the first failure
	u, err := store.Get(ctx, id)
	if err != nil || u.Status != staging.StatusFailed {
		t.Fatalf("after GiveUpAfter: %+v %v; want FAILED", u, err)
	}
	t.Logf("failed with: %s", u.Error)
}
