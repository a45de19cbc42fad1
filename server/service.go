// Package server holds chunkup's gRPC services. It validates every request before it
// touches state, stages chunks through the staging store, and is the one place where
// domain errors become gRPC statuses (see toStatus).
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
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
	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/outbox"
	"github.com/chunkup/chunkup/staging/uploads"
)

// Store is the part of the uploads store the service uses.
type Store interface {
	ClaimClientNodeID(ctx context.Context, tenant, clientNodeID, id string) (string, error)
	Create(ctx context.Context, u uploads.NewUpload) (bool, error)
	IndexNode(ctx context.Context, tenant, nodeID, id string, created time.Time, ttl time.Duration) error
	NodeTTL() time.Duration
	Params(ctx context.Context, id string) (uploads.Params, error)
	Stage(ctx context.Context, id string, n uint32, data []byte, crc uint32, last bool) (uploads.StageResult, error)
	Get(ctx context.Context, id string) (*uploads.Upload, error)
	InProgress(ctx context.Context, tenant, cursor string, limit int) ([]*uploads.Upload, string, error)
	StagedBytes(ctx context.Context) (int64, error)
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
	// MaxStreamsPerTenant caps the upload streams one tenant has open on this process.
	// Zero means no cap.
	MaxStreamsPerTenant int
	// StagedBytesBudget caps the bytes staged in Redis (measured as Redis' used_memory):
	// over it, streams stop reading chunks until workers drain Redis. Zero means no budget.
	StagedBytesBudget int64
	// BudgetWait is how long a stream waits for the budget before it fails with
	// RESOURCE_EXHAUSTED. Zero means 30 s.
	BudgetWait time.Duration
	Logger     *slog.Logger
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
}

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
	if c.MaxUploadSize < 0 || c.MaxStreamsPerTenant < 0 || c.StagedBytesBudget < 0 || c.BudgetWait < 0 {
		return errors.New("server: limits must not be negative")
	}
	if c.StagedBytesBudget > 0 && c.StagedBytesBudget < 2*MinPartSize {
		return errors.New("server: the staged-bytes budget must be at least 10 MiB (two minimal chunks)")
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
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// MaxMessageSize is the largest gRPC message the server must accept for cfg: one chunk
// plus framing.
func (c Config) MaxMessageSize() int {
	c.setDefaults()
	return int(c.MaxChunkSize) + 1<<20
}

// UploadService implements chunkupv1.UploadServiceServer.
type UploadService struct {
	chunkupv1.UnimplementedUploadServiceServer
	cfg      Config
	store    Store
	progress Progress
	ender    Ender
	local    LocalWorker
	objects  Objects
	keys     *KeyTemplate // nil: default keys
	streams  *streamCounter
	watches  *streamCounter
	budget   *budgetGate
	draining chan struct{}
	drain    sync.Once
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
		watches: &streamCounter{what: "watches", flag: "--max-watches-per-tenant", limit: cfg.MaxWatchesPerTenant, open: map[string]int{}}}
	if cfg.KeyTemplate != "" {
		s.keys, _ = ParseKeyTemplate(cfg.KeyTemplate) // checked by Validate
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

func (s *UploadService) create(ctx context.Context, req *chunkupv1.CreateUploadRequest) (*chunkupv1.Upload, error) {
	if err := ValidateCreate(req); err != nil {
		return nil, err
	}
	expected := int64(-1)
	if req.ExpectedSize != nil {
		expected = *req.ExpectedSize
	}
	if s.cfg.MaxUploadSize > 0 && expected > s.cfg.MaxUploadSize {
		return nil, invalidf("expected_size %d exceeds this server's maximum upload size of %d bytes (--max-upload-size)", expected, s.cfg.MaxUploadSize)
	}
	var chunkSize int64
	var err error
	if req.ChunkSize > 0 {
		chunkSize, err = AcceptChunkSize(req.ChunkSize, expected, s.cfg.MaxChunkSize)
	} else {
		chunkSize, err = ChunkSizeFor(expected, s.cfg.ChunkSize, s.cfg.MaxChunkSize)
	}
	if err != nil {
		return nil, err
	}
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
	if req.ClientNodeId != "" {
		bound, err := s.store.ClaimClientNodeID(ctx, tenant, req.ClientNodeId, id)
		if err != nil {
			return nil, err
		}
		if bound != id {
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
	}
	doc := uploads.Document{NodeID: nodeID, ConnectorID: req.ConnectorId, ParentID: req.ParentId, Path: req.Path, Drive: req.Drive}
	if req.CustomMetadata != nil {
		b, err := protojson.Marshal(req.CustomMetadata) // checked by ValidateCreate
		if err != nil {
			return nil, err
		}
		doc.CustomMetadata = string(b)
	}
	nu := uploads.NewUpload{
		ID: id, Bucket: s.cfg.Bucket, Key: key,
		ChunkSize: chunkSize, ExpectedSize: expected, InstanceID: s.cfg.InstanceID, Name: req.Name,
		ContentType: req.ContentType, ClientNodeID: req.ClientNodeId, Metadata: req.Metadata,
		CorrelationID: CorrelationID(ctx), Tenant: tenant, Document: doc,
	}
	if expected >= 0 {
		nu.Total = staging.TotalChunks(expected, chunkSize)
	}
	created, err := s.store.Create(ctx, nu)
	if err != nil {
		return nil, err
	}
	up, err := s.get(ctx, id)
	if err != nil {
		return nil, err
	}
	if !created {
		// The client_node_id names an upload already: the same request again gets it
		// back; another request under the same id is refused, not silently merged.
		if field := differingField(up, nu, req.ChunkSize, given); field != "" {
			return nil, &ConflictError{ClientNodeID: req.ClientNodeId, UploadID: id, Field: field}
		}
	} else {
		s.cfg.Observe.uploadCreated()
	}
	// The node index is written once the upload exists (a reader that finds it finds
	// the upload); a create repeated after a crash right here writes it then, and the
	// document's creation writes it again.
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

// differingField names the first parameter in which a repeated create differs from the
// upload its client_node_id names, or returns "".
func differingField(up *uploads.Upload, nu uploads.NewUpload, proposedChunkSize int64, nodeGiven bool) string {
	switch {
	case nodeGiven && up.NodeID != nu.NodeID:
		return "node_id"
	case up.Key != nu.Key:
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
func (s *UploadService) get(ctx context.Context, id string) (*uploads.Upload, error) {
	up, err := s.store.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if up.Tenant != TenantFrom(ctx) {
		return nil, staging.ErrNotFound
	}
	return up, nil
}

// UploadChunk implements UploadService.UploadChunk. Each chunk is validated against
// the upload's parameters, checked against its CRC32C, staged, and acknowledged. The
// first invalid chunk ends the stream with its status; chunks acknowledged before it
// stay.
func (s *UploadService) UploadChunk(stream chunkupv1.UploadService_UploadChunkServer) error {
	ctx := stream.Context()
	release, err := s.streams.acquire(TenantFrom(ctx))
	if err != nil {
		return toStatus("", err)
	}
	defer release()

	// The receiver reads the next message while the current one is staged, but only
	// when the staged-bytes budget allows: while it does not, the stream is not read and
	// gRPC's flow control holds the client back.
	msgs := make(chan *chunkupv1.UploadChunkRequest)
	recvErr := make(chan error, 1)
	go func() {
		for {
			if err := s.budget.wait(ctx); err != nil {
				recvErr <- err
				return
			}
			req, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			s.budget.received(int64(len(req.Data)))
			select {
			case msgs <- req:
			case <-ctx.Done():
				s.budget.done(int64(len(req.Data)), false)
				return
			}
		}
	}()

	params := map[string]uploads.Params{} // immutable per upload, read once per stream
	first := true
	created := "" // the upload a create request on this stream made
	for {
		var req *chunkupv1.UploadChunkRequest
		select {
		case <-s.draining:
			return errDraining
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return toStatus("", err)
		case req = <-msgs:
		}
		switch {
		case req.Create != nil:
			if err := s.createOnStream(ctx, stream, req, first); err != nil {
				s.budget.done(int64(len(req.Data)), false)
				return err
			}
			created = req.UploadId
			first = false
			if req.ChunkNumber == 0 && len(req.Data) == 0 {
				continue
			}
		case created != "" && req.UploadId == "":
			req.UploadId = created
		case created != "" && req.UploadId != created:
			s.budget.done(int64(len(req.Data)), false)
			return toStatus(created, invalidf("this stream created upload %s and carries only its chunks; send chunks of upload %s on a stream of their own", created, quote(req.UploadId)))
		}
		first = false
		resp, err := s.stage(ctx, req, params)
		s.budget.done(int64(len(req.Data)), err == nil && !resp.Duplicate)
		if err != nil {
			return toStatus(req.UploadId, err)
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// createOnStream handles a create request on a stream: it must be the stream's first
// message; the response carries the new upload, and req then names it.
func (s *UploadService) createOnStream(ctx context.Context, stream chunkupv1.UploadService_UploadChunkServer, req *chunkupv1.UploadChunkRequest, first bool) error {
	if !first {
		return status.Error(codes.InvalidArgument, "create is allowed only in the first message of a stream")
	}
	if req.UploadId != "" {
		return status.Error(codes.InvalidArgument, "a message with create must not name an upload_id")
	}
	up, err := s.create(ctx, req.Create)
	if err != nil {
		return toStatus("", err)
	}
	if err := stream.Send(&chunkupv1.UploadChunkResponse{UploadId: up.UploadId, Upload: up}); err != nil {
		return err
	}
	req.UploadId = up.UploadId
	return nil
}

func (s *UploadService) stage(ctx context.Context, req *chunkupv1.UploadChunkRequest, params map[string]uploads.Params) (*chunkupv1.UploadChunkResponse, error) {
	id := req.UploadId
	if err := validID(id); err != nil {
		return nil, err
	}
	p, ok := params[id]
	if !ok {
		var err error
		if p, err = s.store.Params(ctx, id); err != nil {
			return nil, err
		}
		if p.Tenant != TenantFrom(ctx) {
			return nil, staging.ErrNotFound
		}
		if len(params) > 64 {
			clear(params)
		}
		params[id] = p
	}
	n := req.ChunkNumber
	if err := ValidateChunk(p, n, int64(len(req.Data)), req.IsLast); err != nil {
		return nil, err
	}
	if max := s.cfg.MaxUploadSize; max > 0 && n > 0 && int64(n-1)*p.ChunkSize+int64(len(req.Data)) > max {
		return nil, &LimitError{Msg: fmt.Sprintf("chunk %d takes the upload past this server's maximum upload size of %d bytes (--max-upload-size)", n, max)}
	}
	sum := crc.Checksum(req.Data)
	if req.Crc32C != nil && *req.Crc32C != sum {
		return nil, &ChecksumError{N: n, Got: sum, Want: *req.Crc32C}
	}
	last := req.IsLast || (p.Total > 0 && n == p.Total)
	var handOver func([]byte, uint32)
	if s.local != nil {
		handOver = s.local.Expect(staging.ChunkRef{UploadID: id, N: n})
	}
	res, err := s.store.Stage(ctx, id, n, req.Data, sum, last)
	if handOver != nil {
		if err == nil && !res.Duplicate {
			handOver(req.Data, sum) // the stream lets go of req after this
		} else {
			handOver(nil, 0)
		}
	}
	if err != nil {
		return nil, err
	}
	s.cfg.Observe.chunkStaged(res.Duplicate)
	return &chunkupv1.UploadChunkResponse{UploadId: id, ChunkNumber: n, Crc32C: sum, Duplicate: res.Duplicate}, nil
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
		return invalidf("upload_id is required: create an upload first, or send a create request in the first message")
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

func toProto(u *uploads.Upload) *chunkupv1.Upload {
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
		DetectedContentType: u.DetectedContentType,
	}
}

func receivedChunks(cs []uploads.ChunkInfo) []*chunkupv1.ReceivedChunk {
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
