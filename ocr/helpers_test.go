package ocr_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/ocr"
	"github.com/chunkup/chunkup/s3store"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/documents"
	"github.com/chunkup/chunkup/staging/ocrqueue"
	"github.com/chunkup/chunkup/staging/stagingtest"
)

const bucket = "ocr-test"

// env is a real Redis and MinIO with a store on a settable clock.
type env struct {
	stores *stagingtest.Stores
	s3     *s3.Client
	clk    *testenv.Clock
}

func newEnv(t testing.TB) *env {
	t.Helper()
	r := testenv.StartRedis(t)
	m := testenv.StartMinIO(t)
	m.CreateBucket(t, bucket)
	clk := testenv.NewClock(time.Unix(1_800_000_000, 0))
	s := stagingtest.Open(t, r.Client(t), staging.Config{Now: clk.Now})
	return &env{stores: s, s3: m.Client(t), clk: clk}
}

func ctxT(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func testLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// config is an OCR config on e's clock.
func (e *env) config() ocr.Config {
	return ocr.Config{Now: e.clk.Now, Logger: testLogger(), Lease: time.Minute, FetchBlock: time.Second}
}

// upload puts data in MinIO and returns a completed upload of it, as the completer
// hands it off.
func (e *env) upload(t testing.TB, contentType string, data []byte) *staging.Upload {
	t.Helper()
	id := ids.New()
	key := "docs/" + id
	if _, err := e.s3.PutObject(ctxT(t), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key),
		Body: bytes.NewReader(data)}); err != nil {
		t.Fatal(err)
	}
	return &staging.Upload{ID: id, Status: staging.StatusCompleted, Bucket: bucket, Key: key,
		ContentType: contentType, CorrelationID: "corr-" + id, Size: int64(len(data))}
}

func (e *env) object(t testing.TB, key string) []byte {
	t.Helper()
	out, err := e.s3.GetObject(ctxT(t), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (e *env) queue(t testing.TB, cfg ocr.Config) *ocr.Queue {
	t.Helper()
	q, err := ocr.NewQueue(e.stores.Jobs, e.stores.Docs, e.stores.Uploads, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func (e *env) worker(t testing.TB, engine ocr.Engine, cfg ocr.Config) *ocr.Worker {
	t.Helper()
	w, err := ocr.NewWorker(e.stores.Jobs, e.stores.Docs, s3store.New(e.s3), engine, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func (e *env) reaper(t testing.TB, cfg ocr.Config) *ocr.Reaper {
	t.Helper()
	r, err := ocr.NewReaper(e.stores.Jobs, e.stores.Docs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// runOne fetches the next job and runs it; it fails the test if none is pending.
func (e *env) runOne(t testing.TB, w *ocr.Worker) *ocrqueue.Job {
	t.Helper()
	j, err := e.stores.Jobs.Fetch(ctxT(t), time.Second, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if j == nil {
		t.Fatal("no job pending")
	}
	w.Run1(ctxT(t), j)
	return j
}

func (e *env) stats(t testing.TB) ocrqueue.Stats {
	t.Helper()
	st, err := e.stores.Jobs.Stats(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func (e *env) doc(t testing.TB, id string) *documents.Document {
	t.Helper()
	d, err := e.stores.Docs.Get(ctxT(t), id)
	if err != nil {
		t.Fatalf("document %s: %v", id, err)
	}
	return d
}

// docEvents returns the statuses of the document events waiting in id's outbox.
func (e *env) docEvents(t testing.TB, id string) []staging.OutboxEvent {
	t.Helper()
	evs, _, err := e.stores.Outbox.Events(ctxT(t), id)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// countingEngine counts calls and answers like Noop, or fails with err when set.
type countingEngine struct {
	mu    sync.Mutex
	calls int
	err   error
}

func (c *countingEngine) Name() string { return "counting" }

func (c *countingEngine) Health(context.Context) error { return nil }

func (c *countingEngine) Recognize(ctx context.Context, b []byte, typ ocr.FileType) (*ocr.Result, error) {
	c.mu.Lock()
	c.calls++
	err := c.err
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return &ocr.Result{Pages: []ocr.Page{{Number: 1, Text: "total due 42 EUR", Words: 4, Confidence: 95}}}, nil
}

func (c *countingEngine) Calls() int { c.mu.Lock(); defer c.mu.Unlock(); return c.calls }
