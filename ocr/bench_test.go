package ocr_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/internal/testdocs"
	"github.com/chunkup/chunkup/ocr"
)

// BenchmarkQueueThroughput measures jobs per second through the whole queue (enqueue,
// blocking fetch, lease, document transitions with their events, S3 download and
// result upload to MinIO, ack) with the no-op engine and 16 concurrent jobs.
func BenchmarkQueueThroughput(b *testing.B) {
	e := newEnv(b)
	cfg := e.config()
	cfg.Concurrency = 16
	q := e.queue(b, cfg)
	w := e.worker(b, ocr.Noop{}, cfg)
	obj := e.upload(b, "image/png", testdocs.PNG("A"))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = w.Run(ctx) })
	b.Cleanup(func() { cancel(); wg.Wait() })

	b.ResetTimer()
	start := time.Now()
	for range b.N {
		u := *obj
		u.ID = ids.New() // a distinct document of the same object
		if err := q.Handoff(ctx, &u, false); err != nil {
			b.Fatal(err)
		}
	}
	for w.Processed.Load() < int64(b.N) {
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
}
