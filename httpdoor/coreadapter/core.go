// Package coreadapter implements httpdoor.Core over chunkup's own stores, so that an
// upload through the HTTP door is a chunkup upload like any other: created, read,
// staged into and aborted through the upload service's own paths (server.UploadService:
// the same validation, limits, tenancy, staged-bytes budget and in-process worker as
// gRPC), its size declared and its append lock kept in Redis (staging/uploads), on any
// replica.
//
// It lives beside the interface it implements, but apart from package httpdoor, so that
// the protocol layer stays free of chunkup's stores (it is tested over an in-memory
// core) and this package is the only one that knows both sides. Its errors are the
// door's sentinels, wrapped around the words a gRPC client would read.
package coreadapter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/httpdoor"
	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/server"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/uploads"
)

// Service is the part of the upload service the adapter goes through (implemented by
// *server.UploadService).
type Service interface {
	Create(ctx context.Context, req *chunkupv1.CreateUploadRequest) (*staging.Upload, error)
	Lookup(ctx context.Context, id string) (*staging.Upload, error)
	OpenStream(ctx context.Context) (release func(), err error)
	StageChunk(ctx context.Context, id string, n uint32, data []byte, crc uint32, last bool) (duplicate bool, err error)
	Abort(ctx context.Context, id, reason string) error
	UploadLimit() int64
}

var _ Service = (*server.UploadService)(nil)

// Store is the part of the uploads store the adapter uses itself (implemented by
// *uploads.Store): the append lock and the declared size, which gRPC does not need.
type Store interface {
	LockAppend(ctx context.Context, id, tenant, token string, lease time.Duration) (bool, error)
	RenewAppend(ctx context.Context, id, token string, lease time.Duration) (bool, error)
	UnlockAppend(ctx context.Context, id, token string) error
	DeclareSize(ctx context.Context, id, tenant string, size int64) error
	SaveTail(ctx context.Context, id string, n uint32, data []byte) error
	ReadTail(ctx context.Context, id string, t staging.Tail) ([]byte, error)
	StateTTL() time.Duration
}

var _ Store = (*uploads.Store)(nil)

// Config tunes the adapter. The zero value is usable.
type Config struct {
	// LockLease is the lease of an upload's append lock in Redis. Its holder renews it
	// every third of the lease; a request that cannot renew it (Redis unreachable)
	// stops appending before it runs out, and one whose process died holds the upload
	// for at most this long. Zero means 15 s.
	LockLease time.Duration
	// Logger receives renewal failures. Nil means slog.Default().
	Logger *slog.Logger
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.LockLease < 0 || c.LockLease > 0 && c.LockLease < 30*time.Millisecond {
		return errors.New("coreadapter: the lock lease must be at least 30ms")
	}
	return nil
}

// Core is httpdoor.Core over chunkup's upload service and store.
type Core struct {
	svc   Service
	store Store
	cfg   Config
}

var _ httpdoor.Core = (*Core)(nil)

// New returns the adapter.
func New(svc Service, store Store, cfg Config) (*Core, error) {
	if svc == nil || store == nil {
		return nil, errors.New("coreadapter: a service and a store are required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.LockLease == 0 {
		cfg.LockLease = 15 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Core{svc: svc, store: store, cfg: cfg}, nil
}

// abortReason is the reason an upload aborted over HTTP records.
const abortReason = "terminated over HTTP (DELETE)"

// Create implements httpdoor.Core: CreateUpload's path, with tus metadata as the
// upload's metadata.
func (c *Core) Create(ctx context.Context, req httpdoor.CreateRequest) (httpdoor.Upload, error) {
	if limit := c.svc.UploadLimit(); req.Size > limit {
		return httpdoor.Upload{}, fmt.Errorf("%w: the upload has %d bytes; this server takes at most %d", httpdoor.ErrTooLarge, req.Size, limit)
	}
	cr := &chunkupv1.CreateUploadRequest{Name: req.Name, ContentType: req.ContentType, Metadata: req.Metadata}
	if req.Size >= 0 {
		cr.ExpectedSize = &req.Size
	}
	up, err := c.svc.Create(ctx, cr)
	if err != nil {
		return httpdoor.Upload{}, c.mapErr("", err)
	}
	return c.door(up), nil
}

// known refuses an id that cannot name a chunkup upload: a URL that names no upload is
// 404, as for an upload that does not exist, not a malformed request.
func known(id string) error {
	if !ids.Valid(id) {
		return fmt.Errorf("%w: no upload at this URL (chunkup's upload ids are 26 characters a-z, 2-7)", httpdoor.ErrNotFound)
	}
	return nil
}

// Get implements httpdoor.Core.
func (c *Core) Get(ctx context.Context, id string) (httpdoor.Upload, error) {
	if err := known(id); err != nil {
		return httpdoor.Upload{}, err
	}
	up, err := c.svc.Lookup(ctx, id)
	if err != nil {
		return httpdoor.Upload{}, c.mapErr(id, err)
	}
	return c.door(up), nil
}

// door maps an upload as stored onto the door's view of it.
func (c *Core) door(u *staging.Upload) httpdoor.Upload {
	up := httpdoor.Upload{
		ID: u.ID, State: httpdoor.State(u.Status), ChunkSize: u.ChunkSize, Size: u.ExpectedSize,
		Key: u.Key, Name: u.Name, ContentType: u.ContentType, Metadata: u.Metadata, Reason: u.Error,
		Tail: httpdoor.Tail{N: u.Tail.N, Size: u.Tail.Size, CRC32C: u.Tail.CRC32C},
	}
	for _, ch := range u.Chunks {
		up.Chunks = append(up.Chunks, httpdoor.Chunk{N: ch.N, Size: ch.Size, CRC32C: ch.CRC32C, Stored: ch.Stored})
		if up.Size < 0 && u.Total > 0 && ch.N == u.Total {
			// An upload of unknown size whose last chunk has arrived: the chunks say it.
			up.Size = int64(u.Total-1)*u.ChunkSize + ch.Size
		}
	}
	switch u.Status {
	case staging.StatusActive:
		// What cleanup's expiry goes by: the last activity and the state TTL.
		up.Expires = u.Updated.Add(c.store.StateTTL())
	case staging.StatusFailed, staging.StatusAborted, staging.StatusExpired:
		// Ending an upload is its last update.
		up.Ended = u.Updated
	}
	return up
}

// DeclareSize implements httpdoor.Core with the store's declare-size script.
func (c *Core) DeclareSize(ctx context.Context, id string, size int64) error {
	if err := known(id); err != nil {
		return err
	}
	up, err := c.svc.Lookup(ctx, id)
	if err != nil {
		return c.mapErr(id, err)
	}
	if limit := c.svc.UploadLimit(); size > limit {
		return fmt.Errorf("%w: the upload has %d bytes; this server takes at most %d", httpdoor.ErrTooLarge, size, limit)
	}
	if n := staging.TotalChunks(size, up.ChunkSize); n > server.MaxParts {
		return fmt.Errorf("%w: %d bytes in chunks of %d make %d chunks; S3 takes at most %d parts (create the upload with its size, so that its chunk size fits)",
			httpdoor.ErrTooLarge, size, up.ChunkSize, n, server.MaxParts)
	}
	var se *uploads.SizeError
	err = c.store.DeclareSize(ctx, id, server.TenantFrom(ctx), size)
	if err != nil && errors.Is(context.Cause(ctx), uploads.ErrLockLost) {
		err = uploads.ErrLockLost
	}
	if errors.As(err, &se) {
		return fmt.Errorf("%w: upload %s: %v", httpdoor.ErrConflict, id, se)
	}
	return c.mapErr(id, err)
}

// Stage implements httpdoor.Core: one chunk of UploadChunk.
func (c *Core) Stage(ctx context.Context, id string, n uint32, data []byte, crc32c uint32, last bool) error {
	if err := known(id); err != nil {
		return err
	}
	_, err := c.svc.StageChunk(ctx, id, n, data, crc32c, last)
	if err != nil && errors.Is(context.Cause(ctx), uploads.ErrLockLost) {
		// The lock was found lost while (or before) staging: whatever the call says,
		// this request must stop.
		err = uploads.ErrLockLost
	}
	var le *server.LimitError
	var re *server.RangeError
	if errors.As(err, &le) || errors.As(err, &re) {
		// Here a limit can only be --max-upload-size (the stream limit is taken by
		// Lock), and a chunk out of range only S3's part limit (the door never sends a
		// chunk beyond a known size): the upload is too large, which a retry cannot fix.
		return fmt.Errorf("%w: %s", httpdoor.ErrTooLarge, server.Message(id, err))
	}
	return c.mapErr(id, err)
}

// SaveTail implements httpdoor.Core with the store's tail, fenced by the append lock.
func (c *Core) SaveTail(ctx context.Context, id string, n uint32, data []byte) error {
	if err := known(id); err != nil {
		return err
	}
	err := c.store.SaveTail(ctx, id, n, data)
	if err != nil && errors.Is(context.Cause(ctx), uploads.ErrLockLost) {
		err = uploads.ErrLockLost
	}
	if errors.Is(err, staging.ErrChunkBusy) {
		return fmt.Errorf("%w: upload %s: %v", httpdoor.ErrConflict, id, err)
	}
	return c.mapErr(id, err)
}

// ReadTail implements httpdoor.Core.
func (c *Core) ReadTail(ctx context.Context, id string, t httpdoor.Tail) ([]byte, error) {
	if err := known(id); err != nil {
		return nil, err
	}
	data, err := c.store.ReadTail(ctx, id, staging.Tail{N: t.N, Size: t.Size, CRC32C: t.CRC32C})
	if errors.Is(err, staging.ErrChunkMissing) {
		return nil, fmt.Errorf("%w: upload %s: its bytes after the last whole chunk changed since this request read the offset; send HEAD and resume", httpdoor.ErrConflict, id)
	}
	return data, c.mapErr(id, err)
}

// Abort implements httpdoor.Core: AbortUpload's path.
func (c *Core) Abort(ctx context.Context, id string) error {
	if err := known(id); err != nil {
		return err
	}
	err := c.svc.Abort(ctx, id, abortReason)
	var st *staging.StateError
	switch {
	case errors.As(err, &st) && st.Status == staging.StatusAborted:
		return nil
	case errors.As(err, &st) && st.Status == staging.StatusCompleted:
		return fmt.Errorf("%w: upload %s is COMPLETED and cannot be aborted", httpdoor.ErrConflict, id)
	case errors.Is(err, staging.ErrCompleting):
		return fmt.Errorf("%w: upload %s is being completed and can no longer be aborted", httpdoor.ErrConflict, id)
	}
	return c.mapErr(id, err)
}

// errLockReleased ends a lock's context when its request is done with it.
var errLockReleased = errors.New("append lock released")

// Lock implements httpdoor.Core with a Redis lease (see uploads.Store.LockAppend) that
// a goroutine renews every third of the lease. The held context is cancelled when the
// lock is lost: a renewal finds another token, or cannot reach Redis in time to renew
// before the lease runs out. It also carries the lock's fence, so that Stage and
// DeclareSize refuse, in Redis, to write for a request that lost it. Each lock also
// counts as one of the tenant's streams (--max-streams-per-tenant). Another request
// holding the lock is ErrLocked at once: tus clients retry 423 and IETF ones 409.
func (c *Core) Lock(ctx context.Context, id string) (context.Context, func(), error) {
	if err := known(id); err != nil {
		return nil, nil, err
	}
	release, err := c.svc.OpenStream(ctx)
	if err != nil {
		return nil, nil, c.mapErr(id, err)
	}
	token := ids.NewToken()
	lease := c.cfg.LockLease
	ok, err := c.store.LockAppend(ctx, id, server.TenantFrom(ctx), token, lease)
	if err != nil || !ok {
		release()
		if err == nil {
			// The sentinel says what is wrong; this adds only which upload and what to do.
			return nil, nil, fmt.Errorf("%w (upload %s); retry when it is done", httpdoor.ErrLocked, id)
		}
		return nil, nil, c.mapErr(id, err)
	}
	taken := time.Now()
	held, cancel := context.WithCancelCause(uploads.WithAppendLock(ctx, id, token))
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		c.keep(held, cancel, id, token, taken)
	}()
	var once sync.Once
	unlock := func() {
		once.Do(func() {
			cancel(errLockReleased)
			<-renewed
			uctx, done := context.WithTimeout(context.WithoutCancel(ctx), lease/3)
			defer done()
			// A release that fails leaves the lease to run out: the upload waits at most
			// LockLease for its next request.
			if err := c.store.UnlockAppend(uctx, id, token); err != nil {
				c.cfg.Logger.Warn("release an upload's append lock", "upload", id, "err", err)
			}
			release()
		})
	}
	return held, unlock, nil
}

// keep renews the lock every third of its lease until held ends, and cancels held when
// the lock is lost.
func (c *Core) keep(held context.Context, cancel context.CancelCauseFunc, id, token string, since time.Time) {
	lease := c.cfg.LockLease
	t := time.NewTicker(lease / 3)
	defer t.Stop()
	for {
		select {
		case <-held.Done():
			return
		case <-t.C:
		}
		at := time.Now()
		rctx, done := context.WithTimeout(held, lease/3)
		ok, err := c.store.RenewAppend(rctx, id, token, lease)
		done()
		switch {
		case held.Err() != nil:
			return
		case err == nil && ok:
			since = at
		case err == nil:
			cancel(fmt.Errorf("%w: another request holds it now", uploads.ErrLockLost))
			return
		case time.Since(since)+lease/3 >= lease:
			// The next renewal would come after the lease ran out: another request may
			// take the lock before it, so this one stops now.
			c.cfg.Logger.Warn("an HTTP append gives up the upload's lock it cannot renew", "upload", id, "err", err)
			cancel(fmt.Errorf("%w: it could not be renewed: %v", uploads.ErrLockLost, err))
			return
		}
	}
}

// mapErr turns an error of the service or the store into the door's sentinel, wrapped
// around the message a gRPC client would read (see docs/http-uploads.md).
func (c *Core) mapErr(id string, err error) error {
	if err == nil {
		return nil
	}
	var (
		st   *staging.StateError
		inv  *server.InvalidError
		rng  *server.RangeError
		sum  *server.ChecksumError
		oor  *staging.OutOfRangeError
		last *staging.LastChunkError
		rec  *staging.PartRecordedError
	)
	var sentinel error
	switch {
	case errors.Is(err, uploads.ErrLockLost):
		sentinel = httpdoor.ErrLocked
		return fmt.Errorf("%w: upload %s: this request lost the upload's append lock; nothing more was stored", sentinel, id)
	case errors.Is(err, staging.ErrNotFound):
		sentinel = httpdoor.ErrNotFound
	case errors.As(err, &st):
		sentinel = httpdoor.ErrConflict
		if st.Status == staging.StatusFailed || st.Status == staging.StatusAborted || st.Status == staging.StatusExpired {
			sentinel = httpdoor.ErrGone
		}
	case errors.As(err, &inv), errors.As(err, &rng), errors.As(err, &sum), errors.As(err, &oor), errors.As(err, &last):
		sentinel = httpdoor.ErrInvalid
	case errors.As(err, &rec), errors.Is(err, staging.ErrCompleting):
		sentinel = httpdoor.ErrConflict
	case errors.As(err, new(*server.CapError)), errors.Is(err, staging.ErrTooManyUploads):
		sentinel = httpdoor.ErrRateLimited
	case errors.Is(err, staging.ErrChunkBusy), errors.Is(err, staging.ErrNotReplicated), errors.Is(err, staging.ErrUnavailable),
		errors.Is(err, staging.ErrFull), errors.As(err, new(*server.BudgetError)), errors.As(err, new(*server.LimitError)):
		sentinel = httpdoor.ErrUnavailable
	case errors.Is(err, context.DeadlineExceeded):
		// A call that outlasted the door's CoreTimeout (staging waits out backpressure
		// within it): worth a retry.
		return fmt.Errorf("%w: upload %s: the server is busy (%v); retry", httpdoor.ErrUnavailable, id, err)
	default:
		return err // a 500, logged by the door
	}
	return fmt.Errorf("%w: %s", sentinel, server.Message(id, err))
}
