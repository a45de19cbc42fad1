// Package events turns chunkup's state changes into the events it publishes: the
// protojson encoding of the messages in proto/chunkup/v1/events.proto (an upload that
// completed, failed, was aborted or expired; a document's status change), the Kafka
// headers every event carries, and the Publisher that drains the outboxes to Kafka.
// Events are built by whoever changes the state and recorded in the same atomic step
// (see staging/outbox); the Publisher delivers them at least once, under an id that
// stays the same across redeliveries.
package events

import (
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/staging"
)

// Kafka headers every event carries.
const (
	HeaderEventType     = "event-type"
	HeaderEventID       = "event-id"
	HeaderContentType   = "content-type"
	HeaderCorrelationID = "correlation-id"
	ContentTypeJSON     = "application/json"
)

// EventHeaders are the Kafka headers of an event: what a consumer reads to know what a
// message is without decoding it.
type EventHeaders struct{ Type, ID, ContentType, CorrelationID string }

// Kafka returns h as Kafka headers.
func (h EventHeaders) Kafka() []kafka.Header {
	return []kafka.Header{
		{Key: HeaderEventType, Value: []byte(h.Type)},
		{Key: HeaderEventID, Value: []byte(h.ID)},
		{Key: HeaderContentType, Value: []byte(h.ContentType)},
		{Key: HeaderCorrelationID, Value: []byte(h.CorrelationID)},
	}
}

// HeadersOf reads an event's headers from a Kafka message's.
func HeadersOf(hs []kafka.Header) EventHeaders {
	var h EventHeaders
	for _, kh := range hs {
		switch kh.Key {
		case HeaderEventType:
			h.Type = string(kh.Value)
		case HeaderEventID:
			h.ID = string(kh.Value)
		case HeaderContentType:
			h.ContentType = string(kh.Value)
		case HeaderCorrelationID:
			h.CorrelationID = string(kh.Value)
		}
	}
	return h
}

// eventJSON is how events are encoded: protojson with the proto field names, so the
// JSON matches the schema in proto/chunkup/v1/events.proto.
var eventJSON = protojson.MarshalOptions{UseProtoNames: true}

func outboxEvent(u *staging.Upload, id string, msg proto.Message, now time.Time) (staging.OutboxEvent, error) {
	b, err := eventJSON.Marshal(msg)
	if err != nil {
		return staging.OutboxEvent{}, err
	}
	return staging.OutboxEvent{
		ID: id, Type: string(msg.ProtoReflect().Descriptor().FullName()), CorrelationID: u.CorrelationID,
		UploadID: u.ID, Payload: b, Created: now,
	}, nil
}

// StructOf is the Struct of a stored JSON object ("" or an unreadable one: nil; it was
// validated when stored).
func StructOf(js string) *structpb.Struct {
	if js == "" {
		return nil
	}
	st := &structpb.Struct{}
	if protojson.Unmarshal([]byte(js), st) != nil {
		return nil
	}
	return st
}

func tsOrNil(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// Completed builds the UploadCompleted event for u, finished as f at now by the process
// instance.
func Completed(u *staging.Upload, instance string, f staging.Final, now time.Time) (staging.OutboxEvent, error) {
	id := ids.New()
	return outboxEvent(u, id, &chunkupv1.UploadCompleted{
		EventId: id, UploadId: u.ID, NodeId: u.NodeID, Tenant: u.Tenant, Bucket: u.Bucket, Key: u.Key,
		Size: f.Size, Etag: f.ETag, ChecksumCrc32C: fmt.Sprintf("%08x", f.CRC32C), ContentType: u.ContentType,
		Name: u.Name, Metadata: u.Metadata, CorrelationId: u.CorrelationID,
		CreateTime: tsOrNil(u.Created), CompleteTime: timestamppb.New(now), EventTime: timestamppb.New(now),
		InstanceId: instance, ClientNodeId: u.ClientNodeID, ConnectorId: u.ConnectorID, ParentId: u.ParentID,
		Path: u.Path, Drive: u.Drive, CustomMetadata: StructOf(u.CustomMetadata), DetectedContentType: f.DetectedContentType,
	}, now)
}

// Ended builds the event that says u ended with status (FAILED, ABORTED or EXPIRED)
// for reason at now, as seen by the process instance.
func Ended(u *staging.Upload, status staging.Status, reason, instance string, now time.Time) (staging.OutboxEvent, error) {
	id := ids.New()
	var msg proto.Message
	cm := StructOf(u.CustomMetadata)
	switch status {
	case staging.StatusFailed:
		msg = &chunkupv1.UploadFailed{EventId: id, UploadId: u.ID, NodeId: u.NodeID, Tenant: u.Tenant,
			Bucket: u.Bucket, Key: u.Key, Error: reason, Name: u.Name, Metadata: u.Metadata,
			CorrelationId: u.CorrelationID, CreateTime: tsOrNil(u.Created), EventTime: timestamppb.New(now),
			InstanceId: instance, ClientNodeId: u.ClientNodeID, ConnectorId: u.ConnectorID, ParentId: u.ParentID,
			Path: u.Path, Drive: u.Drive, CustomMetadata: cm}
	case staging.StatusAborted:
		msg = &chunkupv1.UploadAborted{EventId: id, UploadId: u.ID, NodeId: u.NodeID, Tenant: u.Tenant,
			Bucket: u.Bucket, Key: u.Key, Reason: reason, Name: u.Name, Metadata: u.Metadata,
			CorrelationId: u.CorrelationID, CreateTime: tsOrNil(u.Created), EventTime: timestamppb.New(now),
			InstanceId: instance, ClientNodeId: u.ClientNodeID, ConnectorId: u.ConnectorID, ParentId: u.ParentID,
			Path: u.Path, Drive: u.Drive, CustomMetadata: cm}
	case staging.StatusExpired:
		msg = &chunkupv1.UploadExpired{EventId: id, UploadId: u.ID, NodeId: u.NodeID, Tenant: u.Tenant,
			Bucket: u.Bucket, Key: u.Key, ReceivedBytes: u.ReceivedBytes, Name: u.Name, Metadata: u.Metadata,
			CorrelationId: u.CorrelationID, CreateTime: tsOrNil(u.Created), UpdateTime: tsOrNil(u.Updated),
			EventTime:  timestamppb.New(now),
			InstanceId: instance, ClientNodeId: u.ClientNodeID, ConnectorId: u.ConnectorID, ParentId: u.ParentID,
			Path: u.Path, Drive: u.Drive, CustomMetadata: cm}
	default:
		return staging.OutboxEvent{}, fmt.Errorf("events: no event for status %s", status)
	}
	return outboxEvent(u, id, msg, now)
}
