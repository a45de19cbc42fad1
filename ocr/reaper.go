package ocr

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/chunkup/chunkup/events"
	"github.com/chunkup/chunkup/staging/documents"
	"github.com/chunkup/chunkup/staging/ocrqueue"
)

// ReaperJobs is the part of the job queue the reaper uses.
type ReaperJobs interface {
	Now() time.Time
	Reap(ctx context.Context, promote int, lease time.Duration, maxReclaims, reclaim int) (int, []ocrqueue.Reclaimed, error)
	UnmarkProcessing(ctx context.Context, docID string) error
	ProcessingDocuments(ctx context.Context, start, count int64) ([]string, error)
	DocumentJob(ctx context.Context, docID string) (string, bool, error)
	Job(ctx context.Context, id string) (*ocrqueue.Job, error)
	Enqueue(ctx context.Context, j ocrqueue.NewJob) (string, bool, error)
	Recover(ctx context.Context, id string, maxReclaims int) (ocrqueue.RecoverOutcome, int, error)
	RequeueStuck(ctx context.Context, id string) (bool, error)
}

var _ ReaperJobs = (*ocrqueue.Queue)(nil)

// Reaper keeps the queue moving: it promotes retries whose backoff is over, takes back
// jobs whose worker died (lease expired) without counting that against them, dead-
// letters a job that kills every worker (MaxReclaims) and marks its document failed.
// At start it recovers documents left in processing.
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

// Run recovers documents left processing (retrying while Redis is unreachable: that is
// the first step, checking Redis), then ticks every ReapInterval until ctx ends.
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

// Tick promotes due retries and reclaims expired leases once: one round trip to Redis
// while nothing is due.
func (r *Reaper) Tick(ctx context.Context) error {
	const batch = 100
	for {
		n, got, err := r.store.Reap(ctx, batch, r.cfg.Lease, r.cfg.MaxReclaims, batch)
		for _, j := range got {
			log := r.cfg.Logger.With("job_id", j.JobID, "document_id", j.DocumentID, "reclaims", j.Reclaims)
			if !j.Dead {
				log.Warn("OCR job taken back from a worker whose lease expired (it died or stalled); not counted as a failed attempt")
				continue
			}
			log.Error("OCR job dead-lettered: every worker that ran it died or stalled", "max_reclaims", r.cfg.MaxReclaims)
			r.failDocument(ctx, j.DocumentID, j.JobID, fmt.Sprintf("the job was taken back %d times from workers that died or stalled running it", j.Reclaims), j.Reclaims)
		}
		if err != nil {
			return err
		}
		if n < batch && len(got) < batch {
			return nil
		}
	}
}

func (r *Reaper) failDocument(ctx context.Context, docID, jobID, msg string, reclaims int) {
	c := documents.Change{
		From: []documents.Status{documents.Uploaded, documents.Processing, documents.OCRCompleted, documents.AIEvaluated},
		To:   documents.Failed, Failure: &msg, MaxRetriesExceeded: true, Reclaims: &reclaims, JobID: &jobID,
	}
	if _, err := r.docs.Transition(ctx, docID, r.cfg.DocumentTTL, events.WithDocumentEvent(r.cfg.InstanceID, r.cfg.Now(), c)); err != nil {
		r.cfg.Logger.Warn("mark document failed", "document_id", docID, "err", err)
		return
	}
	_ = r.store.UnmarkProcessing(ctx, docID)
}

// midFlow are the statuses of a document whose OCR has begun and not reached a
// decision.
var midFlow = []documents.Status{documents.Uploaded, documents.Processing, documents.OCRCompleted, documents.AIEvaluated}

// Recover is the start-up recovery (the design's steps, made safe for several
// processes): with Redis reachable (Run retries until it is), it goes through the
// documents indexed as processing and
//
//   - clears stale entries: documents gone, or no longer mid-flow;
//   - leaves a document whose job is queued, waiting for a retry, or held by a worker
//     whose lease is running (another process is on it);
//   - marks a document failed whose job was dead-lettered;
//   - and a document stuck in processing (its job's worker died, or its job is in no
//     queue or gone) it takes out of every queue, resets (attempts 0, error cleared,
//     status back to uploaded, with its event) and requeues fresh. A worker that died
//     counts as a reclaim, so a job that kills every worker still ends.
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
	if !slices.Contains(midFlow, d.Status) {
		return false, r.store.UnmarkProcessing(ctx, id)
	}
	jobID, _, err := r.store.DocumentJob(ctx, id)
	if err != nil {
		return true, err
	}
	outcome, reclaims := ocrqueue.RecoverGone, d.Reclaims
	if jobID != "" {
		if outcome, reclaims, err = r.store.Recover(ctx, jobID, r.cfg.MaxReclaims); err != nil {
			return true, err
		}
	}
	switch outcome {
	case ocrqueue.RecoverLive:
		return true, nil
	case ocrqueue.RecoverDead:
		*failed++
		reason := "dead-lettered"
		if j, err := r.store.Job(ctx, jobID); err == nil && j.DeadReason != "" {
			reason += ": " + j.DeadReason
		}
		r.failDocument(ctx, id, jobID, reason, reclaims)
		return false, nil
	}
	// Stuck: reset the document first, so that no worker takes the job before it is
	// back to uploaded, then requeue.
	zero, clear := 0, ""
	reset := documents.Change{From: midFlow, To: documents.Uploaded, Attempts: &zero, Reclaims: &reclaims, Failure: &clear}
	if jobID != "" && outcome == ocrqueue.RecoverStuck {
		reset.JobID = &jobID
	}
	if _, err := r.docs.Transition(ctx, id, r.cfg.DocumentTTL, events.WithDocumentEvent(r.cfg.InstanceID, r.cfg.Now(), reset)); err != nil {
		var se *documents.StateError
		if errors.As(err, &se) { // it moved on meanwhile: leave it to whoever moved it
			return false, r.store.UnmarkProcessing(ctx, id)
		}
		return true, err
	}
	if outcome == ocrqueue.RecoverStuck {
		if _, err := r.store.RequeueStuck(ctx, jobID); err != nil {
			return true, err
		}
	} else if _, _, err := r.store.Enqueue(ctx, ocrqueue.NewJob{DocumentID: id, CorrelationID: d.CorrelationID, Bucket: d.Bucket,
		Key: d.Key, ContentType: d.ContentType, Tenant: d.Tenant, Force: true, DedupeTTL: r.cfg.DocumentTTL}); err != nil {
		return true, err
	}
	*requeued++
	r.cfg.Logger.Warn("OCR document was stuck in processing; reset to uploaded and requeued", "document_id", id, "job_id", jobID,
		"was", d.Status, "reclaims", reclaims)
	return true, nil
}
