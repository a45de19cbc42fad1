package e2e

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/redis/go-redis/v9"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
)

// TestWatchProgress: a watcher started before the chunks arrive sees progress that
// never goes backwards and ends with COMPLETED; a watcher of a finished upload gets its
// final snapshot and its stream ends.
func TestWatchProgress(t *testing.T) {
	e := newEnv(t)
	a := e.start(t, e.config())
	c := e.client(t, a)
	data := randomBytes(5*chunk+10, 60)
	created, err := c.API().CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{ExpectedSize: proto.Int64(int64(len(data)))})
	if err != nil {
		t.Fatal(err)
	}
	id := created.Upload.UploadId

	reports := make(chan []*chunkupv1.UploadProgress, 1)
	errs := make(chan error, 1)
	first := make(chan struct{})
	go func() {
		var got []*chunkupv1.UploadProgress
		_, err := c.Watch(ctx(t), id, func(p *chunkupv1.UploadProgress) {
			if len(got) == 0 {
				close(first)
			}
			got = append(got, p)
		})
		reports <- got
		errs <- err
	}()
	<-first // the snapshot arrived: the watcher is subscribed
	if err := c.Send(ctx(t), created.Upload, reader(data)); err != nil {
		t.Fatal(err)
	}
	got, err := <-reports, <-errs
	if err != nil {
		t.Fatal(err)
	}
	if len(got) < 2 {
		t.Fatalf("%d reports, want a snapshot and updates", len(got))
	}
	for i := 1; i < len(got); i++ {
		p, q := got[i-1], got[i]
		if q.UploadedBytes < p.UploadedBytes || q.ReceivedBytes < p.ReceivedBytes || q.Percent < p.Percent {
			t.Errorf("progress went backwards: %v then %v", p, q)
		}
	}
	last := got[len(got)-1]
	if last.State != chunkupv1.UploadState_UPLOAD_STATE_COMPLETED || last.Percent != 100 || last.Size != int64(len(data)) {
		t.Fatalf("last report %v, want COMPLETED at 100%%", last)
	}
	t.Logf("%d reports for %d chunks", len(got), last.TotalChunks)

	var again []*chunkupv1.UploadProgress
	final, err := c.Watch(ctx(t), id, func(p *chunkupv1.UploadProgress) { again = append(again, p) })
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 1 || !proto.Equal(final, last) {
		t.Fatalf("watching a finished upload: %d reports, last %v; want its final snapshot once", len(again), final)
	}
}

// TestManyWatchesShareOneSubscription opens 1,000 watches of one upload: they share one
// Redis subscription (Redis' client count stays within the process's pool plus a few),
// every one of them sees the upload complete, and the next watch over the tenant's
// limit, of the upload or of a document, is refused with RESOURCE_EXHAUSTED.
func TestManyWatchesShareOneSubscription(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.Server.MaxWatchesPerTenant = 1000
	a := e.start(t, cfg)
	c := e.client(t, a)
	data := randomBytes(chunk+10, 61)
	created, err := c.API().CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{ExpectedSize: proto.Int64(int64(len(data)))})
	if err != nil {
		t.Fatal(err)
	}
	id := created.Upload.UploadId
	rdb := e.rdb(t)
	clients := func() int64 {
		info, err := rdb.Info(ctx(t), "clients").Result()
		if err != nil {
			t.Fatal(err)
		}
		return infoField(t, info, "connected_clients")
	}
	before := clients()

	const watches = 1000
	wctx, stop := context.WithCancel(ctx(t))
	defer stop()
	var snapshots, completed atomic.Int32
	var wg sync.WaitGroup
	for range watches {
		stream, err := c.API().WatchUpload(wctx, &chunkupv1.WatchUploadRequest{UploadId: id})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for first := true; ; first = false {
				r, err := stream.Recv()
				if err != nil {
					return
				}
				if first {
					snapshots.Add(1)
				}
				if r.Progress.State == chunkupv1.UploadState_UPLOAD_STATE_COMPLETED {
					completed.Add(1)
					return
				}
			}
		})
	}
	waitFor(t, "every watch's snapshot", func() bool { return snapshots.Load() == watches })
	// The process's connections are bounded by its pool (go-redis' default, capped by
	// app.NewRedisClient) and go-redis' pipeline pool, plus its pub/sub connections.
	pool := int64(10*runtime.GOMAXPROCS(0) + redis.DefaultPipelinePoolSize)
	if n := clients(); n > max(before, pool)+5 {
		t.Fatalf("%d Redis clients with %d watches open (%d before them; pools %d): watches must share one subscription", n, watches, before, pool)
	}

	extra, err := c.API().WatchUpload(ctx(t), &chunkupv1.WatchUploadRequest{UploadId: id})
	if err == nil {
		_, err = extra.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), "watches open on this server") {
		t.Fatalf("watch number %d: %v, want RESOURCE_EXHAUSTED naming the limit", watches+1, err)
	}
	// A document's watch holds a share of the same subscription, so it counts too.
	docWatch, err := documents(t, a.GRPCAddr()).WatchDocument(ctx(t), &chunkupv1.WatchDocumentRequest{DocumentId: id})
	if err == nil {
		_, err = docWatch.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a document watch over the limit: %v, want RESOURCE_EXHAUSTED", err)
	}

	if err := c.Send(ctx(t), created.Upload, reader(data)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every watch to see the upload complete", func() bool { return completed.Load() == watches })
	wg.Wait()
}
