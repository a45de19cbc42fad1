package httpdoor

import (
	"context"
	"io"
	"time"

	"github.com/chunkup/chunkup/internal/fault"
)

// Core is what the door needs from chunkup: the upload store, seen from one upload at a
// time. The adapter over chunkup's real store implements it (see docs/http-uploads.md,
// "The adapter"); the tests implement it in memory.
//
// Every method takes the context that Config.Authenticate returned for the request, so
// tenancy stays the core's concern: an upload of another tenant is ErrNotFound, exactly
// like a missing one.
//
// Errors carry a kind (internal/fault): the sentinels below wrapped with %w and a
// message the client may read, or any error of a kind (the door shows err.Error() to
// the client). An error of no kind is a 500 whose text is logged, not shown.
type Core interface {
	// Create makes a new upload. Size is -1 when it is not known yet (tus
	// creation-defer-length; an IETF creation without a length). The core picks the
	// chunk size. A size over the core's limit is ErrTooLarge; bad metadata ErrInvalid.
	Create(ctx context.Context, req CreateRequest) (Upload, error)

	// Get reads an upload's state in one round trip.
	Get(ctx context.Context, id string) (Upload, error)

	// DeclareSize records the size of an upload created without one (tus
	// Upload-Length in a later PATCH, IETF Upload-Length or Upload-Complete). It is
	// durable and visible to every replica before it returns. Declaring the size the
	// upload already has is a no-op (so a retried request succeeds); another size, or
	// one that contradicts the chunks already received (a chunk beyond the last, a
	// short chunk that is not the last), is ErrConflict; a size over the limit is
	// ErrTooLarge. When the chunks already received make the upload whole under the new
	// size (every chunk up to the last one, all full size: the client sent the data
	// first and the length last), the upload is complete from then on, exactly as if its
	// last chunk had just been staged. An upload of size 0 needs its one empty chunk
	// staged; the door does that itself.
	DeclareSize(ctx context.Context, id string, size int64) error

	// Stage durably stages chunk n (numbered from 1) with its CRC32C (Castagnoli) and
	// returns once it is acknowledged: acknowledged means durable. Every chunk but the
	// last has exactly ChunkSize bytes; the last has at most ChunkSize and only an
	// upload of one chunk may have an empty one. last marks the final chunk of an upload
	// whose size is unknown, and makes the size known; for an upload whose size is
	// known it must agree with the chunk's number. A chunk received before with the same
	// bytes is acknowledged again (no error). Staging may wait (backpressure) as long
	// as ctx allows. When the upload has ended: ErrGone.
	Stage(ctx context.Context, id string, n uint32, data []byte, crc32c uint32, last bool) error

	// SaveTail durably keeps data as the upload's tail: the first bytes of chunk n,
	// which a request delivered without filling the chunk, so that the offset moves by
	// every byte a client sent however small its requests. It returns once the tail is
	// as durable as a staged chunk. It replaces the tail before; empty data drops it.
	// It must be called under the upload's lock (with the context Lock returned). A
	// chunk n received since is ErrConflict; an ended upload ErrGone.
	SaveTail(ctx context.Context, id string, n uint32, data []byte) error

	// ReadTail returns the bytes of the tail t (as Get reported it). A tail replaced
	// or dropped since is ErrConflict.
	ReadTail(ctx context.Context, id string, t Tail) ([]byte, error)

	// Abort ends the upload: nothing more can be staged and its resources are
	// released. Aborting an aborted upload is a no-op; one that is completing or
	// completed cannot be aborted: ErrConflict.
	Abort(ctx context.Context, id string) error

	// Lock takes the upload's append lock, shared by every replica, and returns a
	// context derived from ctx that is cancelled if the lock is lost (its lease could not
	// be renewed, or the adapter was asked to hand it over), and the function that
	// releases it. The door stages only under the lock and passes the returned context
	// to Stage, so an adapter can fence writes with it. When another request holds the
	// lock, Lock returns ErrLocked, at once or after waiting as long as the adapter's
	// policy says.
	Lock(ctx context.Context, id string) (held context.Context, unlock func(), err error)

	// OpenStream counts a request that will append to an upload it creates against
	// the tenant's streams before the upload exists, so that a tenant at its cap is
	// refused (ErrUnavailable) with nothing created; LockOpened then takes the new
	// upload's lock on that stream. release ends the count.
	OpenStream(ctx context.Context) (release func(), err error)

	// LockOpened is Lock on a stream OpenStream counted: release is called when the
	// lock is released, or at once when it cannot be taken.
	LockOpened(ctx context.Context, id string, release func()) (held context.Context, unlock func(), err error)

	// Concat checks the partial uploads ids that a final upload concatenates (tus
	// concatenation), in that order: each the caller's, created partial, complete and
	// not concatenated already. Any other is ErrInvalid, naming it, with nothing
	// changed; together larger than the limit, ErrTooLarge; one another final upload
	// is concatenating, ErrConflict. A final upload of the same partials, in the same
	// order, that has every byte is a *FinalExistsError naming it (a creation
	// repeated: it is answered with that upload); one being assembled is ErrLocked. A
	// tenant assembling as many final uploads as the core allows waits for a place,
	// then is ErrUnavailable.
	Concat(ctx context.Context, ids []string) (Partials, error)
}

// FinalExistsError: Core.Concat's answer when a final upload of the same partial
// uploads, in the same order, exists and has every byte: a tus client that lost the
// answer to its creation creates it again, and gets that upload.
type FinalExistsError struct{ ID string }

func (e *FinalExistsError) Error() string {
	return "final upload " + e.ID + " of the same partial uploads exists already"
}

// Partials are the partial uploads a final upload concatenates, checked by Core.Concat.
type Partials interface {
	// Size is their bytes together: the final upload's size.
	Size() int64
	// Done gives back what Concat took for the final upload's assembly (the tenant's
	// place to assemble one); the creating request calls it once it is over.
	Done()
	// Claim makes them final upload final's, so that no other final upload
	// concatenates them meanwhile (one whose creating request ended without every
	// byte gives them up). It is called holding final's append lock, before Open; a
	// partial claimed by another final upload that may still complete is ErrConflict,
	// one whose final upload completed ErrInvalid, and a final upload of the same
	// partials that has every byte a *FinalExistsError (as from Concat).
	Claim(ctx context.Context, final string) error
	// Open returns their bytes, one partial after the other. A partial whose bytes are
	// not what it was completed with ends the read with an error (of kind DataLoss)
	// before the read's end. Closing it stops a read under way.
	Open(ctx context.Context) io.ReadCloser
}

// CreateRequest describes a new upload.
type CreateRequest struct {
	// Size is the upload's length in bytes, or -1 when it is not known yet.
	Size int64
	// Name is the file name (tus metadata filename or name; IETF Content-Disposition).
	Name string
	// ContentType is the media type (tus metadata filetype, type or contentType; IETF
	// Content-Type).
	ContentType string
	// Metadata holds every tus Upload-Metadata pair as the client sent it (values
	// decoded from base64), including the ones Name and ContentType were taken from, so
	// that HEAD can echo them. Nil when there were none.
	Metadata map[string]string
	// Partial: the upload is a part of a later final upload (tus Upload-Concat:
	// partial); it is stored but not announced as an upload of its own.
	Partial bool
	// Concat: the upload is a final one, concatenating these partial uploads' ids in
	// order (Core.Concat checked them).
	Concat []string
}

// State is an upload's lifecycle state, as chunkup names it.
type State string

// The states of an upload.
const (
	StateActive     State = "ACTIVE"
	StateCompleting State = "COMPLETING"
	StateCompleted  State = "COMPLETED"
	StateFailed     State = "FAILED"
	StateAborted    State = "ABORTED"
	StateExpired    State = "EXPIRED"
)

// Ended reports whether the upload can take no more data and was not completed: the
// door answers 410 Gone to HEAD and PATCH for it (GET still shows its state and reason).
func (s State) Ended() bool {
	return s == StateFailed || s == StateAborted || s == StateExpired
}

// Upload is an upload's state as the core holds it.
type Upload struct {
	ID    string
	State State
	// ChunkSize is the size of every chunk but the last.
	ChunkSize int64
	// Size is the upload's length: declared, or known once its last chunk was
	// received; -1 while unknown.
	Size int64
	// Chunks are the received chunks, in any order (the door sorts them).
	Chunks []Chunk
	// Tail is the first bytes of the next chunk, saved by SaveTail; the zero Tail
	// when there is none. The door counts it only while its chunk is the first one
	// missing.
	Tail Tail
	// Expires is when the upload expires if nothing more happens; zero if unknown.
	Expires time.Time
	// Key is the object's key in the bucket, shown to the client on completion.
	Key string
	// Name, ContentType and Metadata are what CreateRequest carried.
	Name, ContentType string
	Metadata          map[string]string
	// Partial and Concat are what CreateRequest carried.
	Partial bool
	Concat  []string
	// Reason says why an upload failed.
	Reason string
	// Ended is when an upload that ended (failed, aborted, expired) did; zero if
	// unknown or while it has not ended.
	Ended time.Time
}

// Chunk is what the core holds for one received chunk.
type Chunk struct {
	N      uint32
	Size   int64
	CRC32C uint32
	// Stored: the chunk's part is in the object store (so it can no longer be replaced).
	Stored bool
}

// Tail describes an upload's tail: the first Size bytes of chunk N, with their CRC32C.
type Tail struct {
	N      uint32
	Size   int64
	CRC32C uint32
}

// The errors a Core returns carry a kind (internal/fault), which becomes one HTTP
// status in one place (status.go: httpStatuses). These sentinels, wrapped with %w and a
// message the client may read, are the door's own and a test core's way to say it;
// chunkup's core returns errors of its own with the same kinds. An error of no kind is
// a 500 whose text is logged, not shown.
var (
	// ErrNotFound: no such upload (or another tenant's). 404.
	ErrNotFound error = fault.New(fault.NotFound, "upload not found")
	// ErrGone: the upload ended (aborted, expired, failed) and takes no more data. 410.
	ErrGone error = fault.New(fault.Ended, "upload has ended")
	// ErrLocked: another request holds the upload's append lock. 423 for tus, 409 for
	// the IETF protocol.
	ErrLocked error = fault.New(fault.Locked, "another request is appending to this upload")
	// ErrInvalid: the request is malformed or breaks a rule. 400.
	ErrInvalid error = fault.New(fault.Invalid, "invalid request")
	// ErrConflict: the upload's state does not allow the request (a size that
	// contradicts the one recorded, bytes that differ from a chunk already stored,
	// aborting a completed upload). 409.
	ErrConflict error = fault.New(fault.Conflict, "request conflicts with the upload's state")
	// ErrTooLarge: the upload or the request is larger than allowed. 413.
	ErrTooLarge error = fault.New(fault.TooLarge, "too large")
	// ErrRateLimited: the caller sent more requests than its rate limit allows, or its
	// tenant reached a quota. 429 with Retry-After.
	ErrRateLimited error = fault.New(fault.Exhausted, "too many requests")
	// ErrUnavailable: a refusal that a retry may overcome (the store is unreachable,
	// full or over its budget; a chunk is being uploaded right now). Nothing was
	// changed. 503 with Retry-After.
	ErrUnavailable error = fault.New(fault.Unavailable, "temporarily unavailable")
)
