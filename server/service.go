// Package server is chunkup's gRPC door: the UploadService and DocumentService, their
// stream loops, the codec that receives chunks with one copy, authentication and
// tenancy, interceptors, and the table that maps the kinds of errors to gRPC codes
// (errors.go). What an upload is — creating it, taking its chunks, reading it for
// resume, aborting it — is the upload core's (package upload); this package turns
// protobuf messages into the core's plain inputs and its results back.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/chunkup/chunkup/events"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/s3store"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/outbox"
	"github.com/chunkup/chunkup/staging/uploads"
	"github.com/chunkup/chunkup/upload"
)

// Core is the part of the upload core the gRPC door uses.
type Core interface {
	Plan(req *upload.CreateRequest) (staging.Params, error)
	CreatePlanned(ctx context.Context, req *upload.CreateRequest, p staging.Params) (*staging.Upload, error)
	Get(ctx context.Context, id string) (*staging.Upload, error)
	Params(ctx context.Context, id string) (staging.Params, error)
	Abort(ctx context.Context, id, reason string) (*staging.Upload, error)
	Check(p staging.Params, ch *upload.Chunk) (uint32, error)
	Take(ctx context.Context, p staging.Params, ch *upload.Chunk, sum *uint32) (upload.Taken, error)
	OpenStream(ctx context.Context) (release func(), err error)
	FinishingStream(ctx context.Context, open func()) (release func(), moved bool)
	ReserveStaging(ctx context.Context, n int64) error
	SettleStaging(reserved, staged int64)
	Budgeted() bool
	Config() upload.Config
	ListObjects(ctx context.Context, prefix, pageToken string, pageSize int) ([]upload.Object, string, error)
	StatObject(ctx context.Context, key string) (upload.Object, error)
	DeleteObject(ctx context.Context, key, ifMatch string) error
	CreateDirect(ctx context.Context, req *upload.CreateRequest, checksums bool) (*staging.Upload, error)
	OffersDirect(size int64) bool
	SignParts(ctx context.Context, id string, parts []upload.PartToSign) ([]upload.SignedPart, error)
	DirectParts(ctx context.Context, id string) ([]s3store.ListedPart, error)
	CompleteDirect(ctx context.Context, id string, reported []upload.ReportedPart) (*staging.Upload, error)
}

var _ Core = (*upload.Core)(nil)

// Lister lists a tenant's uploads in progress (ListUploads).
type Lister interface {
	InProgress(ctx context.Context, tenant, cursor string, limit int) ([]*staging.Upload, string, error)
}

var _ Lister = (*uploads.Store)(nil)

// Progress subscribes to an upload's progress notices (see outbox.Outbox.Progress).
type Progress interface {
	Progress(ctx context.Context, id string) (*staging.Subscription, error)
}

var _ Progress = (*outbox.Outbox)(nil)

// Config configures the gRPC door. Zero values mean the documented defaults; what an
// upload is (chunk sizes, keys, limits on creates and staging) is upload.Config's.
type Config struct {
	// MaxWatchesPerTenant caps the WatchUpload streams one tenant has open on this
	// process. Zero means 1,000; -1 means no cap.
	MaxWatchesPerTenant int
	// MaxReadsPerTenant caps the ReadObject streams one tenant has open on this process:
	// each holds a message of up to 1 MiB, its read buffer and an S3 connection for as
	// long as its client takes to read. Zero means 16; -1 means no cap.
	MaxReadsPerTenant int
	// MaxChunkSize is the core's largest chunk size (upload.Config.MaxChunkSize), which
	// sizes the largest message the door accepts. NewUploadService takes it from the
	// core; zero means 64 MiB for Validate and MemoryLimit.
	MaxChunkSize int64
	// MaxReceiveMemory caps the bytes this process holds in chunk messages being
	// received or processed: a stream reserves the largest message it may be sent
	// (MaxMessageSize) before it reads one, and keeps the message's size until the chunk
	// is staged or stored (see memoryGate). With the rest of the process it bounds the
	// server's memory under any load (docs/limits.md). Zero means 1 GiB; it must hold
	// at least two of the largest messages.
	MaxReceiveMemory int64
	// MaxReceiveMemoryPerTenant caps what one tenant's streams may hold of
	// MaxReceiveMemory, so that one tenant's streams waiting for messages cannot hold
	// every reservation and lock the others out. Zero means MaxReceiveMemory less one
	// largest message (another tenant always finds room to read); negative, no cap
	// beyond MaxReceiveMemory. A cap must hold at least one largest message.
	MaxReceiveMemoryPerTenant int64
	// MemoryWait is how long a stream waits for room under MaxReceiveMemory before it
	// fails with RESOURCE_EXHAUSTED. Zero means 30 s.
	MemoryWait time.Duration
	// StreamIdleTimeout closes an upload stream on which no chunk arrived, and none was
	// being processed, for this long, with DEADLINE_EXCEEDED; the upload stays
	// resumable. Zero means 2 min; negative, never.
	StreamIdleTimeout time.Duration
	Logger            *slog.Logger
	// Observe sets up metrics and tracing of the API (see observe.go). Zero: none.
	Observe Observability
}

// Defaults of the gRPC door's limits.
const (
	DefaultMaxReceiveMemory  = 1 << 30
	DefaultMaxReadsPerTenant = 16
	DefaultStreamIdleTimeout = 2 * time.Minute
	// messageFraming is what a message may hold besides a chunk's bytes: its other
	// fields, and a create request (bounded by upload's validation to a few KiB).
	messageFraming = 64 << 10
)

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.MaxWatchesPerTenant < -1 {
		return errors.New("server: the watch limit must be -1 (none), 0 (the default) or a positive number")
	}
	if c.MaxReadsPerTenant < -1 {
		return errors.New("server: the read limit must be -1 (none), 0 (the default) or a positive number")
	}
	if c.MaxReceiveMemory < 0 || c.MemoryWait < 0 {
		return errors.New("server: limits must not be negative")
	}
	if c.MaxReceiveMemory > 0 && c.MaxReceiveMemory < 2*int64(c.MaxMessageSize()) {
		return fmt.Errorf("server: the receive memory cap must hold at least two of the largest messages (2 × %d bytes, from the max chunk size)", c.MaxMessageSize())
	}
	if c.MaxReceiveMemoryPerTenant > 0 && c.MaxReceiveMemoryPerTenant < int64(c.MaxMessageSize()) {
		return fmt.Errorf("server: the per-tenant receive memory cap must hold at least one of the largest messages (%d bytes, from the max chunk size)", c.MaxMessageSize())
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.MaxWatchesPerTenant == 0 {
		c.MaxWatchesPerTenant = 1000
	}
	if c.MaxReadsPerTenant == 0 {
		c.MaxReadsPerTenant = DefaultMaxReadsPerTenant
	}
	if c.MaxChunkSize == 0 {
		c.MaxChunkSize = 64 << 20
	}
	if c.MaxReceiveMemory == 0 {
		c.MaxReceiveMemory = DefaultMaxReceiveMemory
	}
	if c.MemoryWait == 0 {
		c.MemoryWait = 30 * time.Second
	}
	if c.StreamIdleTimeout == 0 {
		c.StreamIdleTimeout = DefaultStreamIdleTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// MaxMessageSize is the largest gRPC message the server accepts for cfg: a chunk of the
// largest size an upload may have (MaxChunkSize), plus the message's other fields.
func (c Config) MaxMessageSize() int {
	if c.MaxChunkSize == 0 {
		c.MaxChunkSize = 64 << 20
	}
	return int(c.MaxChunkSize) + messageFraming
}

// Deps are what the gRPC door is built on.
type Deps struct {
	// Core is the upload core. Required.
	Core Core
	// Lister lists uploads in progress. Required.
	Lister Lister
	// Progress carries progress notices to watchers. Required.
	Progress Progress
	// Objects reads objects back (ReadObject). Nil: ReadObject is refused.
	Objects Objects
}

// UploadService implements chunkupv1.UploadServiceServer.
type UploadService struct {
	chunkupv1.UnimplementedUploadServiceServer
	cfg      Config
	core     Core
	bucket   string
	lister   Lister
	progress Progress
	objects  Objects
	watches  *upload.StreamCounter
	reads    *upload.StreamCounter
	memory   *memoryGate
	draining chan struct{}
	drain    sync.Once
}

var _ chunkupv1.UploadServiceServer = (*UploadService)(nil)

// NewUploadService returns the upload service.
func NewUploadService(d Deps, cfg Config) (*UploadService, error) {
	if d.Core == nil || d.Lister == nil || d.Progress == nil {
		return nil, errors.New("server: the upload service needs the core, a lister and a progress channel")
	}
	cfg.MaxChunkSize = d.Core.Config().MaxChunkSize
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	s := &UploadService{cfg: cfg, core: d.Core, bucket: d.Core.Config().Bucket, lister: d.Lister, progress: d.Progress,
		objects: d.Objects, draining: make(chan struct{}),
		watches: upload.NewStreamCounter("watches", cfg.MaxWatchesPerTenant),
		reads:   upload.NewStreamCounter("ReadObject streams", cfg.MaxReadsPerTenant),
		memory:  newMemoryGate(cfg.MaxReceiveMemory, cfg.tenantReceiveMemory(), cfg.MemoryWait)}
	return s, nil
}

// Drain makes open streams end with UNAVAILABLE after their current chunk, telling
// clients to resume on another server; the process calls it when it shuts down.
func (s *UploadService) Drain() { s.drain.Do(func() { close(s.draining) }) }

// CreateUpload implements UploadService.CreateUpload.
func (s *UploadService) CreateUpload(ctx context.Context, req *chunkupv1.CreateUploadRequest) (*chunkupv1.CreateUploadResponse, error) {
	cr, err := createRequest(ctx, req)
	if err != nil {
		return nil, toStatus("", err)
	}
	cr.EitherKind = req.DirectIfOffered && !req.Direct
	if req.Direct || req.DirectIfOffered && s.core.OffersDirect(cr.Size) {
		up, err := s.core.CreateDirect(ctx, cr, req.DirectChecksums)
		if err != nil {
			return nil, toStatus("", err)
		}
		return &chunkupv1.CreateUploadResponse{Upload: toProto(up)}, nil
	} else if req.DirectChecksums && !req.DirectIfOffered {
		return nil, toStatus("", invalidf("direct_checksums is for direct uploads: set direct too, or leave it unset"))
	}
	p, err := s.core.Plan(cr)
	if err != nil {
		return nil, toStatus("", err)
	}
	up, err := s.core.CreatePlanned(ctx, cr, p)
	if err != nil {
		return nil, toStatus("", err)
	}
	return &chunkupv1.CreateUploadResponse{Upload: toProto(up)}, nil
}

// createRequest is the core's request for req: what only protobuf can get wrong
// (custom_metadata's values) is checked here, the rest by the core.
func createRequest(ctx context.Context, req *chunkupv1.CreateUploadRequest) (*upload.CreateRequest, error) {
	cr := &upload.CreateRequest{Size: -1, ChunkSize: req.ChunkSize, Key: req.Key, Name: req.Name, ContentType: req.ContentType,
		Metadata: req.Metadata, ClientNodeID: req.ClientNodeId, NodeID: req.NodeId, ConnectorID: req.ConnectorId,
		ParentID: req.ParentId, Path: req.Path, Drive: req.Drive, IfAbsent: req.IfAbsent, CorrelationID: CorrelationID(ctx)}
	if req.ExpectedSize != nil {
		cr.Size = *req.ExpectedSize
		if cr.Size < 0 {
			cr.Size = -2 // refused by the core's validation, not taken for "unknown"
		}
	}
	if req.CustomMetadata != nil {
		if err := validateStruct(req.CustomMetadata, "custom_metadata", 1); err != nil {
			return nil, err
		}
		b, err := protojson.Marshal(req.CustomMetadata)
		if err != nil {
			return nil, invalidf("custom_metadata cannot be stored as JSON: %v", err)
		}
		cr.CustomMetadata = string(b)
	}
	return cr, nil
}

// CorrelationIDHeader is the request header whose value ties an upload to the caller's
// request in logs and events.
const CorrelationIDHeader = "x-correlation-id"

// CorrelationID returns the caller's correlation id from the request metadata, or a new
// one when it is missing or unusable.
func CorrelationID(ctx context.Context) string {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(CorrelationIDHeader); len(v) > 0 && v[0] != "" && len(v[0]) <= 128 && printable(v[0]) {
			return v[0]
		}
	}
	return ids.New()
}

// GetUpload implements UploadService.GetUpload.
func (s *UploadService) GetUpload(ctx context.Context, req *chunkupv1.GetUploadRequest) (*chunkupv1.GetUploadResponse, error) {
	up, err := s.core.Get(ctx, req.UploadId)
	if err != nil {
		return nil, toStatus(req.UploadId, err)
	}
	return &chunkupv1.GetUploadResponse{Upload: toProto(up)}, nil
}

// AbortUpload implements UploadService.AbortUpload. Aborting an aborted upload is a
// no-op; a completed, failed or expired one cannot be aborted.
func (s *UploadService) AbortUpload(ctx context.Context, req *chunkupv1.AbortUploadRequest) (*chunkupv1.AbortUploadResponse, error) {
	up, err := s.core.Abort(ctx, req.UploadId, req.Reason)
	if err != nil {
		return nil, toStatus(req.UploadId, err)
	}
	return &chunkupv1.AbortUploadResponse{Upload: toProto(up)}, nil
}

var states = map[staging.Status]chunkupv1.UploadState{
	staging.StatusActive:     chunkupv1.UploadState_UPLOAD_STATE_ACTIVE,
	staging.StatusCompleting: chunkupv1.UploadState_UPLOAD_STATE_COMPLETING,
	staging.StatusCompleted:  chunkupv1.UploadState_UPLOAD_STATE_COMPLETED,
	staging.StatusFailed:     chunkupv1.UploadState_UPLOAD_STATE_FAILED,
	staging.StatusAborted:    chunkupv1.UploadState_UPLOAD_STATE_ABORTED,
	staging.StatusExpired:    chunkupv1.UploadState_UPLOAD_STATE_EXPIRED,
}

func toProto(u *staging.Upload) *chunkupv1.Upload {
	return &chunkupv1.Upload{
		UploadId: u.ID, State: states[u.Status], Bucket: u.Bucket, Key: u.Key,
		ChunkSize: u.ChunkSize, ExpectedSize: u.ExpectedSize, TotalChunks: u.Total,
		ReceivedChunks: u.ReceivedChunks, ReceivedBytes: u.ReceivedBytes,
		UploadedChunks: u.Uploaded, UploadedBytes: u.UploadedBytes, Size: u.Size,
		Etag: u.ETag, Crc32C: u.CRC32C, Error: u.Error, Name: u.Name,
		ContentType: u.ContentType, Metadata: u.Metadata, ClientNodeId: u.ClientNodeID,
		CorrelationId: u.CorrelationID, Tenant: u.Tenant,
		CreateTime: ts(u.Created), UpdateTime: ts(u.Updated), CompleteTime: ts(u.Completed),
		Chunks: receivedChunks(u.Chunks), NodeId: u.NodeID, ConnectorId: u.ConnectorID, ParentId: u.ParentID,
		Path: u.Path, Drive: u.Drive, CustomMetadata: events.StructOf(u.CustomMetadata),
		DetectedContentType: u.DetectedContentType, IfAbsent: u.IfAbsent, Direct: u.Direct,
	}
}

func receivedChunks(cs []staging.ChunkInfo) []*chunkupv1.ReceivedChunk {
	if len(cs) == 0 {
		return nil
	}
	out := make([]*chunkupv1.ReceivedChunk, len(cs))
	for i, c := range cs {
		out[i] = &chunkupv1.ReceivedChunk{ChunkNumber: c.N, Size: c.Size, Crc32C: c.CRC32C, Stored: c.Stored}
	}
	return out
}

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// tenantReceiveMemory is what one tenant's streams may hold of MaxReceiveMemory (see
// MaxReceiveMemoryPerTenant); 0: no cap of its own.
func (c Config) tenantReceiveMemory() int64 {
	switch per := c.MaxReceiveMemoryPerTenant; {
	case per < 0:
		return 0
	case per > 0:
		return min(per, c.MaxReceiveMemory)
	}
	return c.MaxReceiveMemory - int64(c.MaxMessageSize())
}
