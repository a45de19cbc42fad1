package ocr

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chunkup/chunkup/completion"
	"github.com/chunkup/chunkup/staging"
)

// QueueStore is the part of the staging store the queue's producers and admin commands
// use.
type QueueStore interface {
	Now() time.Time
	Get(ctx context.Context, id string) (*staging.Upload, error)
	CreateDocument(ctx context.Context, d staging.NewDocument, ttl time.Duration, ev staging.OutboxEvent) (bool, error)
	Document(ctx context.Context, id string) (*staging.Document, error)
	EnqueueJob(ctx context.Context, j staging.NewJob) (string, bool, error)
	QueueStats(ctx context.Context) (staging.QueueStats, error)
	DeadJobs(ctx context.Context, start, count int64) ([]*staging.Job, int64, error)
	RequeueJob(ctx context.Context, id string) (string, error)
}

var _ QueueStore = (*staging.Store)(nil)

// Queue puts documents on the OCR queue and administers it. It is the completer's
// hand-off (completion.Handoff).
type Queue struct {
	cfg   Config
	store QueueStore
}

var _ completion.Handoff = (*Queue)(nil)

// NewQueue returns a Queue.
func NewQueue(store QueueStore, cfg Config) (*Queue, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Queue{cfg: cfg.withDefaults(), store: store}, nil
}

// Wants implements completion.Handoff: images (JPEG, PNG, TIFF) and PDFs.
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
	d := staging.NewDocument{ID: u.ID, Bucket: u.Bucket, Key: u.Key, ContentType: u.ContentType,
		Tenant: u.Tenant, CorrelationID: u.CorrelationID}
	now := q.store.Now()
	ev, err := statusEvent(q.cfg.NodeID, now, staging.DocUploaded, nil)(&staging.Document{
		ID: d.ID, Bucket: d.Bucket, Key: d.Key, ContentType: d.ContentType, Tenant: d.Tenant, CorrelationID: d.CorrelationID})
	if err != nil {
		return "", false, err
	}
	created, err := q.store.CreateDocument(ctx, d, q.cfg.DocumentTTL, ev)
	if err != nil {
		return "", false, fmt.Errorf("create document %s: %w", u.ID, err)
	}
	if created {
		q.cfg.OnEvent()
	}
	return q.enqueue(ctx, d, force)
}

func (q *Queue) enqueue(ctx context.Context, d staging.NewDocument, force bool) (string, bool, error) {
	id, isNew, err := q.store.EnqueueJob(ctx, staging.NewJob{DocumentID: d.ID, CorrelationID: d.CorrelationID,
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
	d, err := q.store.Document(ctx, id)
	if errors.Is(err, staging.ErrDocumentNotFound) {
		u, uerr := q.store.Get(ctx, id)
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
	return q.enqueue(ctx, staging.NewDocument{ID: d.ID, Bucket: d.Bucket, Key: d.Key, ContentType: d.ContentType,
		Tenant: d.Tenant, CorrelationID: d.CorrelationID}, force)
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
	st, err := q.store.QueueStats(ctx)
	if err != nil {
		return Stats{}, err
	}
	s := Stats{Pending: st.Pending, InFlight: st.InFlight, Delayed: st.Delayed, Dead: st.Dead}
	if !st.OldestPending.IsZero() {
		s.OldestAge = max(0, q.store.Now().Sub(st.OldestPending))
	}
	return s, nil
}

// Dead lists up to count dead-lettered jobs from start, oldest first, and the total.
func (q *Queue) Dead(ctx context.Context, start, count int64) ([]*staging.Job, int64, error) {
	return q.store.DeadJobs(ctx, start, count)
}

// Requeue moves dead-lettered job id back to the queue with fresh attempts.
func (q *Queue) Requeue(ctx context.Context, id string) error {
	doc, err := q.store.RequeueJob(ctx, id)
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
		jobs, _, err := q.store.DeadJobs(ctx, skipped, 100)
		if err != nil {
			return n, err
		}
		if len(jobs) == 0 {
			return n, nil
		}
		for _, j := range jobs {
			err := q.Requeue(ctx, j.ID)
			var mal *staging.MalformedJobError
			switch {
			case err == nil:
				n++
			case errors.As(err, &mal), errors.Is(err, staging.ErrJobNotFound):
				skipped++ // stays dead-lettered; listed, never dropped
			default:
				return n, err
			}
		}
	}
}
