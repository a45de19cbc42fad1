package ocr

import (
	"encoding/json"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/staging"
)

// eventJSON encodes events like completion's: protojson with the proto field names.
var eventJSON = protojson.MarshalOptions{UseProtoNames: true}

var statusProto = map[staging.DocStatus]chunkupv1.DocumentStatus{
	staging.DocUploaded:     chunkupv1.DocumentStatus_DOCUMENT_STATUS_UPLOADED,
	staging.DocProcessing:   chunkupv1.DocumentStatus_DOCUMENT_STATUS_PROCESSING,
	staging.DocOCRCompleted: chunkupv1.DocumentStatus_DOCUMENT_STATUS_OCR_COMPLETED,
	staging.DocAIEvaluated:  chunkupv1.DocumentStatus_DOCUMENT_STATUS_AI_EVALUATED,
	staging.DocAutoApproved: chunkupv1.DocumentStatus_DOCUMENT_STATUS_AUTO_APPROVED,
	staging.DocAutoRejected: chunkupv1.DocumentStatus_DOCUMENT_STATUS_AUTO_REJECTED,
	staging.DocNeedsReview:  chunkupv1.DocumentStatus_DOCUMENT_STATUS_NEEDS_REVIEW,
	staging.DocApproved:     chunkupv1.DocumentStatus_DOCUMENT_STATUS_APPROVED,
	staging.DocRejected:     chunkupv1.DocumentStatus_DOCUMENT_STATUS_REJECTED,
	staging.DocFailed:       chunkupv1.DocumentStatus_DOCUMENT_STATUS_FAILED,
}

// StatusProto is the API's enum value for a stored status.
func StatusProto(s staging.DocStatus) chunkupv1.DocumentStatus { return statusProto[s] }

func tsOrNil(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func ocrProto(o *staging.OCRSummary) *chunkupv1.OCRSummary {
	if o == nil {
		return nil
	}
	return &chunkupv1.OCRSummary{ResultKey: o.ResultKey, Pages: int32(o.Pages), Words: int32(o.Words),
		MeanConfidence: o.MeanConfidence, PageConfidence: o.PageConfidence}
}

func evalProto(e *staging.Evaluation) *chunkupv1.Evaluation {
	if e == nil {
		return nil
	}
	return &chunkupv1.Evaluation{Score: int32(e.Score), Decision: string(e.Decision), Reasons: e.Reasons}
}

func verificationProto(v *staging.Verification) *chunkupv1.Verification {
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
func DocumentProto(d *staging.Document) *chunkupv1.Document {
	return &chunkupv1.Document{
		DocumentId: d.ID, UploadId: d.ID, Status: StatusProto(d.Status), Bucket: d.Bucket, Key: d.Key,
		ContentType: d.ContentType, Tenant: d.Tenant, CorrelationId: d.CorrelationID, JobId: d.JobID,
		Attempts: int32(d.Attempts), Error: d.Error, ErrorTime: tsOrNil(d.ErrorTime),
		MaxRetriesExceeded: d.MaxRetriesExceeded, Ocr: ocrProto(d.OCR), Evaluation: evalProto(d.Eval),
		Verification: verificationProto(d.Verification), CreateTime: tsOrNil(d.Created), UpdateTime: tsOrNil(d.Updated),
	}
}

// statusEvent returns the builder of the event for a transition of a document to `to`,
// made by node at now with the parts of change that it sets.
func statusEvent(node string, now time.Time, to staging.DocStatus, c *staging.DocChange) func(prev *staging.Document) (staging.OutboxEvent, error) {
	return func(prev *staging.Document) (staging.OutboxEvent, error) {
		id := staging.NewID()
		msg := &chunkupv1.DocumentStatusChanged{
			EventId: id, DocumentId: prev.ID, UploadId: prev.ID, PreviousStatus: StatusProto(prev.Status),
			Status: StatusProto(to), CorrelationId: prev.CorrelationID, Tenant: prev.Tenant, Bucket: prev.Bucket,
			Key: prev.Key, ContentType: prev.ContentType, JobId: prev.JobID, NodeId: node,
			Attempts: int32(prev.Attempts), Ocr: ocrProto(prev.OCR), Evaluation: evalProto(prev.Eval),
			Verification: verificationProto(prev.Verification), EventTime: timestamppb.New(now),
		}
		if c != nil {
			if c.JobID != nil {
				msg.JobId = *c.JobID
			}
			if c.Attempts != nil {
				msg.Attempts = int32(*c.Attempts)
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

// withEvent sets c's event to the one for its transition and returns c.
func withEvent(node string, now time.Time, c staging.DocChange) staging.DocChange {
	c.Event = statusEvent(node, now, c.To, &c)
	return c
}
