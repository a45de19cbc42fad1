// Package coreadapter implements httpdoor.Core over chunkup's upload core (package
// upload), so that an upload through the HTTP door is a chunkup upload like any other:
// created, read, staged into, locked for appends and aborted through the core, with the
// same validation, limits, tenancy, staged-bytes budget and in-process worker as gRPC,
// on any replica.
//
// It is only a translation: the door's types to the core's and back, and the few
// places where the door's protocols read an error differently (a chunk number beyond
// S3's parts is an upload too large). It lives apart from package httpdoor, so that the
// protocol layer stays free of chunkup's stores (it is tested over an in-memory core).
package coreadapter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/chunkup/chunkup/httpdoor"
	"github.com/chunkup/chunkup/internal/fault"
	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/upload"
)

// UploadCore is the part of the upload core the adapter goes through (implemented by
// *upload.Core).
type UploadCore interface {
	Create(ctx context.Context, req *upload.CreateRequest) (*staging.Upload, error)
	Get(ctx context.Context, id string) (*staging.Upload, error)
	Expires(u *staging.Upload) (at time.Time)
	Stage(ctx context.Context, id string, n uint32, data []byte, crc uint32, last bool) (duplicate bool, err error)
	DeclareSize(ctx context.Context, id string, size int64) error
	SaveTail(ctx context.Context, id string, n uint32, data []byte) error
	ReadTail(ctx context.Context, id string, t staging.Tail) ([]byte, error)
	Abort(ctx context.Context, id, reason string) (*staging.Upload, error)
	Lock(ctx context.Context, id string) (held context.Context, unlock func(), err error)
	OpenStream(ctx context.Context) (release func(), err error)
	LockOpened(ctx context.Context, id string, release func()) (held context.Context, unlock func(), err error)
	UploadLimit() int64
	Partials(ctx context.Context, ids []string) ([]*staging.Upload, int64, error)
	ClaimPartials(ctx context.Context, final string, ids []string, ups []*staging.Upload) error
	AssemblySlot(ctx context.Context) (func(), error)
	OpenPartials(ctx context.Context, ups []*staging.Upload) io.ReadCloser
}

var _ UploadCore = (*upload.Core)(nil)

// Core is httpdoor.Core over chunkup's upload core.
type Core struct{ core UploadCore }

var _ httpdoor.Core = (*Core)(nil)

// New returns the adapter.
func New(core UploadCore) (*Core, error) {
	if core == nil {
		return nil, errors.New("coreadapter: the upload core is required")
	}
	return &Core{core: core}, nil
}

// abortReason is the reason an upload aborted over HTTP records.
const abortReason = "terminated over HTTP (DELETE)"

// Create implements httpdoor.Core, with tus metadata as the upload's metadata.
func (c *Core) Create(ctx context.Context, req httpdoor.CreateRequest) (httpdoor.Upload, error) {
	if limit := c.core.UploadLimit(); req.Size > limit {
		return httpdoor.Upload{}, fmt.Errorf("%w: the upload has %d bytes; this server takes at most %d", httpdoor.ErrTooLarge, req.Size, limit)
	}
	up, err := c.core.Create(ctx, &upload.CreateRequest{Size: req.Size, Name: req.Name, ContentType: req.ContentType,
		Metadata: req.Metadata, Partial: req.Partial, Concat: req.Concat})
	if err != nil {
		return httpdoor.Upload{}, busy(err)
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
	up, err := c.core.Get(ctx, id)
	if err != nil {
		return httpdoor.Upload{}, busy(err)
	}
	return c.door(up), nil
}

// door maps an upload as stored onto the door's view of it.
func (c *Core) door(u *staging.Upload) httpdoor.Upload {
	up := httpdoor.Upload{
		ID: u.ID, State: httpdoor.State(u.Status), ChunkSize: u.ChunkSize, Size: u.ExpectedSize,
		Key: u.Key, Name: u.Name, ContentType: u.ContentType, Metadata: u.Metadata, Reason: u.Error,
		Tail: httpdoor.Tail{N: u.Tail.N, Size: u.Tail.Size, CRC32C: u.Tail.CRC32C}, Expires: c.core.Expires(u),
		Partial: u.Partial, Concat: u.Concat,
	}
	var sum int64
	for _, ch := range u.Chunks {
		up.Chunks = append(up.Chunks, httpdoor.Chunk{N: ch.N, Size: ch.Size, CRC32C: ch.CRC32C, Stored: ch.Stored})
		sum += ch.Size
		if up.Size < 0 && u.Total > 0 && ch.N == u.Total && !u.Direct {
			// An upload of unknown size whose last chunk has arrived: the chunks say it.
			up.Size = int64(u.Total-1)*u.ChunkSize + ch.Size
		}
	}
	switch {
	case u.Status == staging.StatusCompleted:
		up.Size = u.Size // the object's
	case up.Size < 0 && u.Direct && u.Total > 0 && uint32(len(u.Chunks)) == u.Total:
		// A direct upload's parts are the client's size, not the chunk size.
		up.Size = sum
	}
	switch u.Status {
	case staging.StatusFailed, staging.StatusAborted, staging.StatusExpired:
		// Ending an upload is its last update.
		up.Ended = u.Updated
	}
	return up
}

// DeclareSize implements httpdoor.Core.
func (c *Core) DeclareSize(ctx context.Context, id string, size int64) error {
	if err := known(id); err != nil {
		return err
	}
	return busy(c.core.DeclareSize(ctx, id, size))
}

// Stage implements httpdoor.Core: one chunk, staged under the append lock.
func (c *Core) Stage(ctx context.Context, id string, n uint32, data []byte, crc32c uint32, last bool) error {
	if err := known(id); err != nil {
		return err
	}
	_, err := c.core.Stage(ctx, id, n, data, crc32c, last)
	if fault.Has(err, fault.OutOfRange) {
		// The door never sends a chunk beyond a known size: a chunk out of range is
		// beyond S3's parts, so the upload is too large, which a retry cannot fix.
		return fault.Wrap(err, fault.TooLarge, err.Error())
	}
	return busy(err)
}

// SaveTail implements httpdoor.Core.
func (c *Core) SaveTail(ctx context.Context, id string, n uint32, data []byte) error {
	if err := known(id); err != nil {
		return err
	}
	return busy(c.core.SaveTail(ctx, id, n, data))
}

// ReadTail implements httpdoor.Core.
func (c *Core) ReadTail(ctx context.Context, id string, t httpdoor.Tail) ([]byte, error) {
	if err := known(id); err != nil {
		return nil, err
	}
	data, err := c.core.ReadTail(ctx, id, staging.Tail{N: t.N, Size: t.Size, CRC32C: t.CRC32C})
	return data, busy(err)
}

// Abort implements httpdoor.Core.
func (c *Core) Abort(ctx context.Context, id string) error {
	if err := known(id); err != nil {
		return err
	}
	_, err := c.core.Abort(ctx, id, abortReason)
	return busy(err)
}

// Lock implements httpdoor.Core with the core's append lock (see upload.Core.Lock).
// Another request holding it is a Locked error at once: tus clients retry 423 and IETF
// ones 409.
func (c *Core) Lock(ctx context.Context, id string) (context.Context, func(), error) {
	if err := known(id); err != nil {
		return nil, nil, err
	}
	held, unlock, err := c.core.Lock(ctx, id)
	return held, unlock, busy(err)
}

// OpenStream implements httpdoor.Core with the core's count of a tenant's streams.
func (c *Core) OpenStream(ctx context.Context) (func(), error) {
	release, err := c.core.OpenStream(ctx)
	return release, busy(err)
}

// LockOpened implements httpdoor.Core with the core's append lock on a counted stream.
func (c *Core) LockOpened(ctx context.Context, id string, release func()) (context.Context, func(), error) {
	if err := known(id); err != nil {
		release()
		return nil, nil, err
	}
	held, unlock, err := c.core.LockOpened(ctx, id, release)
	return held, unlock, busy(err)
}

// Concat implements httpdoor.Core with the core's partial uploads (upload.Core.Partials).
func (c *Core) Concat(ctx context.Context, ids []string) (httpdoor.Partials, error) {
	ups, size, err := c.core.Partials(ctx, ids)
	if err != nil {
		return nil, finalExists(busy(err))
	}
	release, err := c.core.AssemblySlot(ctx)
	if err != nil {
		return nil, busy(err)
	}
	return &partials{core: c.core, ids: ids, ups: ups, size: size, release: release}, nil
}

// finalExists is err, but the core's *upload.FinalExistsError is the door's.
func finalExists(err error) error {
	var fe *upload.FinalExistsError
	if errors.As(err, &fe) {
		return &httpdoor.FinalExistsError{ID: fe.ID}
	}
	return err
}

// partials are a final upload's partial uploads, as the core checked them.
type partials struct {
	core    UploadCore
	ids     []string
	ups     []*staging.Upload
	size    int64
	release func() // the tenant's place to assemble a final upload
}

func (p *partials) Done() { p.release() }

func (p *partials) Size() int64                            { return p.size }
func (p *partials) Open(ctx context.Context) io.ReadCloser { return p.core.OpenPartials(ctx, p.ups) }

func (p *partials) Claim(ctx context.Context, final string) error {
	return finalExists(busy(p.core.ClaimPartials(ctx, final, p.ids, p.ups)))
}

// busy is err, but a call that outlasted the door's CoreTimeout (staging waits out
// backpressure within it) says so: the server is busy, and a retry is worth it.
func busy(err error) error {
	if fault.Has(err, fault.Deadline) {
		return fault.Wrap(err, fault.Unavailable, fmt.Sprintf("the server is busy (%v); retry", err))
	}
	return err
}
