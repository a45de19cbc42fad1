package ocr

import (
	"context"
	"errors"
	"time"

	"github.com/chunkup/chunkup/events"
	"github.com/chunkup/chunkup/staging/documents"
	"github.com/chunkup/chunkup/staging/ocrqueue"
)

// ReaperJobs is the part of the job queue the reaper uses.
type ReaperJobs interface {
	Now() time.Time
	Promote(ctx context.Context, limit int) (int, error)
	Reclaim(ctx context.Context, lease time.Duration, maxAttempts, limit int) ([]ocrqueue.Reclaimed, error)
	UnmarkProcessing(ctx context.Context, docID string) error
	ProcessingDocuments(ctx context.Context, start, count int64) ([]string, error)
	DocumentJob(ctx context.Context, docID string) (string, bool, error)
	Job(ctx context.Context, id string) (*ocrqueue.Job, error)
	Enqueue(ctx context.Context, j ocrqueue.NewJob) (string, bool, error)
}

var _ ReaperJobs = (*ocrqueue.Queue)(nil)

// Reaper keeps the queue moving: it promotes retries whose backoff is over, reclaims
// jobs whose worker died (lease expired), dead-letters those out of attempts and marks
// their documents failed. At start it recovers documents left processing.
type Reaper struct {
	cfg    Config
	store  ReaperJobs
	docs   Docs
	health *health
}

// NewReaper returns a Reaper.
func NewReaper(jobs ReaperJobs, docs Docs, cfg Config) (*Reaper, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Reaper{cfg: cfg, store: jobs, docs: docs, health: &health{log: cfg.Logger, what: "OCR reaper"}}, nil
}

// Run recovers documents left processing, then ticks every ReapInterval until ctx ends.
func (r *Reaper) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		if err := r.Recover(ctx); err == nil {
			r.health.up()
			break
		} else if ctx.Err() == nil {
			r.health.down(ctx, err)
		}
	}
	t := time.NewTicker(r.cfg.ReapInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := r.Tick(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			r.health.down(ctx, err)
			continue
		}
		r.health.up()
	}
}

// Tick promotes due retries and reclaims expired leases once.
func (r *Reaper) Tick(ctx context.Context) error {
	for {
		n, err := r.store.Promote(ctx, 100)
		if err != nil {
			return err
		}
		if n < 100 {
			break
		}
	}
	for {
		got, err := r.store.Reclaim(ctx, r.cfg.Lease, r.cfg.MaxAttempts, 100)
		for _, j := range got {
			log := r.cfg.Logger.With("job_id", j.JobID, "document_id", j.DocumentID, "attempts", j.Attempts)
			if !j.Dead {
				log.Warn("OCR job reclaimed from a worker whose lease expired")
				continue
			}
			log.Error("OCR job dead-lettered: its lease expired on its last attempt")
			r.failDocument(ctx, j.DocumentID, j.JobID, "lease expired on the last attempt: the worker died or stalled", j.Attempts)
		}
		if err != nil {
			return err
		}
		if len(got) < 100 {
			return nil
		}
	}
}

func (r *Reaper) failDocument(ctx context.Context, docID, jobID, msg string, attempts int) {
	c := documents.Change{
		From: []documents.Status{documents.Uploaded, documents.Processing, documents.OCRCompleted, documents.AIEvaluated},
		To:   documents.Failed, Failure: &msg, MaxRetriesExceeded: true, Attempts: &attempts, JobID: &jobID,
	}
	if _, err := r.docs.Transition(ctx, docID, r.cfg.DocumentTTL, events.WithDocumentEvent(r.cfg.NodeID, r.cfg.Now(), c)); err != nil {
		r.cfg.Logger.Warn("mark document failed", "document_id", docID, "err", err)
		return
	}
	_ = r.store.UnmarkProcessing(ctx, docID)
}

// Recover looks at every document indexed as processing: one whose job is still queued
// or running is left to it; one whose job was dead-lettered is marked failed; one with
// no job at all (its record was lost) gets a new one.
func (r *Reaper) Recover(ctx context.Context) error {
	var start int64
	requeued, failed := 0, 0
	for {
		ids, err := r.store.ProcessingDocuments(ctx, start, 100)
		if err != nil {
			return err
		}
		for _, id := range ids {
			kept, err := r.recoverOne(ctx, id, &requeued, &failed)
			if err != nil {
				return err
			}
			if kept {
				start++
			}
		}
		if len(ids) < 100 {
			break
		}
	}
	if requeued+failed > 0 {
		r.cfg.Logger.Info("recovered OCR documents left processing", "requeued", requeued, "failed", failed)
	}
	return nil
}

func (r *Reaper) recoverOne(ctx context.Context, id string, requeued, failed *int) (kept bool, err error) {
	d, err := r.docs.Get(ctx, id)
	if errors.Is(err, documents.ErrNotFound) {
		return false, r.store.UnmarkProcessing(ctx, id)
	}
	if err != nil {
		return true, err
	}
	switch d.Status {
	case documents.Uploaded, documents.Processing, documents.OCRCompleted, documents.AIEvaluated:
	default:
		return false, r.store.UnmarkProcessing(ctx, id)
	}
	jobID, live, err := r.store.DocumentJob(ctx, id)
	if err != nil || live {
		return true, err
	}
	if jobID != "" {
		if j, err := r.store.Job(ctx, jobID); err == nil && !j.Died.IsZero() {
			*failed++
			r.failDocument(ctx, id, jobID, "dead-lettered: "+j.DeadReason, j.Attempts)
			return false, nil
		}
	}
	if _, _, err := r.store.Enqueue(ctx, ocrqueue.NewJob{DocumentID: id, CorrelationID: d.CorrelationID, Bucket: d.Bucket,
		Key: d.Key, ContentType: d.ContentType, Tenant: d.Tenant, Force: true, DedupeTTL: r.cfg.DocumentTTL}); err != nil {
		return true, err
	}
	*requeued++
	return true, nil
}
