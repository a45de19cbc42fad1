package ocr

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chunkup/chunkup/events"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/documents"
	"github.com/chunkup/chunkup/staging/ocrqueue"
	"github.com/chunkup/chunkup/staging/uploads"
)

// QueueJobs is the part of the job queue the queue's producers and admin commands use.
type QueueJobs interface {
	Now() time.Time
	Enqueue(ctx context.Context, j ocrqueue.NewJob) (string, bool, error)
	Stats(ctx context.Context) (ocrqueue.Stats, error)
	Dead(ctx context.Context, start, count int64) ([]*ocrqueue.Job, int64, error)
	Requeue(ctx context.Context, id string) (string, error)
	Purge(ctx context.Context, set ocrqueue.PurgeSet, limit int64) ([]string, error)
}

var _ QueueJobs = (*ocrqueue.Queue)(nil)

// QueueDocs is the part of the document store the queue uses.
type QueueDocs interface {
	Create(ctx context.Context, d documents.NewDocument, ttl time.Duration, ev staging.OutboxEvent) (bool, error)
	Get(ctx context.Context, id string) (*documents.Document, error)
	Transition(ctx context.Context, id string, ttl time.Duration, c documents.Change) (*documents.Document, error)
}

var _ QueueDocs = (*documents.Store)(nil)

// Uploads reads uploads (to recreate the document of one that expired) and keeps the
// node index, so a document is found by its node id as long as it lives.
type Uploads interface {
	Get(ctx context.Context, id string) (*staging.Upload, error)
	IndexNode(ctx context.Context, tenant, nodeID, id string, created time.Time, ttl time.Duration) error
}

var _ Uploads = (*uploads.Store)(nil)

// Queue puts documents on the OCR queue and administers it. It is the completer's
// hand-off (completion.Handoff).
type Queue struct {
	cfg     Config
	jobs    QueueJobs
	docs    QueueDocs
	uploads Uploads
}

// NewQueue returns a Queue.
func NewQueue(jobs QueueJobs, docs QueueDocs, ups Uploads, cfg Config) (*Queue, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Queue{cfg: cfg.withDefaults(), jobs: jobs, docs: docs, uploads: ups}, nil
}

// Wants implements completion.Handoff: images (JPEG, PNG, TIFF) and PDFs, by the
// upload's content type, or the one detected in its first bytes when that was generic.
func (q *Queue) Wants(contentType string) bool { return Supported(contentType) }

// Handoff implements completion.Handoff: it creates the document (uploaded) and enqueues
// its job. Without force it is idempotent per upload id: the document's dedupe key makes
// a second enqueue a no-op.
func (q *Queue) Handoff(ctx context.Context, u *staging.Upload, force bool) error {
	_, _, err := q.Enqueue(ctx, u, force)
	return err
}

// Enqueue creates u's document unless it exists and enqueues a job for it, unless it has
// one and force is false. It returns the document's job id and whether it is new.
func (q *Queue) Enqueue(ctx context.Context, u *staging.Upload, force bool) (string, bool, error) {
	d := documents.NewDocument{ID: u.ID, Bucket: u.Bucket, Key: u.Key, ContentType: u.EffectiveContentType(),
		Tenant: u.Tenant, CorrelationID: u.CorrelationID,
		Identity: documents.Identity{NodeID: u.NodeID, ClientNodeID: u.ClientNodeID, ConnectorID: u.ConnectorID,
			ParentID: u.ParentID, Path: u.Path, Drive: u.Drive, Name: u.Name, CustomMetadata: u.CustomMetadata}}
	now := q.jobs.Now()
	ev, err := events.DocumentCreated(q.cfg.InstanceID, now)(&documents.Document{
		ID: d.ID, Bucket: d.Bucket, Key: d.Key, ContentType: d.ContentType, Tenant: d.Tenant, CorrelationID: d.CorrelationID,
		Identity: d.Identity})
	if err != nil {
		return "", false, err
	}
	// The node index lives as long as the document (the upload's keys expire sooner).
	if err := q.uploads.IndexNode(ctx, u.Tenant, u.NodeID, u.ID, u.Created, q.cfg.DocumentTTL); err != nil {
		return "", false, fmt.Errorf("index node id of %s: %w", u.ID, err)
	}
	if _, err := q.docs.Create(ctx, d, q.cfg.DocumentTTL, ev); err != nil {
		return "", false, fmt.Errorf("create document %s: %w", u.ID, err)
	}
	return q.enqueue(ctx, d, force)
}

func (q *Queue) enqueue(ctx context.Context, d documents.NewDocument, force bool) (string, bool, error) {
	id, isNew, err := q.jobs.Enqueue(ctx, ocrqueue.NewJob{DocumentID: d.ID, CorrelationID: d.CorrelationID,
		Bucket: d.Bucket, Key: d.Key, ContentType: d.ContentType, Tenant: d.Tenant, Force: force, DedupeTTL: q.cfg.DocumentTTL})
	if err != nil {
		return "", false, fmt.Errorf("enqueue OCR job for %s: %w", d.ID, err)
	}
	q.cfg.Logger.Info("OCR job enqueued", "document_id", d.ID, "job_id", id, "new", isNew, "force", force,
		"correlation_id", d.CorrelationID)
	return id, isNew, nil
}

// Reprocess enqueues document id again: with force even if it was processed (or is
// being processed) already; without, only if it has no job yet. A document that has
// expired while its upload is still known is recreated from the upload.
func (q *Queue) Reprocess(ctx context.Context, id string, force bool) (string, bool, error) {
	d, err := q.docs.Get(ctx, id)
	if errors.Is(err, documents.ErrNotFound) {
		u, uerr := q.uploads.Get(ctx, id)
		if uerr != nil {
			return "", false, err
		}
		if u.Status != staging.StatusCompleted {
			return "", false, fmt.Errorf("upload %s is %s, not COMPLETED: %w", id, u.Status, err)
		}
		return q.Enqueue(ctx, u, force)
	}
	if err != nil {
		return "", false, err
	}
	return q.enqueue(ctx, documents.NewDocument{ID: d.ID, Bucket: d.Bucket, Key: d.Key, ContentType: d.ContentType,
		Tenant: d.Tenant, CorrelationID: d.CorrelationID}, force)
}

// Purge removes every job of set (pending, delayed or dead; jobs in flight are never
// purged) and returns how many it removed. The documents of purged pending and delayed
// jobs are marked failed, so that nothing waits for them; a purged document can be
// processed again with Reprocess.
func (q *Queue) Purge(ctx context.Context, set ocrqueue.PurgeSet) (int64, error) {
	var n int64
	for {
		docs, err := q.jobs.Purge(ctx, set, 100)
		n += int64(len(docs))
		if set != ocrqueue.PurgeDead {
			for _, id := range docs {
				q.failPurged(ctx, id, set)
			}
		}
		if err != nil {
			return n, err
		}
		if len(docs) == 0 {
			q.cfg.Logger.Warn("OCR queue purged", "set", set, "jobs", n)
			return n, nil
		}
	}
}

func (q *Queue) failPurged(ctx context.Context, docID string, set ocrqueue.PurgeSet) {
	if docID == "" {
		return
	}
	msg := fmt.Sprintf("its OCR job was purged from the %s queue by an operator; reprocess it to run OCR", set)
	c := documents.Change{From: []documents.Status{documents.Uploaded, documents.Processing, documents.OCRCompleted, documents.AIEvaluated},
		To: documents.Failed, Failure: &msg}
	if _, err := q.docs.Transition(ctx, docID, q.cfg.DocumentTTL, events.WithDocumentEvent(q.cfg.InstanceID, q.jobs.Now(), c)); err != nil {
		var se *documents.StateError
		if !errors.As(err, &se) && !errors.Is(err, documents.ErrNotFound) {
			q.cfg.Logger.Warn("mark purged document failed", "document_id", docID, "err", err)
		}
	}
}

// Stats are the queue's counters.
type Stats struct {
	Pending  int64 `json:"pending"`
	InFlight int64 `json:"in_flight"`
	Delayed  int64 `json:"delayed"`
	Dead     int64 `json:"dead"`
	// OldestAge is how long the oldest pending job has waited since it was enqueued.
	OldestAge time.Duration `json:"oldest_age_ns"`
}

// Stats reads the queue's counters in O(1).
func (q *Queue) Stats(ctx context.Context) (Stats, error) {
	st, err := q.jobs.Stats(ctx)
	if err != nil {
		return Stats{}, err
	}
	s := Stats{Pending: st.Pending, InFlight: st.InFlight, Delayed: st.Delayed, Dead: st.Dead}
	if !st.OldestPending.IsZero() {
		s.OldestAge = max(0, q.jobs.Now().Sub(st.OldestPending))
	}
	return s, nil
}

// Dead lists up to count dead-lettered jobs from start, oldest first, and the total.
func (q *Queue) Dead(ctx context.Context, start, count int64) ([]*ocrqueue.Job, int64, error) {
	return q.jobs.Dead(ctx, start, count)
}

// Requeue moves dead-lettered job id back to the queue with fresh attempts.
func (q *Queue) Requeue(ctx context.Context, id string) error {
	doc, err := q.jobs.Requeue(ctx, id)
	if err != nil {
		return fmt.Errorf("requeue job %s: %w", id, err)
	}
	q.cfg.Logger.Info("OCR job requeued from the dead-letter store", "job_id", id, "document_id", doc)
	return nil
}

// RequeueAll requeues every dead-lettered job that can be, and returns how many were.
func (q *Queue) RequeueAll(ctx context.Context) (int, error) {
	n := 0
	var skipped int64
	for {
		jobs, _, err := q.jobs.Dead(ctx, skipped, 100)
		if err != nil {
			return n, err
		}
		if len(jobs) == 0 {
			return n, nil
		}
		for _, j := range jobs {
			err := q.Requeue(ctx, j.ID)
			var mal *ocrqueue.MalformedJobError
			switch {
			case err == nil:
				n++
			case errors.As(err, &mal), errors.Is(err, ocrqueue.ErrJobNotFound):
				skipped++ // stays dead-lettered; listed, never dropped
			default:
				return n, err
			}
		}
	}
}
