package ocr

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/chunkup/chunkup/internal/retry"
	"github.com/chunkup/chunkup/staging"
)

// S3API is the part of the S3 client a worker uses.
type S3API interface {
	GetObject(ctx context.Context, in *s3.GetObjectInput, opts ...func(*s3.Options)) (*s3.GetObjectOutput, error)
	PutObject(ctx context.Context, in *s3.PutObjectInput, opts ...func(*s3.Options)) (*s3.PutObjectOutput, error)
}

var _ S3API = (*s3.Client)(nil)

// WorkerStore is the part of the staging store a worker uses.
type WorkerStore interface {
	Now() time.Time
	FetchJob(ctx context.Context, block, lease time.Duration) (*staging.Job, error)
	RenewJob(ctx context.Context, id string, token int64, lease time.Duration) (bool, error)
	AckJob(ctx context.Context, id string, token int64) (bool, error)
	FailJob(ctx context.Context, id string, token int64, msg string, mode staging.FailMode, due time.Time, maxAttempts int) (staging.FailOutcome, error)
	TransitionDocument(ctx context.Context, id string, ttl time.Duration, c staging.DocChange) (*staging.Document, error)
	RecordDocumentFailure(ctx context.Context, id string, ttl time.Duration, token int64, attempts int, msg string) error
	MarkProcessing(ctx context.Context, docID string) error
	UnmarkProcessing(ctx context.Context, docID string) error
}

var _ WorkerStore = (*staging.Store)(nil)

// ResultSuffix is appended to an object's key to name its OCR result in S3.
const ResultSuffix = ".ocr.json"

// Worker runs OCR jobs: Concurrency loops, each blocking on the queue for a job,
// holding its lease while it runs, and settling it (done, retry, dead-letter or
// release) at the end.
type Worker struct {
	cfg    Config
	store  WorkerStore
	s3     S3API
	engine Engine
	eval   *Evaluator
	health *health
	// Processed counts jobs that ran to a decision (for tests and metrics).
	Processed atomic.Int64
}

// NewWorker returns a Worker running engine.
func NewWorker(store WorkerStore, s3c S3API, engine Engine, cfg Config) (*Worker, error) {
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
	return &Worker{cfg: cfg, store: store, s3: s3c, engine: engine, eval: ev,
		health: &health{log: cfg.Logger, what: "OCR worker"}}, nil
}

// Run runs jobs until ctx ends. A job running at shutdown is stopped and released
// (not counted as a failure), so another worker takes it at once.
func (w *Worker) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for range w.cfg.Concurrency {
		wg.Go(func() { w.loop(ctx) })
	}
	wg.Wait()
	return nil
}

func (w *Worker) loop(ctx context.Context) {
	for ctx.Err() == nil {
		job, err := w.store.FetchJob(ctx, w.cfg.FetchBlock, w.cfg.Lease)
		var mal *staging.MalformedJobError
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
func (w *Worker) Run1(ctx context.Context, job *staging.Job) {
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
		if ok, aerr := w.store.AckJob(sctx, job.ID, job.Token); aerr != nil || !ok {
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
		if _, ferr := w.store.FailJob(sctx, job.ID, job.Token, err.Error(), staging.FailRelease, due, w.cfg.MaxAttempts); ferr != nil {
			log.Warn("release OCR job", "err", ferr)
		}
		log.Warn("OCR job released: a dependency is unavailable; not counted as an attempt", "err", err)
		w.cfg.Metrics.OCRJob("released")
	case failPermanent:
		if _, ferr := w.store.FailJob(sctx, job.ID, job.Token, err.Error(), staging.FailDead, now, w.cfg.MaxAttempts); ferr != nil {
			log.Warn("dead-letter OCR job", "err", ferr)
			return
		}
		log.Error("OCR job failed permanently; dead-lettered", "err", err)
		w.cfg.Metrics.OCRJob("dead")
		w.failDocument(sctx, job, err.Error(), false, job.Attempts+1, log)
	default:
		out, ferr := w.store.FailJob(sctx, job.ID, job.Token, err.Error(), staging.FailRetry,
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
		if derr := w.store.RecordDocumentFailure(sctx, job.DocumentID, w.cfg.DocumentTTL, job.Token, out.Attempts, err.Error()); derr != nil {
			log.Debug("record failure on document", "err", derr)
		}
	}
}

// keepLease renews job's lease every Lease/3 until stop is called, and cancels the job
// with errLeaseLost when the lease is lost or has run out without a renewal (Redis
// unreachable), so its subprocesses are killed before another worker takes over.
func (w *Worker) keepLease(ctx context.Context, cancel context.CancelCauseFunc, job *staging.Job, log *slog.Logger) (stop func()) {
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
			ok, err := w.store.RenewJob(ctx, job.ID, job.Token, w.cfg.Lease)
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

func (w *Worker) failDocument(ctx context.Context, job *staging.Job, msg string, maxRetries bool, attempts int, log *slog.Logger) {
	c := staging.DocChange{
		From: []staging.DocStatus{staging.DocUploaded, staging.DocProcessing, staging.DocOCRCompleted, staging.DocAIEvaluated},
		To:   staging.DocFailed, Failure: &msg, MaxRetriesExceeded: maxRetries, Attempts: &attempts, JobID: &job.ID,
	}
	if _, err := w.store.TransitionDocument(ctx, job.DocumentID, w.cfg.DocumentTTL, withEvent(w.cfg.NodeID, w.cfg.Now(), c)); err != nil {
		log.Warn("mark document failed", "err", err)
		return
	}
	w.cfg.OnEvent()
	_ = w.store.UnmarkProcessing(ctx, job.DocumentID)
}

// startable are the statuses a job may (re)start a document from without force: a
// redelivered job resumes a document it left half-way.
var startable = []staging.DocStatus{staging.DocUploaded, staging.DocProcessing, staging.DocOCRCompleted,
	staging.DocAIEvaluated, staging.DocFailed}

var allStatuses = []staging.DocStatus{staging.DocUploaded, staging.DocProcessing, staging.DocOCRCompleted,
	staging.DocAIEvaluated, staging.DocAutoApproved, staging.DocAutoRejected, staging.DocNeedsReview,
	staging.DocApproved, staging.DocRejected, staging.DocFailed}

// process runs one job: take the document, download, validate, recognize, store the
// result, evaluate, decide. Each document change is fenced by the job's token.
func (w *Worker) process(ctx context.Context, job *staging.Job, log *slog.Logger) error {
	ttl := w.cfg.DocumentTTL
	if err := w.store.MarkProcessing(ctx, job.DocumentID); err != nil {
		return outage(err)
	}
	from := startable
	if job.Force {
		from = allStatuses
	}
	clear, attempts := "", job.Attempts
	start := staging.DocChange{From: from, To: staging.DocProcessing, Fence: staging.Fence{Start: true, Token: job.Token},
		JobID: &job.ID, Attempts: &attempts, Failure: &clear}
	if _, err := w.store.TransitionDocument(ctx, job.DocumentID, ttl, withEvent(w.cfg.NodeID, w.cfg.Now(), start)); err != nil {
		var se *staging.DocStateError
		var fe *staging.FencedError
		switch {
		case errors.As(err, &se):
			log.Info("document already processed; duplicate job done", "status", se.Status)
			_ = w.store.UnmarkProcessing(ctx, job.DocumentID)
			return nil
		case errors.As(err, &fe):
			log.Info("document taken over by a newer job; this one is stale", "err", err)
			return nil
		case errors.Is(err, staging.ErrDocumentNotFound):
			_ = w.store.UnmarkProcessing(ctx, job.DocumentID)
			return Permanent(fmt.Errorf("document %s not found (expired?)", job.DocumentID))
		}
		return outage(err)
	}
	w.cfg.OnEvent()

	data, err := w.download(ctx, job)
	if err != nil {
		return err
	}
	typ, err := Validate(job.ContentType, data)
	if err != nil {
		return err
	}
	res, err := w.engine.Recognize(ctx, data, typ)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil {
			return cause
		}
		return fmt.Errorf("%s: %w", w.engine.Name(), err)
	}
	sum, err := w.storeResult(ctx, job, res)
	if err != nil {
		return err
	}
	hold := staging.Fence{Hold: true, Token: job.Token}
	steps := []staging.DocChange{
		{From: []staging.DocStatus{staging.DocProcessing}, To: staging.DocOCRCompleted, Fence: hold, OCR: sum},
	}
	ev := w.eval.Evaluate(res)
	steps = append(steps,
		staging.DocChange{From: []staging.DocStatus{staging.DocOCRCompleted}, To: staging.DocAIEvaluated, Fence: hold, Eval: &ev},
		staging.DocChange{From: []staging.DocStatus{staging.DocAIEvaluated}, To: ev.Decision, Fence: hold, Eval: &ev})
	for _, c := range steps {
		if _, err := w.store.TransitionDocument(ctx, job.DocumentID, ttl, withEvent(w.cfg.NodeID, w.cfg.Now(), c)); err != nil {
			var fe *staging.FencedError
			if errors.As(err, &fe) {
				log.Info("document taken over by a newer job; stopping", "err", err)
				return nil
			}
			var se *staging.DocStateError
			if errors.As(err, &se) {
				return Permanent(fmt.Errorf("document moved to %s while this job held it: %w", se.Status, err))
			}
			return outage(err)
		}
		w.cfg.OnEvent()
	}
	_ = w.store.UnmarkProcessing(ctx, job.DocumentID)
	w.Processed.Add(1)
	log.Info("document processed", "decision", ev.Decision, "score", ev.Score, "words", sum.Words,
		"mean_confidence", sum.MeanConfidence)
	return nil
}

func (w *Worker) download(ctx context.Context, job *staging.Job) ([]byte, error) {
	out, err := w.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(job.Bucket), Key: aws.String(job.Key)})
	if err != nil {
		return nil, s3Err("get object", err)
	}
	defer out.Body.Close()
	if out.ContentLength != nil && *out.ContentLength > w.cfg.MaxFileSize {
		return nil, Permanent(fmt.Errorf("file is %d bytes, above the OCR limit of %d", *out.ContentLength, w.cfg.MaxFileSize))
	}
	data, err := io.ReadAll(io.LimitReader(out.Body, w.cfg.MaxFileSize+1))
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
	if retry.Permanent(err) {
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

func (w *Worker) storeResult(ctx context.Context, job *staging.Job, res *Result) (*staging.OCRSummary, error) {
	doc := resultDoc{DocumentID: job.DocumentID, JobID: job.ID, Engine: w.engine.Name(), Time: w.cfg.Now().UTC(),
		Text: res.Text(), Words: res.Words(), MeanConfidence: res.MeanConfidence(), Pages: res.Pages}
	if doc.Pages == nil {
		doc.Pages = []Page{}
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	key := job.Key + ResultSuffix
	if _, err := w.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(job.Bucket), Key: aws.String(key),
		Body: bytes.NewReader(b), ContentType: aws.String("application/json")}); err != nil {
		return nil, s3Err("put OCR result", err)
	}
	sum := &staging.OCRSummary{ResultKey: key, Pages: len(res.Pages), Words: res.Words(), MeanConfidence: res.MeanConfidence()}
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
