package ocr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chunkup/chunkup/events"
	"github.com/chunkup/chunkup/internal/retry"
	"github.com/chunkup/chunkup/s3store"
	"github.com/chunkup/chunkup/staging/documents"
	"github.com/chunkup/chunkup/staging/ocrqueue"
)

// Objects is the part of the S3 store a worker uses: reading a document, writing its
// OCR result beside it.
type Objects interface {
	Open(ctx context.Context, bucket, key string) (io.ReadCloser, int64, error)
	Put(ctx context.Context, bucket, key, ct string, data []byte) (string, error)
}

var _ Objects = (*s3store.Store)(nil)

// WorkerJobs is the part of the job queue a worker uses.
type WorkerJobs interface {
	Now() time.Time
	Fetch(ctx context.Context, block, lease time.Duration) (*ocrqueue.Job, error)
	Renew(ctx context.Context, id string, token int64, lease time.Duration) (bool, error)
	Ack(ctx context.Context, id string, token int64) (bool, error)
	Fail(ctx context.Context, id string, token int64, msg string, mode ocrqueue.FailMode, due time.Time, maxAttempts int) (ocrqueue.FailOutcome, error)
	MarkProcessing(ctx context.Context, docID string) error
	UnmarkProcessing(ctx context.Context, docID string) error
	Report(ctx context.Context, r ocrqueue.WorkerReport) error
	Unreport(ctx context.Context, instanceID string) error
}

var _ WorkerJobs = (*ocrqueue.Queue)(nil)

// Docs is the part of the document store that moves documents along.
type Docs interface {
	Get(ctx context.Context, id string) (*documents.Document, error)
	Transition(ctx context.Context, id string, ttl time.Duration, c documents.Change) (*documents.Document, error)
	RecordFailure(ctx context.Context, id string, ttl time.Duration, token int64, attempts int, msg string) error
}

var _ Docs = (*documents.Store)(nil)

// ResultSuffix is appended to an object's key to name its OCR result in S3.
const ResultSuffix = ".ocr.json"

// Worker runs OCR jobs: Concurrency loops, each blocking on the queue for a job,
// holding its lease while it runs, and settling it (done, retry, dead-letter or
// release) at the end.
type Worker struct {
	cfg    Config
	store  WorkerJobs
	docs   Docs
	s3     Objects
	engine Engine
	eval   *Evaluator
	health *health
	// Processed counts jobs that ran to a decision (for tests and metrics).
	Processed atomic.Int64
	// running counts the jobs running now (reported for `chunkup ocr stats`).
	running atomic.Int64
	started time.Time
}

// NewWorker returns a Worker running engine.
func NewWorker(jobs WorkerJobs, docs Docs, s3c Objects, engine Engine, cfg Config) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if engine == nil {
		return nil, errors.New("ocr: a worker needs an engine")
	}
	cfg = cfg.withDefaults()
	ev, err := NewEvaluator(cfg.Rules)
	if err != nil {
		return nil, err
	}
	return &Worker{cfg: cfg, store: jobs, docs: docs, s3: s3c, engine: engine, eval: ev,
		health: &health{log: cfg.Logger, what: "OCR worker"}, started: cfg.Now()}, nil
}

// Run runs jobs until ctx ends. A job running at shutdown is stopped and released
// (not counted as a failure), so another worker takes it at once. Meanwhile it reports
// its status every ReportInterval, and withdraws the report when it stops.
func (w *Worker) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for range w.cfg.Concurrency {
		wg.Go(func() { w.loop(ctx) })
	}
	wg.Go(func() { w.reportLoop(ctx) })
	wg.Wait()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_ = w.store.Unreport(sctx, w.cfg.InstanceID)
	return nil
}

// EngineStatus checks the worker's engine and reports it: the configured one, the one
// jobs run on now, and its health. (A Fallback's check also notices the remote engine's
// loss or return.)
func (w *Worker) EngineStatus(ctx context.Context) EngineStatus {
	if f, ok := w.engine.(interface{ Status() EngineStatus }); ok {
		_ = w.engine.Health(ctx)
		return f.Status()
	}
	st := EngineStatus{Engine: w.engine.Name(), Active: w.engine.Name(), Healthy: true}
	if err := w.engine.Health(ctx); err != nil {
		st.Healthy, st.Err = false, err.Error()
	}
	return st
}

// reportLoop checks the engine's health and reports the worker's status every
// ReportInterval until ctx ends.
func (w *Worker) reportLoop(ctx context.Context) {
	t := time.NewTicker(w.cfg.ReportInterval)
	defer t.Stop()
	for {
		hctx, cancel := context.WithTimeout(ctx, w.cfg.ReportInterval)
		st := w.EngineStatus(hctx)
		err := w.store.Report(hctx, ocrqueue.WorkerReport{
			InstanceID: w.cfg.InstanceID, Engine: st.Engine, ActiveEngine: st.Active, EngineHealthy: st.Healthy,
			EngineError: st.Err, Fallback: st.Fallback, Concurrency: w.cfg.Concurrency, Processing: int(w.running.Load()),
			Processed: w.Processed.Load(), Started: w.started.UnixMilli(), Reported: w.cfg.Now().UnixMilli(),
		})
		cancel()
		if err != nil && ctx.Err() == nil {
			w.cfg.Logger.Debug("report OCR worker status", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *Worker) loop(ctx context.Context) {
	for ctx.Err() == nil {
		job, err := w.store.Fetch(ctx, w.cfg.FetchBlock, w.cfg.Lease)
		var mal *ocrqueue.MalformedJobError
		switch {
		case errors.As(err, &mal):
			w.cfg.Logger.Error("malformed OCR job dead-lettered", "job_id", mal.JobID, "reason", mal.Reason)
			continue
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			w.health.down(ctx, err)
			continue
		}
		w.health.up()
		if job != nil {
			w.Run1(ctx, job)
		}
	}
}

// Run1 runs one leased job and settles it.
func (w *Worker) Run1(ctx context.Context, job *ocrqueue.Job) {
	w.running.Add(1)
	defer w.running.Add(-1)
	log := w.cfg.Logger.With("job_id", job.ID, "document_id", job.DocumentID, "correlation_id", job.CorrelationID,
		"attempt", job.Attempts+1)
	jctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := w.keepLease(jctx, cancel, job, log)
	err := w.process(jctx, job, log)
	stop()
	// Settle even during shutdown: the job's state must not wait for a lease to expire.
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer scancel()
	if errors.Is(context.Cause(jctx), errLeaseLost) {
		log.Warn("OCR job lease lost; another worker owns the job now", "err", err)
		return
	}
	if err == nil {
		w.cfg.Metrics.OCRJob("succeeded")
		if ok, aerr := w.store.Ack(sctx, job.ID, job.Token); aerr != nil || !ok {
			log.Warn("OCR job done but not acknowledged; it may run again (harmlessly)", "err", aerr, "lease_held", ok)
		}
		return
	}
	kind := classify(err)
	if ctx.Err() != nil {
		kind = failOutage // shutdown: not the job's fault
	}
	now := w.cfg.Now()
	switch kind {
	case failOutage:
		due := now.Add(min(w.cfg.BackoffBase, time.Second))
		if ctx.Err() != nil {
			due = now
		}
		if _, ferr := w.store.Fail(sctx, job.ID, job.Token, err.Error(), ocrqueue.FailRelease, due, w.cfg.MaxAttempts); ferr != nil {
			log.Warn("release OCR job", "err", ferr)
		}
		log.Warn("OCR job released: a dependency is unavailable; not counted as an attempt", "err", err)
		w.cfg.Metrics.OCRJob("released")
	case failPermanent:
		if _, ferr := w.store.Fail(sctx, job.ID, job.Token, err.Error(), ocrqueue.FailDead, now, w.cfg.MaxAttempts); ferr != nil {
			log.Warn("dead-letter OCR job", "err", ferr)
			return
		}
		log.Error("OCR job failed permanently; dead-lettered", "err", err)
		w.cfg.Metrics.OCRJob("dead")
		w.failDocument(sctx, job, err.Error(), false, job.Attempts+1, log)
	default:
		out, ferr := w.store.Fail(sctx, job.ID, job.Token, err.Error(), ocrqueue.FailRetry,
			now.Add(w.cfg.Backoff(job.Attempts+1)), w.cfg.MaxAttempts)
		if ferr != nil {
			log.Warn("retry OCR job", "err", ferr)
			return
		}
		if out.Dead {
			log.Error("OCR job failed its last attempt; dead-lettered", "err", err, "attempts", out.Attempts)
			w.cfg.Metrics.OCRJob("dead")
			w.failDocument(sctx, job, err.Error(), true, out.Attempts, log)
			return
		}
		log.Warn("OCR job failed; will retry", "err", err, "attempts", out.Attempts)
		w.cfg.Metrics.OCRJob("retried")
		if derr := w.docs.RecordFailure(sctx, job.DocumentID, w.cfg.DocumentTTL, job.Token, out.Attempts, err.Error()); derr != nil {
			log.Debug("record failure on document", "err", derr)
		}
	}
}

// keepLease renews job's lease every Lease/3 until stop is called, and cancels the job
// with errLeaseLost when the lease is lost or has run out without a renewal (Redis
// unreachable), so its subprocesses are killed before another worker takes over.
func (w *Worker) keepLease(ctx context.Context, cancel context.CancelCauseFunc, job *ocrqueue.Job, log *slog.Logger) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		until := w.cfg.Now().Add(w.cfg.Lease)
		t := time.NewTicker(w.cfg.Lease / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			ok, err := w.store.Renew(ctx, job.ID, job.Token, w.cfg.Lease)
			switch {
			case err == nil && ok:
				until = w.cfg.Now().Add(w.cfg.Lease)
			case err == nil:
				cancel(errLeaseLost)
				return
			case w.cfg.Now().After(until):
				log.Warn("cannot renew OCR job lease and it has run out", "err", err)
				cancel(errLeaseLost)
				return
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

func (w *Worker) failDocument(ctx context.Context, job *ocrqueue.Job, msg string, maxRetries bool, attempts int, log *slog.Logger) {
	c := documents.Change{
		From: []documents.Status{documents.Uploaded, documents.Processing, documents.OCRCompleted, documents.AIEvaluated},
		To:   documents.Failed, Failure: &msg, MaxRetriesExceeded: maxRetries, Attempts: &attempts, JobID: &job.ID,
	}
	if _, err := w.docs.Transition(ctx, job.DocumentID, w.cfg.DocumentTTL, events.WithDocumentEvent(w.cfg.InstanceID, w.cfg.Now(), c)); err != nil {
		log.Warn("mark document failed", "err", err)
		return
	}
	_ = w.store.UnmarkProcessing(ctx, job.DocumentID)
}

// startable are the statuses a job may (re)start a document from without force: a
// redelivered job resumes a document it left half-way.
var startable = []documents.Status{documents.Uploaded, documents.Processing, documents.OCRCompleted,
	documents.AIEvaluated, documents.Failed}

var allStatuses = []documents.Status{documents.Uploaded, documents.Processing, documents.OCRCompleted,
	documents.AIEvaluated, documents.AutoApproved, documents.AutoRejected, documents.NeedsReview,
	documents.Approved, documents.Rejected, documents.Failed}

// process runs one job: take the document, download, validate, recognize, store the
// result, evaluate, decide. Each document change is fenced by the job's token.
func (w *Worker) process(ctx context.Context, job *ocrqueue.Job, log *slog.Logger) error {
	ttl := w.cfg.DocumentTTL
	if err := w.store.MarkProcessing(ctx, job.DocumentID); err != nil {
		return outage(err)
	}
	from := startable
	if job.Force {
		from = allStatuses
	}
	began := w.cfg.Now()
	clear, attempts, reclaims := "", job.Attempts, job.Reclaims
	start := documents.Change{From: from, To: documents.Processing, Fence: documents.Fence{Start: true, Token: job.Token},
		JobID: &job.ID, Attempts: &attempts, Reclaims: &reclaims, Failure: &clear}
	if _, err := w.docs.Transition(ctx, job.DocumentID, ttl, events.WithDocumentEvent(w.cfg.InstanceID, w.cfg.Now(), start)); err != nil {
		var se *documents.StateError
		var fe *documents.FencedError
		switch {
		case errors.As(err, &se):
			log.Info("document already processed; duplicate job done", "status", se.Status)
			_ = w.store.UnmarkProcessing(ctx, job.DocumentID)
			return nil
		case errors.As(err, &fe):
			log.Info("document taken over by a newer job; this one is stale", "err", err)
			return nil
		case errors.Is(err, documents.ErrNotFound):
			_ = w.store.UnmarkProcessing(ctx, job.DocumentID)
			return Permanent(fmt.Errorf("document %s not found (expired?)", job.DocumentID))
		}
		return outage(err)
	}

	data, err := w.download(ctx, job)
	if err != nil {
		return err
	}
	typ, err := Validate(job.ContentType, data)
	if err != nil {
		return err
	}
	res, err := w.engine.Recognize(withDocumentID(ctx, job.DocumentID), data, typ)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil {
			return cause
		}
		return fmt.Errorf("%s: %w", w.engine.Name(), err)
	}
	if res.Engine == "" {
		res.Engine = w.engine.Name()
	}
	sum, err := w.storeResult(ctx, job, res)
	if err != nil {
		return err
	}
	hold := documents.Fence{Hold: true, Token: job.Token}
	steps := []documents.Change{
		{From: []documents.Status{documents.Processing}, To: documents.OCRCompleted, Fence: hold, OCR: sum},
	}
	ev := w.eval.Evaluate(res)
	steps = append(steps,
		documents.Change{From: []documents.Status{documents.OCRCompleted}, To: documents.AIEvaluated, Fence: hold, Eval: &ev},
		documents.Change{From: []documents.Status{documents.AIEvaluated}, To: ev.Decision, Fence: hold, Eval: &ev})
	for _, c := range steps {
		if _, err := w.docs.Transition(ctx, job.DocumentID, ttl, events.WithDocumentEvent(w.cfg.InstanceID, w.cfg.Now(), c)); err != nil {
			var fe *documents.FencedError
			if errors.As(err, &fe) {
				log.Info("document taken over by a newer job; stopping", "err", err)
				return nil
			}
			var se *documents.StateError
			if errors.As(err, &se) {
				return Permanent(fmt.Errorf("document moved to %s while this job held it: %w", se.Status, err))
			}
			return outage(err)
		}
	}
	_ = w.store.UnmarkProcessing(ctx, job.DocumentID)
	w.Processed.Add(1)
	took := w.cfg.Now().Sub(began)
	w.cfg.Metrics.OCRJobDuration(res.Engine, took)
	log.Info("document processed", "decision", ev.Decision, "score", ev.Score, "words", sum.Words,
		"mean_confidence", sum.MeanConfidence, "engine", res.Engine, "took", took)
	return nil
}

func (w *Worker) download(ctx context.Context, job *ocrqueue.Job) ([]byte, error) {
	body, size, err := w.s3.Open(ctx, job.Bucket, job.Key)
	if err != nil {
		return nil, s3Err("get object", err)
	}
	defer body.Close()
	if size > w.cfg.MaxFileSize {
		return nil, Permanent(fmt.Errorf("file is %d bytes, above the OCR limit of %d", size, w.cfg.MaxFileSize))
	}
	data, err := io.ReadAll(io.LimitReader(body, w.cfg.MaxFileSize+1))
	if err != nil {
		return nil, outage(fmt.Errorf("read object: %w", err))
	}
	if int64(len(data)) > w.cfg.MaxFileSize {
		return nil, Permanent(fmt.Errorf("file is above the OCR limit of %d bytes", w.cfg.MaxFileSize))
	}
	return data, nil
}

// s3Err classifies an S3 error: permanent for a missing object or denied access (a 4xx
// the SDK will not retry), an outage otherwise.
func s3Err(what string, err error) error {
	err = fmt.Errorf("%s: %w", what, err)
	if s3store.Permanent(err) {
		return Permanent(err)
	}
	return outage(err)
}

// resultDoc is the OCR result stored in S3 beside the object.
type resultDoc struct {
	DocumentID     string    `json:"document_id"`
	JobID          string    `json:"job_id"`
	Engine         string    `json:"engine"`
	Time           time.Time `json:"time"`
	Text           string    `json:"text"`
	Words          int       `json:"words"`
	MeanConfidence float64   `json:"mean_confidence"`
	Pages          []Page    `json:"pages"`
}

func (w *Worker) storeResult(ctx context.Context, job *ocrqueue.Job, res *Result) (*documents.OCRSummary, error) {
	doc := resultDoc{DocumentID: job.DocumentID, JobID: job.ID, Engine: res.Engine, Time: w.cfg.Now().UTC(),
		Text: res.Text(), Words: res.Words(), MeanConfidence: res.MeanConfidence(), Pages: res.Pages}
	if doc.Pages == nil {
		doc.Pages = []Page{}
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	key := job.Key + ResultSuffix
	if _, err := w.s3.Put(ctx, job.Bucket, key, "application/json", b); err != nil {
		return nil, s3Err("put OCR result", err)
	}
	sum := &documents.OCRSummary{ResultKey: key, Pages: len(res.Pages), Words: res.Words(), MeanConfidence: res.MeanConfidence()}
	for _, p := range res.Pages {
		sum.PageConfidence = append(sum.PageConfidence, p.Confidence)
	}
	return sum, nil
}

// health logs when Redis is lost and when it is back, once each, and backs off with
// jitter in between so an outage costs no CPU.
type health struct {
	log      *slog.Logger
	what     string
	mu       sync.Mutex
	failures int
}

func (h *health) down(ctx context.Context, err error) {
	h.mu.Lock()
	h.failures++
	n := h.failures
	h.mu.Unlock()
	if n == 1 {
		h.log.Error(h.what+": Redis unreachable; degraded until it is back", "err", err)
	}
	t := time.NewTimer(retry.Backoff(100*time.Millisecond, 5*time.Second, n))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (h *health) up() {
	h.mu.Lock()
	n := h.failures
	h.failures = 0
	h.mu.Unlock()
	if n > 0 {
		h.log.Info(h.what+": Redis reachable again; resuming", "failed_calls", n)
	}
}
