// Package server holds chunkup's gRPC services. It validates every request before it
// touches state, stages chunks through the staging store, and is the one place where
// domain errors become gRPC statuses (see toStatus).
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/chunkup/chunkup/events"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/s3store"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/outbox"
	"github.com/chunkup/chunkup/staging/uploads"
)

// Store is the part of the uploads store the service uses.
type Store interface {
	Reserve(ctx context.Context, tenant, clientNodeID, id string, at time.Time) (string, error)
	Create(ctx context.Context, u staging.NewUpload) (bool, error)
	CreateReserved(ctx context.Context, u staging.NewUpload) (bool, error)
	IndexNode(ctx context.Context, tenant, nodeID, id string, created time.Time, ttl time.Duration) error
	NodeTTL() time.Duration
	Params(ctx context.Context, id string) (staging.Params, error)
	Stage(ctx context.Context, id string, n uint32, data []byte, crc uint32, last bool) (staging.StageResult, error)
	Get(ctx context.Context, id string) (*staging.Upload, error)
	InProgress(ctx context.Context, tenant, cursor string, limit int) ([]*staging.Upload, string, error)
	StagedBytes(ctx context.Context) (int64, error)
	Now() time.Time
}

var _ Store = (*uploads.Store)(nil)

// Progress subscribes to an upload's progress notices (see outbox.Outbox.Progress).
type Progress interface {
	Progress(ctx context.Context, id string) (*staging.Subscription, error)
}

var _ Progress = (*outbox.Outbox)(nil)

// Ender ends an upload and releases its resources (see cleanup.Ender).
type Ender interface {
	End(ctx context.Context, id string, status staging.Status, reason string, completer string) error
}

// Config configures the upload service. Zero values mean the documented defaults.
type Config struct {
	// Bucket receives the objects. Required.
	Bucket string
	// KeyPrefix starts default object keys: {KeyPrefix}/{upload id}/{name}. Zero means
	// "uploads".
	KeyPrefix string
	// KeyTemplate, when set, makes the keys of uploads that bring none instead of
	// KeyPrefix: literal text and the variables {upload_id}, {node_id},
	// {connector_id}, {name}, {ext} (the name's extension with its dot) and {tenant}
	// (see ParseKeyTemplate). The key it makes is checked like a client's key, and with
	// authentication it goes under TENANT/ like every key. Zero means the default keys.
	KeyTemplate string
	// ChunkSize is the default chunk size. Zero means 8 MiB; at least 5 MiB (S3's
	// minimum part size).
	ChunkSize int64
	// MaxChunkSize caps the chunk size chosen for large uploads, and so the largest
	// upload (10,000 chunks). Zero means 64 MiB (about 625 GiB uploads); at most 5 GiB.
	MaxChunkSize int64
	// InstanceID names this process in upload state. Zero means unnamed.
	InstanceID string
	// MaxUploadSize caps an upload's size. Zero means only S3's cap (10,000 chunks of at
	// most MaxChunkSize).
	MaxUploadSize int64
	// MaxWatchesPerTenant caps the WatchUpload streams one tenant has open on this
	// process. Zero means 1,000; -1 means no cap.
	MaxWatchesPerTenant int
	// MaxReadsPerTenant caps the ReadObject streams one tenant has open on this process:
	// each holds a message of up to 1 MiB, its read buffer and an S3 connection for as
	// long as its client takes to read. Zero means 16; -1 means no cap.
	MaxReadsPerTenant int
	// MaxStreamsPerTenant caps the upload streams one tenant has open on this process;
	// past it a stream is refused with RESOURCE_EXHAUSTED. Zero means 64; negative, no
	// cap.
	MaxStreamsPerTenant int
	// CreateRatePerTenant bounds the uploads one tenant may create per second on this
	// process (a token bucket with bursts of twice the rate), whichever door they come
	// through; past it a create is refused with RESOURCE_EXHAUSTED (HTTP 429) and a
	// retry delay. Zero means DefaultCreateRatePerTenant; negative, no bound. The
	// number of uploads a tenant may have in progress is staging.Config's
	// MaxActivePerTenant.
	CreateRatePerTenant float64
	// StagedBytesBudget caps the bytes staged in Redis (measured as Redis' used_memory):
	// over it, streams stop reading chunks until workers drain Redis (see budgetGate).
	// Zero means no budget.
	StagedBytesBudget int64
	// BudgetWait is how long a stream waits for the staged-bytes budget, or for room
	// under MaxReceiveMemory, before it fails with RESOURCE_EXHAUSTED. Zero means 30 s.
	BudgetWait time.Duration
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
	// StreamIdleTimeout closes an upload stream on which no chunk arrived, and none was
	// being processed, for this long, with DEADLINE_EXCEEDED; the upload stays
	// resumable. Zero means 2 min; negative, never.
	StreamIdleTimeout time.Duration
	// Staging is how chunks reach S3: StagingAdaptive writes a chunk straight through
	// to S3 when this process's worker has a free upload slot and S3 keeps pace, and
	// stages it in Redis otherwise; StagingAlways stages every chunk. Zero means
	// StagingAdaptive. Write-through needs the worker role in the process (Deps.Through).
	Staging string
	Logger  *slog.Logger
	// Observe sets up metrics and tracing of the API (see observe.go). Zero: none.
	Observe Observability
}

// LocalWorker is the part of an in-process chunk worker the API hands chunks to (see
// chunkworker.Worker.Expect).
type LocalWorker interface {
	// Expect is called before chunk ref is staged. The function it returns is called
	// once staging is over: with the chunk's bytes and CRC-32C if they were staged, or
	// with nil if not (an error, or a duplicate). It must not block.
	Expect(ref staging.ChunkRef) func(data []byte, crc uint32)
}

// Deps are what the service is built on.
type Deps struct {
	// Store holds the uploads. Required.
	Store Store
	// Progress carries progress notices to watchers. Required.
	Progress Progress
	// Ender ends uploads (abort). Required.
	Ender Ender
	// Objects reads objects back (ReadObject). Nil: ReadObject is refused.
	Objects Objects
	// Local, when set, is a worker in this process that takes a staged chunk straight
	// from the bytes the stream received, instead of reading them back from Redis (which
	// keeps the durable copy). Nil: every chunk goes through Redis.
	Local LocalWorker
	// Through, when set, is a worker in this process that writes chunks straight
	// through to S3 while it keeps pace (Config.Staging adaptive). Nil: every chunk is
	// staged.
	Through Through
	// Completer, when set, completes an upload at once in this process when a chunk
	// written through gave it its last part, so that the chunk's acknowledgement says
	// COMPLETED (UploadChunkResponse.completed) and the client needs no WatchUpload.
	// Nil: the completer role finishes it as any other.
	Completer Completer
}

// Through writes chunks straight through to S3 (see chunkworker.Worker.WriteThrough,
// which the assembly adapts).
type Through interface {
	// WriteThrough stores chunk ref in S3 now if it can; last says it is the upload's
	// last chunk; with wake, an upload it makes ready goes to the in-process completer.
	WriteThrough(ctx context.Context, ref staging.ChunkRef, data []byte, crc uint32, last, wake bool) (Written, error)
}

// Written is what Through.WriteThrough did with a chunk.
type Written struct {
	// Stored: the chunk is in S3 and recorded; Duplicate: the same bytes had been
	// recorded meanwhile. Ready: the upload has every part now.
	Stored, Duplicate, Ready bool
	// HandOver, when the chunk is not stored: called once it is staged, as the function
	// LocalWorker.Expect returns (its part upload is under way).
	HandOver func(data []byte, crc uint32)
	// InUse: the chunk's bytes are still being read (an upload goes on); the caller
	// must not reuse them.
	InUse bool
}

// Completer completes an upload whose parts are all recorded, and returns it as it
// recorded it COMPLETED, or nil when it did not complete it (see
// completion.Completer.CompleteUpload). head is the object's first bytes when the
// caller has them (nil otherwise), so that the completer need not read them from S3.
type Completer interface {
	CompleteUpload(ctx context.Context, id string, head []byte) (*staging.Upload, error)
}

// Staging modes (Config.Staging).
const (
	StagingAdaptive = "adaptive"
	StagingAlways   = "always"
)

// Defaults of the receive-path limits.
const (
	DefaultMaxStreamsPerTenant = 64
	// DefaultCreateRatePerTenant is well above what one client uploading small files
	// creates (a few hundred per second) and far below what fills Redis in a minute.
	DefaultCreateRatePerTenant = 500
	// DefaultMaxActivePerTenant is the default of staging.Config.MaxActivePerTenant
	// that chunkup serve sets: about 14 MB of Redis per tenant for uploads abandoned
	// before they expire.
	DefaultMaxActivePerTenant = 10_000
	DefaultMaxReceiveMemory   = 1 << 30
	DefaultMaxReadsPerTenant  = 16
	DefaultStreamIdleTimeout  = 2 * time.Minute
	// messageFraming is what a message may hold besides a chunk's bytes: its other
	// fields, and a create request (bounded by ValidateCreate to a few KiB).
	messageFraming = 64 << 10
)

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Bucket == "" {
		return errors.New("server: a bucket is required")
	}
	if c.ChunkSize != 0 && (c.ChunkSize < MinPartSize || c.ChunkSize > MaxPartSize) {
		return errors.New("server: chunk size must be between 5 MiB and 5 GiB")
	}
	if c.MaxChunkSize != 0 && (c.MaxChunkSize < MinPartSize || c.MaxChunkSize > MaxPartSize) {
		return errors.New("server: max chunk size must be between 5 MiB and 5 GiB")
	}
	if c.ChunkSize != 0 && c.MaxChunkSize != 0 && c.ChunkSize > c.MaxChunkSize {
		return errors.New("server: chunk size must not exceed max chunk size")
	}
	if c.MaxWatchesPerTenant < -1 {
		return errors.New("server: the watch limit must be -1 (none), 0 (the default) or a positive number")
	}
	if c.MaxReadsPerTenant < -1 {
		return errors.New("server: the read limit must be -1 (none), 0 (the default) or a positive number")
	}
	if c.MaxUploadSize < 0 || c.StagedBytesBudget < 0 || c.BudgetWait < 0 || c.MaxReceiveMemory < 0 {
		return errors.New("server: limits must not be negative")
	}
	if c.StagedBytesBudget > 0 && c.StagedBytesBudget < 2*MinPartSize {
		return errors.New("server: the staged-bytes budget must be at least 10 MiB (two minimal chunks)")
	}
	if c.MaxReceiveMemory > 0 && c.MaxReceiveMemory < 2*int64(c.MaxMessageSize()) {
		return fmt.Errorf("server: the receive memory cap must hold at least two of the largest messages (2 × %d bytes, from --max-chunk-size)", c.MaxMessageSize())
	}
	if c.MaxReceiveMemoryPerTenant > 0 && c.MaxReceiveMemoryPerTenant < int64(c.MaxMessageSize()) {
		return fmt.Errorf("server: the per-tenant receive memory cap must hold at least one of the largest messages (%d bytes, from --max-chunk-size)", c.MaxMessageSize())
	}
	switch c.Staging {
	case "", StagingAdaptive, StagingAlways:
	default:
		return fmt.Errorf("server: staging %q: use %s or %s", c.Staging, StagingAdaptive, StagingAlways)
	}
	if c.KeyTemplate != "" {
		if _, err := ParseKeyTemplate(c.KeyTemplate); err != nil {
			return err
		}
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
	if c.KeyPrefix == "" {
		c.KeyPrefix = "uploads"
	}
	if c.ChunkSize == 0 {
		c.ChunkSize = 8 << 20
	}
	if c.MaxChunkSize == 0 {
		c.MaxChunkSize = max64(64<<20, c.ChunkSize)
	}
	if c.BudgetWait == 0 {
		c.BudgetWait = 30 * time.Second
	}
	if c.MaxStreamsPerTenant == 0 {
		c.MaxStreamsPerTenant = DefaultMaxStreamsPerTenant
	}
	if c.CreateRatePerTenant == 0 {
		c.CreateRatePerTenant = DefaultCreateRatePerTenant
	}
	if c.MaxReceiveMemory == 0 {
		c.MaxReceiveMemory = DefaultMaxReceiveMemory
	}
	if c.StreamIdleTimeout == 0 {
		c.StreamIdleTimeout = DefaultStreamIdleTimeout
	}
	if c.Staging == "" {
		c.Staging = StagingAdaptive
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// MaxMessageSize is the largest gRPC message the server accepts for cfg: a chunk of the
// largest size an upload may have (MaxChunkSize), plus the message's other fields.
func (c Config) MaxMessageSize() int {
	if c.MaxChunkSize == 0 {
		c.MaxChunkSize = max64(64<<20, c.ChunkSize)
	}
	return int(c.MaxChunkSize) + messageFraming
}

// UploadService implements chunkupv1.UploadServiceServer.
type UploadService struct {
	chunkupv1.UnimplementedUploadServiceServer
	cfg       Config
	store     Store
	progress  Progress
	ender     Ender
	local     LocalWorker
	objects   Objects
	keys      *KeyTemplate // nil: default keys
	through   Through
	completer Completer
	streams   *streamCounter
	watches   *streamCounter
	reads     *streamCounter
	creates   *TenantRateLimiter // nil: no bound
	budget    *budgetGate
	memory    *memoryGate
	draining  chan struct{}
	drain     sync.Once
}

var _ chunkupv1.UploadServiceServer = (*UploadService)(nil)

// NewUploadService returns the upload service.
func NewUploadService(d Deps, cfg Config) (*UploadService, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Store == nil || d.Progress == nil || d.Ender == nil {
		return nil, errors.New("server: the upload service needs a store, a progress channel and an ender")
	}
	cfg.setDefaults()
	store := d.Store
	s := &UploadService{cfg: cfg, store: store, progress: d.Progress, ender: d.Ender, local: d.Local, objects: d.Objects, draining: make(chan struct{}),
		streams: &streamCounter{what: "upload streams", flag: "--max-streams-per-tenant", limit: cfg.MaxStreamsPerTenant, open: map[string]int{}},
		watches: &streamCounter{what: "watches", flag: "--max-watches-per-tenant", limit: cfg.MaxWatchesPerTenant, open: map[string]int{}},
		reads:   &streamCounter{what: "ReadObject streams", flag: "--max-reads-per-tenant", limit: cfg.MaxReadsPerTenant, open: map[string]int{}},
		memory:  newMemoryGate(cfg.MaxReceiveMemory, cfg.tenantReceiveMemory(), cfg.BudgetWait), completer: d.Completer}
	if cfg.CreateRatePerTenant > 0 {
		s.creates = NewTenantRateLimiter(cfg.CreateRatePerTenant, int(max(1, 2*cfg.CreateRatePerTenant)))
	}
	if cfg.KeyTemplate != "" {
		s.keys, _ = ParseKeyTemplate(cfg.KeyTemplate) // checked by Validate
	}
	if cfg.Staging == StagingAdaptive {
		s.through = d.Through
	}
	if cfg.StagedBytesBudget > 0 {
		s.budget = &budgetGate{budget: cfg.StagedBytesBudget, maxWait: cfg.BudgetWait,
			every: 50 * time.Millisecond, measure: store.StagedBytes}
	}
	return s, nil
}

// Drain makes open streams end with UNAVAILABLE after their current chunk, telling
// clients to resume on another server; the process calls it when it shuts down.
func (s *UploadService) Drain() { s.drain.Do(func() { close(s.draining) }) }

var errDraining = status.Error(codes.Unavailable, "this server is shutting down; resume the upload on another server (GetUpload lists the chunks it has)")

// CreateUpload implements UploadService.CreateUpload.
func (s *UploadService) CreateUpload(ctx context.Context, req *chunkupv1.CreateUploadRequest) (*chunkupv1.CreateUploadResponse, error) {
	u, err := s.create(ctx, req)
	if err != nil {
		return nil, toStatus("", err)
	}
	return &chunkupv1.CreateUploadResponse{Upload: u}, nil
}

// plan validates create request req and returns the parameters the upload it makes
// will have (Tenant unset): what a chunk sent with the create is checked against before
// anything is created.
func (s *UploadService) plan(req *chunkupv1.CreateUploadRequest) (staging.Params, error) {
	if err := ValidateCreate(req); err != nil {
		return staging.Params{}, err
	}
	expected := int64(-1)
	if req.ExpectedSize != nil {
		expected = *req.ExpectedSize
	}
	if s.cfg.MaxUploadSize > 0 && expected > s.cfg.MaxUploadSize {
		return staging.Params{}, invalidf("expected_size %d exceeds this server's maximum upload size of %d bytes (--max-upload-size)", expected, s.cfg.MaxUploadSize)
	}
	var chunkSize int64
	var err error
	if req.ChunkSize > 0 {
		chunkSize, err = AcceptChunkSize(req.ChunkSize, expected, s.cfg.MaxChunkSize)
	} else {
		chunkSize, err = ChunkSizeFor(expected, s.cfg.ChunkSize, s.cfg.MaxChunkSize)
	}
	if err != nil {
		return staging.Params{}, err
	}
	p := staging.Params{ChunkSize: chunkSize, ExpectedSize: expected}
	if expected >= 0 {
		p.Total = staging.TotalChunks(expected, chunkSize)
	}
	return p, nil
}

func (s *UploadService) create(ctx context.Context, req *chunkupv1.CreateUploadRequest) (*chunkupv1.Upload, error) {
	p, err := s.plan(req)
	if err != nil {
		return nil, err
	}
	return s.createPlanned(ctx, req, p)
}

// createPlanned is create for a request plan has validated and planned as p.
func (s *UploadService) createPlanned(ctx context.Context, req *chunkupv1.CreateUploadRequest, p staging.Params) (*chunkupv1.Upload, error) {
	expected, chunkSize := p.ExpectedSize, p.ChunkSize
	tenant := TenantFrom(ctx)
	id := ids.New()
	nodeID, given := ids.UUID(req.NodeId) // checked by ValidateCreate
	if !given {
		nodeID = ids.NewUUID()
	}
	// The key is made before anything is written, so that a key template this request
	// cannot fill refuses it with nothing changed. Only the upload id and a generated
	// node id can change below, and neither can make a key invalid.
	key, err := s.keyFor(tenant, id, nodeID, req)
	if err != nil {
		return nil, err
	}
	if req.IfAbsent {
		if err := s.keyFree(ctx, key, req.ClientNodeId); err != nil {
			return nil, err
		}
	}
	if s.creates != nil && !s.creates.allow(tenant) {
		return nil, &CapError{Msg: fmt.Sprintf("tenant %s is creating uploads faster than the %g per second this server allows (--create-rate-per-tenant); nothing was created", quote(tenant), s.cfg.CreateRatePerTenant), RetryAfter: time.Second}
	}
	at := s.store.Now()
	bound, err := s.store.Reserve(ctx, tenant, req.ClientNodeId, id, at)
	if err != nil {
		return nil, err
	}
	fresh := bound == id
	if !fresh {
		// A repeated create: the upload it names keeps the node id it was given
		// (and the key made from it).
		id = bound
		switch prev, err := s.get(ctx, id); {
		case err == nil && !given:
			nodeID = prev.NodeID
		case err != nil && !errors.Is(err, staging.ErrNotFound):
			return nil, err
		}
		if key, err = s.keyFor(tenant, id, nodeID, req); err != nil {
			return nil, err
		}
	}
	doc := staging.Document{NodeID: nodeID, ConnectorID: req.ConnectorId, ParentID: req.ParentId, Path: req.Path, Drive: req.Drive}
	if req.CustomMetadata != nil {
		b, err := protojson.Marshal(req.CustomMetadata) // checked by ValidateCreate
		if err != nil {
			return nil, err
		}
		doc.CustomMetadata = string(b)
	}
	nu := staging.NewUpload{
		ID: id, Bucket: s.cfg.Bucket, Key: key,
		ChunkSize: chunkSize, ExpectedSize: expected, InstanceID: s.cfg.InstanceID, Name: req.Name,
		ContentType: req.ContentType, ClientNodeID: req.ClientNodeId, Metadata: req.Metadata,
		CorrelationID: CorrelationID(ctx), Tenant: tenant, Document: doc, At: at,
		IfAbsent: req.IfAbsent,
	}
	if expected >= 0 {
		nu.Total = staging.TotalChunks(expected, chunkSize)
	}
	var created bool
	if fresh {
		// With its node index, which is written once the upload exists (a reader that
		// finds it finds the upload).
		created, err = s.store.CreateReserved(ctx, nu)
	} else {
		// An id bound by an attempt that may have died before creating it.
		created, err = s.store.Create(ctx, nu)
	}
	if err != nil {
		return nil, err
	}
	if created {
		s.cfg.Observe.uploadCreated()
		up := nu.Created() // what was just stored: no need to read it back
		if !fresh {
			if err := s.store.IndexNode(ctx, tenant, up.NodeID, id, up.Created, s.store.NodeTTL()); err != nil {
				return nil, err
			}
		}
		return toProto(up), nil
	}
	up, err := s.get(ctx, id)
	if err != nil {
		return nil, err
	}
	// The client_node_id names an upload already: the same request again gets it back;
	// another request under the same id is refused, not silently merged.
	if field := differingField(up, nu, req.ChunkSize, given, req.Key != ""); field != "" {
		return nil, &ConflictError{ClientNodeID: req.ClientNodeId, UploadID: id, Field: field}
	}
	// A create repeated after a crash before the node index was written writes it now
	// (the document's creation writes it again).
	if err := s.store.IndexNode(ctx, tenant, up.NodeID, id, up.Created, s.store.NodeTTL()); err != nil {
		return nil, err
	}
	return toProto(up), nil
}

// keyFor is the object key of a new upload: the client's, else the key template's, else
// the default; under the tenant's prefix.
func (s *UploadService) keyFor(tenant, id, nodeID string, req *chunkupv1.CreateUploadRequest) (string, error) {
	clientKey := req.Key
	if clientKey == "" && s.keys != nil {
		var err error
		clientKey, err = s.keys.Expand(KeyFields{UploadID: id, NodeID: nodeID, ConnectorID: req.ConnectorId, Name: req.Name, Tenant: tenant})
		if err != nil {
			return "", err
		}
	}
	key := KeyFor(tenant, s.cfg.KeyPrefix, id, clientKey, req.Name)
	if len(key) > maxKeyLen {
		return "", invalidf("key has %d bytes with the tenant's prefix; at most %d are allowed", len(key), maxKeyLen)
	}
	return key, nil
}

// keyFree checks, for a create with if_absent, that no object is at key: one there is an
// *ObjectExistsError, unless it is the object of the upload that clientNodeID names (a
// create repeated after its upload stored the object gets that upload back).
func (s *UploadService) keyFree(ctx context.Context, key, clientNodeID string) error {
	if s.objects == nil {
		return nil // no S3 here: the conditional write still refuses to replace it
	}
	info, err := s.objects.Head(ctx, s.cfg.Bucket, key)
	switch {
	case s3store.NotFound(err):
		return nil
	case err != nil:
		return err
	}
	if clientNodeID != "" && info.UploadID != "" {
		if up, err := s.get(ctx, info.UploadID); err == nil && up.ClientNodeID == clientNodeID {
			return nil
		}
	}
	return &ObjectExistsError{Key: key}
}

// differingField names the first parameter in which a repeated create differs from the
// upload its client_node_id names, or returns "".
func differingField(up *staging.Upload, nu staging.NewUpload, proposedChunkSize int64, nodeGiven, keyGiven bool) string {
	switch {
	case nodeGiven && up.NodeID != nu.NodeID:
		return "node_id"
	case keyGiven && up.Key != nu.Key:
		return "key"
	case up.ExpectedSize != nu.ExpectedSize:
		return "expected_size"
	case up.Name != nu.Name:
		return "name"
	case up.ContentType != nu.ContentType:
		return "content_type"
	case !maps.Equal(up.Metadata, nu.Metadata):
		return "metadata"
	case proposedChunkSize != 0 && up.ChunkSize != proposedChunkSize:
		return "chunk_size"
	case up.ConnectorID != nu.ConnectorID:
		return "connector_id"
	case up.ParentID != nu.ParentID:
		return "parent_id"
	case up.Path != nu.Path:
		return "path"
	case up.Drive != nu.Drive:
		return "drive"
	case !sameJSON(up.CustomMetadata, nu.CustomMetadata):
		return "custom_metadata"
	case up.IfAbsent != nu.IfAbsent:
		return "if_absent"
	case up.Key != nu.Key:
		// A key the server made, from fields that are all the same (its key template
		// changed since): the request cannot get that upload back.
		return "key"
	}
	return ""
}

// sameJSON reports whether two stored custom_metadata objects are equal as values
// (protojson's key order is not stable).
func sameJSON(a, b string) bool {
	if a == "" || b == "" {
		return a == b
	}
	var x, y structpb.Struct
	if protojson.Unmarshal([]byte(a), &x) != nil || protojson.Unmarshal([]byte(b), &y) != nil {
		return a == b
	}
	return proto.Equal(&x, &y)
}

// get reads an upload the caller's tenant owns: another tenant's upload does not exist
// for it (NOT_FOUND, the same as a missing one, so ids cannot be probed).
func (s *UploadService) get(ctx context.Context, id string) (*staging.Upload, error) {
	up, err := s.store.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if up.Tenant != TenantFrom(ctx) {
		return nil, staging.ErrNotFound
	}
	return up, nil
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

func validID(id string) error {
	if id == "" {
		return invalidf("upload_id is required: name the upload (CreateUpload returns its upload_id)")
	}
	if !ids.Valid(id) {
		return invalidf("upload_id %s is not a chunkup upload id (26 characters a-z, 2-7)", quote(id))
	}
	return nil
}

// GetUpload implements UploadService.GetUpload.
func (s *UploadService) GetUpload(ctx context.Context, req *chunkupv1.GetUploadRequest) (*chunkupv1.GetUploadResponse, error) {
	if err := validID(req.UploadId); err != nil {
		return nil, toStatus(req.UploadId, err)
	}
	up, err := s.get(ctx, req.UploadId)
	if err != nil {
		return nil, toStatus(req.UploadId, err)
	}
	return &chunkupv1.GetUploadResponse{Upload: toProto(up)}, nil
}

// AbortUpload implements UploadService.AbortUpload. Aborting an aborted upload is a
// no-op; a completed, failed or expired one cannot be aborted.
func (s *UploadService) AbortUpload(ctx context.Context, req *chunkupv1.AbortUploadRequest) (*chunkupv1.AbortUploadResponse, error) {
	id := req.UploadId
	if err := validID(id); err != nil {
		return nil, toStatus(id, err)
	}
	if len(req.Reason) > 1024 || !printable(req.Reason) {
		return nil, toStatus(id, invalidf("reason must be at most 1024 printable characters"))
	}
	reason := req.Reason
	if reason == "" {
		reason = "aborted by client"
	}
	if _, err := s.get(ctx, id); err != nil {
		return nil, toStatus(id, err)
	}
	err := s.ender.End(ctx, id, staging.StatusAborted, reason, "")
	var se *staging.StateError
	if errors.As(err, &se) {
		if se.Status != staging.StatusAborted {
			return nil, status.Errorf(codes.FailedPrecondition, "upload %s is %s and cannot be aborted", id, se.Status)
		}
		err = nil
	}
	if err != nil {
		return nil, toStatus(id, err)
	}
	up, err := s.get(ctx, id)
	if err != nil {
		return nil, toStatus(id, err)
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
		DetectedContentType: u.DetectedContentType, IfAbsent: u.IfAbsent,
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
