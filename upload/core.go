// Package upload is chunkup's upload core: everything an upload is, whatever door it
// comes through. It creates uploads (validates the request, plans the chunk size,
// makes the object key, binds client_node_id), takes chunks (checks each, writes it
// through to S3 or stages it in Redis, completes the upload at once when a chunk
// written through was its last), reads an upload's state for resume, aborts, and keeps
// the receive path's shared limits (streams and creates per tenant, the staged-bytes
// budget) and the append lock of doors that append bytes (the HTTP door).
//
// It knows no protocol: its inputs and outputs are plain Go values and the domain types
// of package staging, and its errors carry a kind (internal/fault) that each door maps
// to its own codes. The doors — gRPC (package server), HTTP (httpdoor, through
// httpdoor/coreadapter) — are adapters around it, as connect-go's protocol handlers are
// around one handler. Like tusd's core, it declares the stores it needs (Store, Ender,
// Objects, Through, Completer) and the assembly (package app) gives it chunkup's.
package upload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/chunkup/chunkup/internal/fault"
	"github.com/chunkup/chunkup/s3store"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/uploads"
)

// Store is the part of the uploads store the core uses.
type Store interface {
	Reserve(ctx context.Context, tenant, clientNodeID, id string, at time.Time) (string, error)
	Create(ctx context.Context, u staging.NewUpload) (bool, error)
	CreateReserved(ctx context.Context, u staging.NewUpload) (bool, error)
	IndexNode(ctx context.Context, tenant, nodeID, id string, created time.Time, ttl time.Duration) error
	NodeTTL() time.Duration
	Params(ctx context.Context, id string) (staging.Params, error)
	Stage(ctx context.Context, id string, n uint32, data []byte, crc uint32, last bool) (staging.StageResult, error)
	Get(ctx context.Context, id string) (*staging.Upload, error)
	StagedBytes(ctx context.Context) (int64, error)
	Now() time.Time
	StateTTL() time.Duration
	// The append lock and what only appending doors need (see Lock).
	LockAppend(ctx context.Context, id, tenant, token string, lease time.Duration) (bool, error)
	RenewAppend(ctx context.Context, id, token string, lease time.Duration) (bool, error)
	UnlockAppend(ctx context.Context, id, token string) error
	DeclareSize(ctx context.Context, id, tenant string, size int64) error
	SaveTail(ctx context.Context, id string, n uint32, data []byte) error
	ReadTail(ctx context.Context, id string, t staging.Tail) ([]byte, error)
	AppendLocked(ctx context.Context, id string) (bool, error)
	// Direct uploads (see Core.CompleteDirect).
	RecordedParts(ctx context.Context, id string, total uint32) ([]staging.Part, error)
	// Concatenation (see Core.ClaimPartials).
	ClaimPartial(ctx context.Context, id, tenant, final, from string) error
}

var _ Store = (*uploads.Store)(nil)

// Ender ends an upload and releases its resources (see cleanup.Ender).
type Ender interface {
	End(ctx context.Context, id string, status staging.Status, reason string, completer string) error
	// FailUnrecorded fails a direct upload unless a concurrent completion recorded its
	// parts (uploads.ErrPartsRecorded).
	FailUnrecorded(ctx context.Context, id, reason string) error
}

// Objects tells whether an object exists (for if_absent), and whose upload made it,
// lists and deletes the caller's objects, and reads partial uploads' objects.
type Objects interface {
	Head(ctx context.Context, bucket, key string) (s3store.ObjectInfo, error)
	List(ctx context.Context, bucket, prefix, after string, limit int) ([]s3store.ListedObject, bool, error)
	Delete(ctx context.Context, bucket, key string) error
	// Open reads a whole object (a partial upload's, for the final one).
	Open(ctx context.Context, bucket, key string) (io.ReadCloser, int64, error)
}

var _ Objects = (*s3store.Store)(nil)

// LocalWorker is the part of an in-process chunk worker the core hands chunks to (see
// chunkworker.Worker.Expect).
type LocalWorker interface {
	// Expect is called before chunk ref is staged. The function it returns is called
	// once staging is over: with the chunk's bytes and CRC-32C if they were staged, or
	// with nil if not (an error, or a duplicate). It must not block.
	Expect(ref staging.ChunkRef) func(data []byte, crc uint32)
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

// Metrics is what the core records (implemented by *metrics.Set).
type Metrics interface {
	// ChunkStaged records a chunk acknowledged after it was staged in Redis.
	ChunkStaged(duplicate bool)
	// ChunkWrittenThrough records a chunk acknowledged after it was written through
	// to S3 (or found recorded there meanwhile: duplicate).
	ChunkWrittenThrough(duplicate bool)
	// UploadCreated records an upload created.
	UploadCreated()
	// ChunkAcked records a chunk of size bytes a door appended, acknowledged d after
	// it was received (the gRPC door records its own).
	ChunkAcked(d time.Duration, size int64, duplicate bool)
}

// Deps are what the core is built on.
type Deps struct {
	// Store holds the uploads. Required.
	Store Store
	// Ender ends uploads (abort). Required.
	Ender Ender
	// Objects tells whether an object exists, for if_absent, and lists, describes and
	// deletes objects. Nil: the check is left to the conditional write at completion,
	// and the object calls are refused.
	Objects Objects
	// Local, when set, is a worker in this process that takes a staged chunk straight
	// from the bytes received, instead of reading them back from Redis (which keeps the
	// durable copy). Nil: every chunk goes through Redis.
	Local LocalWorker
	// Through, when set, is a worker in this process that writes chunks straight
	// through to S3 while it keeps pace (Config.Staging adaptive). Nil: every chunk is
	// staged.
	Through Through
	// Completer, when set, completes an upload at once in this process when a chunk
	// written through gave it its last part, so that the chunk's acknowledgement says
	// COMPLETED. Nil: the completer role finishes it as any other.
	Completer Completer
	// Metrics, when set, counts uploads and chunks.
	Metrics Metrics
	// Direct and DirectStore, when set, make direct uploads (CreateDirect): S3's side
	// (the multipart upload, signed part URLs, the parts' listing) and the records.
	// Nil: direct uploads are refused as unsupported.
	Direct      DirectS3
	DirectStore DirectStore
}

// Config configures the core. Zero values mean the documented defaults.
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
	// MaxStreamsPerTenant caps the chunk streams (gRPC upload streams, HTTP appends)
	// one tenant has open on this process; past it a stream is refused. Zero means 64;
	// negative, no cap.
	MaxStreamsPerTenant int
	// AssembliesPerTenant caps the final uploads (tus concatenation) one tenant
	// assembles at once on this process: each reads its partials back from S3 and
	// writes them again, costing the servers what an upload costs but the tenant no
	// bytes sent. A creation past it waits for a place, then is refused as busy. Zero
	// means 2.
	AssembliesPerTenant int
	// CreateRatePerTenant bounds the uploads one tenant may create per second on this
	// process (a token bucket with bursts of twice the rate), whichever door they come
	// through; past it a create is refused with a retry delay. Zero means
	// DefaultCreateRatePerTenant; negative, no bound. The number of uploads a tenant
	// may have in progress is staging.Config's MaxActivePerTenant.
	CreateRatePerTenant float64
	// StagedBytesBudget caps the bytes staged in Redis (measured as Redis' used_memory):
	// over it, chunks wait until workers drain Redis (see budgetGate). Zero means no
	// budget (app gives it a default from Redis' maxmemory).
	StagedBytesBudget int64
	// BudgetWait is how long a chunk waits for the staged-bytes budget before it is
	// refused. Zero means 30 s.
	BudgetWait time.Duration
	// Staging is how chunks reach S3: StagingAdaptive writes a chunk straight through
	// to S3 when this process's worker has a free upload slot and S3 keeps pace, and
	// stages it in Redis otherwise; StagingAlways stages every chunk. Zero means
	// StagingAdaptive. Write-through needs the worker role in the process (Deps.Through).
	Staging string
	// LockLease is the lease of an upload's append lock in Redis (see Lock): how long
	// an upload stays locked after its appending request's process died. Zero means
	// 6 s, within the 9 s tus-js-client's default retries span.
	LockLease time.Duration
	// DirectURLTTL is how long a direct upload's signed part URLs are valid. Zero
	// means DefaultDirectURLTTL; at most 7 days (SigV4's limit).
	DirectURLTTL time.Duration
	// DirectAbove offers a direct upload to a client that takes one when offered
	// (CreateUploadRequest.direct_if_offered) and declares at least this many bytes:
	// for an operator whose clients can reach the store, so that large files need not
	// pass through chunkup. Zero offers none; else at least MinPartSize (smaller files
	// are faster through chunkup, docs/performance.md).
	DirectAbove int64
	Logger      *slog.Logger
}

// Staging modes (Config.Staging).
const (
	StagingAdaptive = "adaptive"
	StagingAlways   = "always"
)

// Defaults.
const (
	DefaultMaxStreamsPerTenant = 64
	// DefaultCreateRatePerTenant is well above what one client uploading small files
	// creates (a few hundred per second) and far below what fills Redis in a minute.
	DefaultCreateRatePerTenant = 500
	// DefaultMaxActivePerTenant is the default of staging.Config.MaxActivePerTenant
	// that chunkup serve sets: about 14 MB of Redis per tenant for uploads abandoned
	// before they expire.
	DefaultMaxActivePerTenant = 10_000
	DefaultLockLease          = 6 * time.Second
)

// CheckDirectAbove checks the size from which direct uploads are offered (see
// Config.DirectAbove): 0 for none, else at least S3's smallest part.
func CheckDirectAbove(n int64) error {
	if n < 0 || n > 0 && n < MinPartSize {
		return errors.New("it must be at least 5 MiB, S3's smallest part, or 0 to offer no direct uploads")
	}
	return nil
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Bucket == "" {
		return errors.New("upload: a bucket is required")
	}
	if c.ChunkSize != 0 && (c.ChunkSize < MinPartSize || c.ChunkSize > MaxPartSize) {
		return errors.New("upload: chunk size must be between 5 MiB and 5 GiB")
	}
	if c.MaxChunkSize != 0 && (c.MaxChunkSize < MinPartSize || c.MaxChunkSize > MaxPartSize) {
		return errors.New("upload: max chunk size must be between 5 MiB and 5 GiB")
	}
	if c.ChunkSize != 0 && c.MaxChunkSize != 0 && c.ChunkSize > c.MaxChunkSize {
		return errors.New("upload: chunk size must not exceed max chunk size")
	}
	if c.MaxUploadSize < 0 || c.StagedBytesBudget < 0 || c.BudgetWait < 0 || c.AssembliesPerTenant < 0 {
		return errors.New("upload: limits must not be negative")
	}
	if c.StagedBytesBudget > 0 && c.StagedBytesBudget < 2*MinPartSize {
		return errors.New("upload: the staged-bytes budget must be at least 10 MiB (two minimal chunks)")
	}
	if c.DirectURLTTL < 0 || c.DirectURLTTL > 7*24*time.Hour || c.DirectURLTTL > 0 && c.DirectURLTTL < time.Second {
		return errors.New("upload: the direct URL TTL must be between 1s and 7 days (SigV4's limit)")
	}
	if err := CheckDirectAbove(c.DirectAbove); err != nil {
		return fmt.Errorf("upload: direct uploads offered above %d bytes: %w", c.DirectAbove, err)
	}
	if c.LockLease < 0 || c.LockLease > 0 && c.LockLease < 30*time.Millisecond {
		return errors.New("upload: the lock lease must be at least 30ms")
	}
	switch c.Staging {
	case "", StagingAdaptive, StagingAlways:
	default:
		return fmt.Errorf("upload: staging %q: use %s or %s", c.Staging, StagingAdaptive, StagingAlways)
	}
	if c.KeyTemplate != "" {
		if _, err := ParseKeyTemplate(c.KeyTemplate); err != nil {
			return err
		}
	}
	return nil
}

// WithDefaults returns c with its zero values replaced by the defaults.
func (c Config) WithDefaults() Config {
	if c.KeyPrefix == "" {
		c.KeyPrefix = "uploads"
	}
	if c.ChunkSize == 0 {
		c.ChunkSize = 8 << 20
	}
	if c.MaxChunkSize == 0 {
		c.MaxChunkSize = max(64<<20, c.ChunkSize)
	}
	if c.BudgetWait == 0 {
		c.BudgetWait = 30 * time.Second
	}
	if c.MaxStreamsPerTenant == 0 {
		c.MaxStreamsPerTenant = DefaultMaxStreamsPerTenant
	}
	if c.AssembliesPerTenant == 0 {
		c.AssembliesPerTenant = 2
	}
	if c.CreateRatePerTenant == 0 {
		c.CreateRatePerTenant = DefaultCreateRatePerTenant
	}
	if c.Staging == "" {
		c.Staging = StagingAdaptive
	}
	if c.LockLease == 0 {
		c.LockLease = DefaultLockLease
	}
	if c.DirectURLTTL == 0 {
		c.DirectURLTTL = DefaultDirectURLTTL
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// UploadLimit is the largest upload c accepts: MaxUploadSize, or else S3's 10,000
// parts of the largest chunk size.
func (c Config) UploadLimit() int64 {
	c = c.WithDefaults()
	if c.MaxUploadSize > 0 {
		return c.MaxUploadSize
	}
	return MaxParts * c.MaxChunkSize
}

// Core is the upload core.
type Core struct {
	cfg       Config
	store     Store
	ender     Ender
	objects   Objects
	local     LocalWorker
	through   Through
	completer Completer
	metrics   Metrics
	keys      *KeyTemplate // nil: default keys
	streams   *StreamCounter
	// finishing counts the streams that moved out of streams once they had nothing
	// more to carry (FinishingStream).
	finishing *StreamCounter
	// assemblies bounds each tenant's final uploads being assembled (nil: no bound).
	assemblies *assemblies
	creates    *TenantRateLimiter // nil: no bound
	budget     *budgetGate        // nil: no budget
	// direct and directStore make direct uploads; nil: refused.
	direct      DirectS3
	directStore DirectStore
}

// New returns the core.
func New(d Deps, cfg Config) (*Core, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Store == nil || d.Ender == nil {
		return nil, errors.New("upload: the core needs a store and an ender")
	}
	if (d.Direct == nil) != (d.DirectStore == nil) {
		return nil, errors.New("upload: direct uploads need both Direct and DirectStore")
	}
	cfg = cfg.WithDefaults()
	c := &Core{cfg: cfg, store: d.Store, ender: d.Ender, objects: d.Objects, local: d.Local,
		completer: d.Completer, metrics: d.Metrics, direct: d.Direct, directStore: d.DirectStore,
		streams:    NewStreamCounter("upload streams", cfg.MaxStreamsPerTenant),
		finishing:  NewStreamCounter("finishing upload streams", cfg.MaxStreamsPerTenant),
		assemblies: newAssemblies(cfg.AssembliesPerTenant)}
	if cfg.CreateRatePerTenant > 0 {
		c.creates = NewTenantRateLimiter(cfg.CreateRatePerTenant, int(max(1, 2*cfg.CreateRatePerTenant)))
	}
	if cfg.KeyTemplate != "" {
		c.keys, _ = ParseKeyTemplate(cfg.KeyTemplate) // checked by Validate
	}
	if cfg.Staging == StagingAdaptive {
		c.through = d.Through
	}
	if cfg.StagedBytesBudget > 0 {
		c.budget = &budgetGate{budget: cfg.StagedBytesBudget, maxWait: cfg.BudgetWait,
			every: 50 * time.Millisecond, measure: d.Store.StagedBytes}
	}
	return c, nil
}

// Config returns the core's configuration, its defaults filled in.
func (c *Core) Config() Config { return c.cfg }

// UploadLimit is the largest upload the core accepts.
func (c *Core) UploadLimit() int64 { return c.cfg.UploadLimit() }

// OpenStream counts a stream of chunks of the caller's tenant against
// Config.MaxStreamsPerTenant; release ends it. Every door opens one for each stream or
// request that carries chunks. Over the limit it is a *LimitError.
func (c *Core) OpenStream(ctx context.Context) (release func(), err error) {
	release, err = c.streams.Acquire(TenantFrom(ctx))
	return release, Explain("", err)
}

// FinishingStream moves a stream of the caller's tenant that OpenStream counted, and
// whose upload has all its parts, out of Config.MaxStreamsPerTenant into a count of
// finishing streams with the same cap, so that the tenant may open its next stream
// before the finished one has sent its last acknowledgement and ended. It reports false,
// and moves nothing, when the tenant has as many finishing streams already (streams
// whose client does not read their acknowledgements stay counted where they are).
// release, called with OpenStream's, ends the stream's count.
func (c *Core) FinishingStream(ctx context.Context, open func()) (release func(), moved bool) {
	r, err := c.finishing.Acquire(TenantFrom(ctx))
	if err != nil {
		return open, false
	}
	open()
	return r, true
}

// ReserveStaging waits until n bytes more may be staged in Redis under the
// staged-bytes budget, and reserves them (a door reserves before it reads a chunk, so
// that its protocol's flow control holds the client back); SettleStaging ends the
// reservation. Without a budget it returns at once.
func (c *Core) ReserveStaging(ctx context.Context, n int64) error {
	return Explain("", c.budget.reserve(ctx, n))
}

// SettleStaging ends a reservation of reserved bytes; staged is what the chunk cost
// Redis (Taken.RedisCost: 0 when it was not staged there).
func (c *Core) SettleStaging(reserved, staged int64) { c.budget.settle(reserved, staged) }

// Budgeted reports whether the core has a staged-bytes budget (ReserveStaging waits).
func (c *Core) Budgeted() bool { return c.budget != nil }

// Get reads an upload the caller's tenant owns: another tenant's upload does not exist
// for it (NotFound, the same as a missing one, so ids cannot be probed).
func (c *Core) Get(ctx context.Context, id string) (*staging.Upload, error) {
	if err := ValidID(id); err != nil {
		return nil, Explain(id, err)
	}
	up, err := c.get(ctx, id)
	return up, Explain(id, err)
}

func (c *Core) get(ctx context.Context, id string) (*staging.Upload, error) {
	up, err := c.store.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if up.Tenant != TenantFrom(ctx) {
		return nil, staging.ErrNotFound
	}
	return up, nil
}

// Expires is when upload u expires if nothing more happens to it (what the expiry goes
// by: its last activity and the state's TTL); zero once it is no longer ACTIVE.
func (c *Core) Expires(u *staging.Upload) time.Time {
	if u.Status != staging.StatusActive {
		return time.Time{}
	}
	return u.Updated.Add(c.store.StateTTL())
}

// Params reads upload id's immutable parameters, for the caller's tenant.
func (c *Core) Params(ctx context.Context, id string) (staging.Params, error) {
	if err := ValidID(id); err != nil {
		return staging.Params{}, Explain(id, err)
	}
	p, err := c.store.Params(ctx, id)
	if err != nil {
		return staging.Params{}, Explain(id, err)
	}
	if p.Tenant != TenantFrom(ctx) {
		return staging.Params{}, Explain(id, staging.ErrNotFound)
	}
	return p, nil
}

// Abort ends upload id ABORTED with reason ("" for "aborted by client"). Aborting an
// aborted upload is a no-op; a completed, failed or expired one is a Conflict (or
// Ended) error wrapping its *staging.StateError, and one being completed a Conflict.
func (c *Core) Abort(ctx context.Context, id, reason string) (*staging.Upload, error) {
	if err := ValidID(id); err != nil {
		return nil, Explain(id, err)
	}
	if len(reason) > 1024 || !Printable(reason) {
		return nil, Explain(id, invalidf("reason must be at most 1024 printable characters"))
	}
	if reason == "" {
		reason = "aborted by client"
	}
	if _, err := c.get(ctx, id); err != nil {
		return nil, Explain(id, err)
	}
	err := c.ender.End(ctx, id, staging.StatusAborted, reason, "")
	var se *staging.StateError
	if errors.As(err, &se) {
		if se.Status != staging.StatusAborted {
			return nil, fault.Wrap(se, se.Kind(), fmt.Sprintf("upload %s is %s and cannot be aborted", id, se.Status))
		}
		err = nil
	}
	if err != nil {
		return nil, Explain(id, err)
	}
	up, err := c.get(ctx, id)
	return up, Explain(id, err)
}
