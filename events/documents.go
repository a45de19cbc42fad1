package events

import (
	"encoding/json"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/documents"
)

var statusProto = map[documents.Status]chunkupv1.DocumentStatus{
	documents.Uploaded:     chunkupv1.DocumentStatus_DOCUMENT_STATUS_UPLOADED,
	documents.Processing:   chunkupv1.DocumentStatus_DOCUMENT_STATUS_PROCESSING,
	documents.OCRCompleted: chunkupv1.DocumentStatus_DOCUMENT_STATUS_OCR_COMPLETED,
	documents.AIEvaluated:  chunkupv1.DocumentStatus_DOCUMENT_STATUS_AI_EVALUATED,
	documents.AutoApproved: chunkupv1.DocumentStatus_DOCUMENT_STATUS_AUTO_APPROVED,
	documents.AutoRejected: chunkupv1.DocumentStatus_DOCUMENT_STATUS_AUTO_REJECTED,
	documents.NeedsReview:  chunkupv1.DocumentStatus_DOCUMENT_STATUS_NEEDS_REVIEW,
	documents.Approved:     chunkupv1.DocumentStatus_DOCUMENT_STATUS_APPROVED,
	documents.Rejected:     chunkupv1.DocumentStatus_DOCUMENT_STATUS_REJECTED,
	documents.Failed:       chunkupv1.DocumentStatus_DOCUMENT_STATUS_FAILED,
}

// StatusProto is the API's enum value for a stored status.
func StatusProto(s documents.Status) chunkupv1.DocumentStatus { return statusProto[s] }

func ocrProto(o *documents.OCRSummary) *chunkupv1.OCRSummary {
	if o == nil {
		return nil
	}
	return &chunkupv1.OCRSummary{ResultKey: o.ResultKey, Pages: int32(o.Pages), Words: int32(o.Words),
		MeanConfidence: o.MeanConfidence, PageConfidence: o.PageConfidence}
}

func evalProto(e *documents.Evaluation) *chunkupv1.Evaluation {
	if e == nil {
		return nil
	}
	return &chunkupv1.Evaluation{Score: int32(e.Score), Decision: string(e.Decision), Reasons: e.Reasons}
}

func verificationProto(v *documents.Verification) *chunkupv1.Verification {
	if v == nil {
		return nil
	}
	p := &chunkupv1.Verification{UserId: v.UserID, Result: v.Result, Score: v.Score, Decision: v.Decision,
		VerifyTime: tsOrNil(v.Time)}
	if v.Metadata != "" {
		var m map[string]any
		if json.Unmarshal([]byte(v.Metadata), &m) == nil {
			p.Metadata, _ = structpb.NewStruct(m)
		}
	}
	return p
}

// DocumentProto is the API's view of a stored document.
func DocumentProto(d *documents.Document) *chunkupv1.Document {
	return &chunkupv1.Document{
		DocumentId: d.ID, UploadId: d.ID, Status: StatusProto(d.Status), Bucket: d.Bucket, Key: d.Key,
		ContentType: d.ContentType, Tenant: d.Tenant, CorrelationId: d.CorrelationID, JobId: d.JobID,
		Attempts: int32(d.Attempts), Reclaims: int32(d.Reclaims), Error: d.Error, ErrorTime: tsOrNil(d.ErrorTime),
		MaxRetriesExceeded: d.MaxRetriesExceeded, Ocr: ocrProto(d.OCR), Evaluation: evalProto(d.Eval),
		Verification: verificationProto(d.Verification), CreateTime: tsOrNil(d.Created), UpdateTime: tsOrNil(d.Updated),
		NodeId: d.NodeID, ClientNodeId: d.ClientNodeID, ConnectorId: d.ConnectorID, ParentId: d.ParentID,
		Path: d.Path, Drive: d.Drive, CustomMetadata: StructOf(d.CustomMetadata), Name: d.Name,
	}
}

// DocumentCreated returns the builder of the event for a document's creation (its first
// status, uploaded), made by the process instance at now.
func DocumentCreated(instance string, now time.Time) func(prev *documents.Document) (staging.OutboxEvent, error) {
	return statusEvent(instance, now, documents.Uploaded, nil)
}

// statusEvent returns the builder of the event for a transition of a document to `to`,
// made by the process instance at now with the parts of change that it sets.
func statusEvent(instance string, now time.Time, to documents.Status, c *documents.Change) func(prev *documents.Document) (staging.OutboxEvent, error) {
	return func(prev *documents.Document) (staging.OutboxEvent, error) {
		id := ids.New()
		msg := &chunkupv1.DocumentStatusChanged{
			EventId: id, DocumentId: prev.ID, UploadId: prev.ID, PreviousStatus: StatusProto(prev.Status),
			Status: StatusProto(to), CorrelationId: prev.CorrelationID, Tenant: prev.Tenant, Bucket: prev.Bucket,
			Key: prev.Key, ContentType: prev.ContentType, JobId: prev.JobID, NodeId: prev.NodeID,
			Attempts: int32(prev.Attempts), Reclaims: int32(prev.Reclaims), Ocr: ocrProto(prev.OCR), Evaluation: evalProto(prev.Eval),
			Verification: verificationProto(prev.Verification), EventTime: timestamppb.New(now),
			InstanceId: instance, ClientNodeId: prev.ClientNodeID, ConnectorId: prev.ConnectorID, ParentId: prev.ParentID,
			Path: prev.Path, Drive: prev.Drive, CustomMetadata: StructOf(prev.CustomMetadata), Name: prev.Name,
		}
		if c != nil {
			if c.JobID != nil {
				msg.JobId = *c.JobID
			}
			if c.Attempts != nil {
				msg.Attempts = int32(*c.Attempts)
			}
			if c.Reclaims != nil {
				msg.Reclaims = int32(*c.Reclaims)
			}
			if c.Failure != nil {
				msg.Error, msg.MaxRetriesExceeded = *c.Failure, c.MaxRetriesExceeded
			}
			if c.OCR != nil {
				msg.Ocr = ocrProto(c.OCR)
			}
			if c.Eval != nil {
				msg.Evaluation = evalProto(c.Eval)
			}
			if c.Verification != nil {
				msg.Verification = verificationProto(c.Verification)
			}
		}
		b, err := eventJSON.Marshal(msg)
		if err != nil {
			return staging.OutboxEvent{}, err
		}
		return staging.OutboxEvent{ID: id, Type: string(msg.ProtoReflect().Descriptor().FullName()),
			CorrelationID: prev.CorrelationID, UploadID: prev.ID, Payload: b, Created: now}, nil
	}
}

// WithDocumentEvent sets c's event to the DocumentStatusChanged of its transition, made
// by the process instance at now, and returns c.
func WithDocumentEvent(instance string, now time.Time, c documents.Change) documents.Change {
	c.Event = statusEvent(instance, now, c.To, &c)
	return c
}
