package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/chunkup/chunkup/events"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/fault"
	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/documents"
	"github.com/chunkup/chunkup/staging/ocrqueue"
	"github.com/chunkup/chunkup/staging/uploads"
	"github.com/chunkup/chunkup/upload"
)

// DocumentStore is the part of the document store the document service uses.
type DocumentStore interface {
	Get(ctx context.Context, id string) (*documents.Document, error)
}

var _ DocumentStore = (*documents.Store)(nil)

// UploadLookup finds the upload a node id names, and reads uploads (the tenant of a
// document that expired while its upload did not).
type UploadLookup interface {
	UploadForNode(ctx context.Context, tenant, nodeID string) (string, error)
	Get(ctx context.Context, id string) (*staging.Upload, error)
}

var _ UploadLookup = (*uploads.Store)(nil)

// OCRJobs is the part of the OCR job queue store the admin calls read.
type OCRJobs interface {
	Now() time.Time
	Stats(ctx context.Context) (ocrqueue.Stats, error)
	Dead(ctx context.Context, start, count int64) ([]*ocrqueue.Job, int64, error)
	Reports(ctx context.Context, maxAge time.Duration) ([]ocrqueue.WorkerReport, error)
}

var _ OCRJobs = (*ocrqueue.Queue)(nil)

// OCRQueue changes the OCR queue and its documents together (see ocr.Queue).
type OCRQueue interface {
	Reprocess(ctx context.Context, id string, force bool) (string, bool, error)
	Requeue(ctx context.Context, jobID string) error
	RequeueAll(ctx context.Context) (int, error)
	Purge(ctx context.Context, set ocrqueue.PurgeSet) (int64, error)
}

// OCRResults reads a document's recognized text back from S3, cut to the documented
// limit (see ocr.Results).
type OCRResults interface {
	Text(ctx context.Context, bucket, resultKey string) (*chunkupv1.OCRText, error)
}

// DocumentDeps are what the document service is built on.
type DocumentDeps struct {
	// Docs holds the documents. Required.
	Docs DocumentStore
	// Changes carries the notices of a document's status changes, on its upload's
	// progress subscription ("doc:STATUS"). Required.
	Changes Progress
	// Uploads resolves node ids. Required.
	Uploads UploadLookup
	// Jobs reads the OCR queue. Required.
	Jobs OCRJobs
	// Queue changes the OCR queue. Nil when OCR is off in this process: the calls that
	// need it answer FAILED_PRECONDITION.
	Queue OCRQueue
	// Results reads recognized text. Nil: include_text answers FAILED_PRECONDITION.
	Results OCRResults
	// Watches counts WatchDocument streams against the tenant's watch limit
	// (--max-watches-per-tenant), shared with WatchUpload: both hold a share of the
	// process's progress subscription. Nil: no limit.
	Watches WatchLimiter
}

// WatchLimiter admits one more watch of tenant's, or says why not; release ends it.
type WatchLimiter interface {
	AcquireWatch(tenant string) (release func(), err error)
}

var _ WatchLimiter = (*UploadService)(nil)

// DocumentConfig configures the document service. Zero values mean the documented
// defaults.
type DocumentConfig struct {
	// AdminTenants may call the OCR queue's administration (GetOCRStats, ListDeadJobs,
	// RequeueDeadJobs, PurgeQueue), which spans every tenant. Zero means none but the
	// empty tenant, which is every caller when authentication is off (and no caller
	// when it is on, since authenticated tenants are never empty).
	AdminTenants []string
}

// Validate checks the configuration.
func (c DocumentConfig) Validate() error {
	for _, t := range c.AdminTenants {
		if !ValidTenant(t) {
			return fmt.Errorf("server: admin tenant %q is not a valid tenant id", t)
		}
	}
	return nil
}

// workerReportAge is how old a worker's report may be and still be listed: a few of
// its 5 s reports, so one missed write does not hide a worker, and a dead one
// disappears within half a minute.
const workerReportAge = 30 * time.Second

// DocumentService serves documents' OCR and review state, and the OCR queue's
// administration.
type DocumentService struct {
	chunkupv1.UnimplementedDocumentServiceServer
	d        DocumentDeps
	cfg      DocumentConfig
	draining chan struct{}
	drain    sync.Once
}

// NewDocumentService returns a DocumentService.
func NewDocumentService(d DocumentDeps, cfg DocumentConfig) (*DocumentService, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Docs == nil || d.Changes == nil || d.Uploads == nil || d.Jobs == nil {
		return nil, errors.New("server: the document service needs the document, upload and job stores and a progress channel")
	}
	return &DocumentService{d: d, cfg: cfg, draining: make(chan struct{})}, nil
}

// RegisterDocumentService adds svc to gs (a server from NewGRPCServer), before it serves.
func RegisterDocumentService(gs *grpc.Server, svc *DocumentService) {
	chunkupv1.RegisterDocumentServiceServer(gs, svc)
}

// Drain makes open watches end with UNAVAILABLE; the process calls it when it shuts
// down.
func (s *DocumentService) Drain() { s.drain.Do(func() { close(s.draining) }) }

// resolve returns the upload id a document_id names: an upload id as it is, a node id
// (a UUID) through the caller's tenant's node index.
func (s *DocumentService) resolve(ctx context.Context, ref string) (string, error) {
	if node, ok := ids.UUID(ref); ok {
		id, err := s.d.Uploads.UploadForNode(ctx, upload.TenantFrom(ctx), node)
		if errors.Is(err, staging.ErrNotFound) {
			return "", documents.ErrNotFound
		}
		return id, err
	}
	if !ids.Valid(ref) {
		return "", invalidf("document_id %s is neither an upload id (26 characters a-z, 2-7) nor a node id (a UUID)", quote(ref))
	}
	return ref, nil
}

// get reads the document ref names, if the caller's tenant owns it.
func (s *DocumentService) get(ctx context.Context, ref string) (string, *documents.Document, error) {
	id, err := s.resolve(ctx, ref)
	if err != nil {
		return "", nil, err
	}
	d, err := s.d.Docs.Get(ctx, id)
	if err != nil {
		return id, nil, err
	}
	if d.Tenant != upload.TenantFrom(ctx) {
		return id, nil, documents.ErrNotFound // another tenant's document does not exist for the caller
	}
	return id, d, nil
}

// GetDocument implements DocumentService.GetDocument.
func (s *DocumentService) GetDocument(ctx context.Context, req *chunkupv1.GetDocumentRequest) (*chunkupv1.GetDocumentResponse, error) {
	ref := req.GetDocumentId()
	_, d, err := s.get(ctx, ref)
	if err != nil {
		return nil, toStatus(ref, err)
	}
	doc := events.DocumentProto(d)
	if req.IncludeText && d.OCR != nil && d.OCR.ResultKey != "" {
		if s.d.Results == nil {
			return nil, toStatus(ref, &UnsupportedError{Msg: "this server cannot read OCR results (OCR is off here); ask a server that runs it"})
		}
		if doc.Text, err = s.d.Results.Text(ctx, d.Bucket, d.OCR.ResultKey); err != nil {
			return nil, toStatus(ref, &ResultError{Key: d.OCR.ResultKey, Err: err})
		}
	}
	return &chunkupv1.GetDocumentResponse{Document: doc}, nil
}

// Watch pacing: a change notice is answered at once; without one the document is read
// again every watchDocRefresh, so a watcher whose notice was lost still sees the change.
const watchDocRefresh = 2 * time.Second

// WatchDocument implements DocumentService.WatchDocument.
func (s *DocumentService) WatchDocument(req *chunkupv1.WatchDocumentRequest, stream chunkupv1.DocumentService_WatchDocumentServer) error {
	ctx := stream.Context()
	ref := req.GetDocumentId()
	if s.d.Watches != nil {
		release, err := s.d.Watches.AcquireWatch(upload.TenantFrom(ctx))
		if err != nil {
			return toStatus(ref, err)
		}
		defer release()
	}
	id, _, err := s.get(ctx, ref)
	if err != nil {
		return toStatus(ref, err)
	}
	// Subscribe before the snapshot, so no change between the two goes unnoticed.
	sub, err := s.d.Changes.Progress(ctx, id)
	if err != nil {
		return toStatus(ref, err)
	}
	defer sub.Close()
	var last *chunkupv1.Document
	update := func() (bool, error) {
		_, d, err := s.get(ctx, id)
		if err != nil {
			return false, toStatus(ref, err)
		}
		doc := events.DocumentProto(d)
		if last == nil || !proto.Equal(doc, last) {
			if err := stream.Send(&chunkupv1.WatchDocumentResponse{Document: doc}); err != nil {
				return false, err
			}
			last = doc
		}
		return d.Status.Settled(), nil
	}
	if done, err := update(); done || err != nil {
		return err
	}
	t := time.NewTicker(watchDocRefresh)
	defer t.Stop()
	for {
		select {
		case <-s.draining:
			return toStatus("", errWatchDraining)
		case <-ctx.Done():
			return status.FromContextError(context.Cause(ctx)).Err()
		case msg, ok := <-sub.C:
			if !ok {
				return toStatus("", fault.New(fault.Unavailable, "document subscription closed; watch again"))
			}
			if !strings.HasPrefix(msg, "doc:") {
				continue // the upload's own progress, not its document's
			}
		case <-t.C:
		}
		if done, err := update(); done || err != nil {
			return err
		}
	}
}

// ReprocessDocument implements DocumentService.ReprocessDocument.
func (s *DocumentService) ReprocessDocument(ctx context.Context, req *chunkupv1.ReprocessDocumentRequest) (*chunkupv1.ReprocessDocumentResponse, error) {
	ref := req.GetDocumentId()
	if s.d.Queue == nil {
		return nil, toStatus(ref, errNoOCR)
	}
	id, _, err := s.get(ctx, ref)
	if errors.Is(err, documents.ErrNotFound) && id != "" {
		// The document may have expired while its upload is still known: the queue
		// makes it again from the upload, if the caller's tenant owns that.
		if up, uerr := s.d.Uploads.Get(ctx, id); uerr == nil && up.Tenant == upload.TenantFrom(ctx) {
			err = nil
		}
	}
	if err != nil {
		return nil, toStatus(ref, err)
	}
	jobID, enqueued, err := s.d.Queue.Reprocess(ctx, id, req.Force)
	if err != nil {
		return nil, toStatus(ref, err)
	}
	_, d, err := s.get(ctx, id)
	if err != nil {
		return nil, toStatus(ref, err)
	}
	return &chunkupv1.ReprocessDocumentResponse{JobId: jobID, Enqueued: enqueued, Document: events.DocumentProto(d)}, nil
}

var errNoOCR = &UnsupportedError{Msg: "OCR is not enabled on this server; ask a server that runs it"}

// admin refuses callers whose tenant may not administer the OCR queue.
func (s *DocumentService) admin(ctx context.Context, what string) error {
	t := upload.TenantFrom(ctx)
	if t == "" || slices.Contains(s.cfg.AdminTenants, t) {
		return nil
	}
	return &PermissionError{Msg: fmt.Sprintf("%s spans every tenant's documents: tenant %q is not an admin tenant", what, t)}
}

// GetOCRStats implements DocumentService.GetOCRStats.
func (s *DocumentService) GetOCRStats(ctx context.Context, _ *chunkupv1.GetOCRStatsRequest) (*chunkupv1.GetOCRStatsResponse, error) {
	if err := s.admin(ctx, "the OCR queue's statistics"); err != nil {
		return nil, toStatus("", err)
	}
	st, err := s.d.Jobs.Stats(ctx)
	if err != nil {
		return nil, toStatus("", err)
	}
	reports, err := s.d.Jobs.Reports(ctx, workerReportAge)
	if err != nil {
		return nil, toStatus("", err)
	}
	out := &chunkupv1.GetOCRStatsResponse{Pending: st.Pending, InFlight: st.InFlight, Delayed: st.Delayed, Dead: st.Dead}
	if !st.OldestPending.IsZero() {
		out.OldestPendingAge = durationpb.New(max(0, s.d.Jobs.Now().Sub(st.OldestPending)))
	}
	for _, r := range reports {
		out.Workers = append(out.Workers, &chunkupv1.OCRWorker{
			InstanceId: r.InstanceID, Engine: r.Engine, ActiveEngine: r.ActiveEngine, EngineHealthy: r.EngineHealthy,
			EngineError: r.EngineError, Fallback: r.Fallback, Concurrency: int32(r.Concurrency), Processing: int32(r.Processing),
			Processed: r.Processed, StartTime: ts(time.UnixMilli(r.Started)), ReportTime: ts(time.UnixMilli(r.Reported)),
		})
	}
	return out, nil
}

// ListDeadJobs implements DocumentService.ListDeadJobs. The page token is the position
// of the page's first job in the dead-letter set, oldest first.
func (s *DocumentService) ListDeadJobs(ctx context.Context, req *chunkupv1.ListDeadJobsRequest) (*chunkupv1.ListDeadJobsResponse, error) {
	if err := s.admin(ctx, "the dead-letter list"); err != nil {
		return nil, toStatus("", err)
	}
	size := int64(req.PageSize)
	switch {
	case size < 0 || size > 1000:
		return nil, toStatus("", invalidf("page_size must be 0 to 1000, not %d", size))
	case size == 0:
		size = 100
	}
	var start int64
	if req.PageToken != "" {
		var err error
		if start, err = strconv.ParseInt(req.PageToken, 10, 64); err != nil || start < 0 {
			return nil, toStatus("", invalidf("page_token %s is not one this server gave out; leave it empty for the first page", quote(req.PageToken)))
		}
	}
	jobs, total, err := s.d.Jobs.Dead(ctx, start, size)
	if err != nil {
		return nil, toStatus("", err)
	}
	out := &chunkupv1.ListDeadJobsResponse{Total: total}
	for _, j := range jobs {
		pj := &chunkupv1.OCRJob{JobId: j.ID, DocumentId: j.DocumentID, CorrelationId: j.CorrelationID, Tenant: j.Tenant,
			Attempts: int32(j.Attempts), Reclaims: int32(j.Reclaims), Reason: j.DeadReason, DeadTime: ts(j.Died)}
		for _, e := range j.Errors {
			pj.Errors = append(pj.Errors, &chunkupv1.OCRJobError{Time: ts(e.Time), Attempt: int32(e.Attempt), Error: e.Error})
		}
		out.Jobs = append(out.Jobs, pj)
	}
	if next := start + int64(len(jobs)); len(jobs) > 0 && next < total {
		out.NextPageToken = strconv.FormatInt(next, 10)
	}
	return out, nil
}

// RequeueDeadJobs implements DocumentService.RequeueDeadJobs.
func (s *DocumentService) RequeueDeadJobs(ctx context.Context, req *chunkupv1.RequeueDeadJobsRequest) (*chunkupv1.RequeueDeadJobsResponse, error) {
	if err := s.admin(ctx, "requeuing dead-lettered jobs"); err != nil {
		return nil, toStatus("", err)
	}
	if req.All == (len(req.JobIds) > 0) {
		return nil, toStatus("", invalidf("give job_ids or all, not both and not neither"))
	}
	for _, id := range req.JobIds {
		if !ids.Valid(id) {
			return nil, toStatus("", invalidf("job id %s is not a chunkup job id (26 characters a-z, 2-7)", quote(id)))
		}
	}
	if s.d.Queue == nil {
		return nil, toStatus("", errNoOCR)
	}
	if req.All {
		n, err := s.d.Queue.RequeueAll(ctx)
		if err != nil {
			return nil, toStatus("", err)
		}
		return &chunkupv1.RequeueDeadJobsResponse{Requeued: int32(n)}, nil
	}
	n := 0
	for _, id := range req.JobIds {
		if err := s.d.Queue.Requeue(ctx, id); err != nil {
			return nil, toStatus(id, &JobError{JobID: id, Requeued: n, Err: err})
		}
		n++
	}
	return &chunkupv1.RequeueDeadJobsResponse{Requeued: int32(n)}, nil
}

var purgeSets = map[chunkupv1.OCRQueueSet]ocrqueue.PurgeSet{
	chunkupv1.OCRQueueSet_OCR_QUEUE_SET_PENDING: ocrqueue.PurgePending,
	chunkupv1.OCRQueueSet_OCR_QUEUE_SET_DELAYED: ocrqueue.PurgeDelayed,
	chunkupv1.OCRQueueSet_OCR_QUEUE_SET_DEAD:    ocrqueue.PurgeDead,
}

// PurgeQueue implements DocumentService.PurgeQueue.
func (s *DocumentService) PurgeQueue(ctx context.Context, req *chunkupv1.PurgeQueueRequest) (*chunkupv1.PurgeQueueResponse, error) {
	if err := s.admin(ctx, "purging the OCR queue"); err != nil {
		return nil, toStatus("", err)
	}
	set, ok := purgeSets[req.Queue]
	if !ok {
		return nil, toStatus("", invalidf("queue must be OCR_QUEUE_SET_PENDING, OCR_QUEUE_SET_DELAYED or OCR_QUEUE_SET_DEAD (jobs in flight are never purged)"))
	}
	if s.d.Queue == nil {
		return nil, toStatus("", errNoOCR)
	}
	n, err := s.d.Queue.Purge(ctx, set)
	if err != nil {
		return nil, toStatus("", err)
	}
	return &chunkupv1.PurgeQueueResponse{Purged: n}, nil
}
