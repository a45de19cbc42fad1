package staging

import (
	"fmt"
	"time"

	"github.com/chunkup/chunkup/internal/fault"
)

// Every error here has a kind (internal/fault), so that an error no caller explained
// still reaches a client with the right code. They are not *fault.Error values, which
// are errors explained for a client (see upload.Explain).

// kindError is a sentinel with a kind.
type kindError struct {
	kind fault.Kind
	msg  string
}

func kinded(k fault.Kind, msg string) error { return &kindError{kind: k, msg: msg} }

func (e *kindError) Error() string    { return e.msg }
func (e *kindError) Kind() fault.Kind { return e.kind }

// ErrNotFound means no upload has the id (or it has been cleaned up).
var ErrNotFound error = kinded(fault.NotFound, "upload not found")

// ErrChunkBusy means a chunk is being uploaded to S3 right now, so it cannot be
// replaced by different bytes; the caller may retry once the part is recorded (and will
// then get a PartRecordedError) or later.
var ErrChunkBusy error = kinded(fault.Busy, "chunk is being uploaded")

// ErrNotReplicated means a chunk was staged on the Redis master but fewer replicas
// than Config.MinReplicas confirmed it in time: a failover now could lose it, so it is
// not acknowledged. Sending it again is safe (a repeat is idempotent).
var ErrNotReplicated error = kinded(fault.Unavailable, "chunk not yet copied to enough Redis replicas")

// ErrCompleting means the upload is being finalized and can no longer be aborted.
var ErrCompleting error = kinded(fault.Conflict, "upload is being completed")

// StateError means the upload is in a state that does not allow the operation.
type StateError struct{ Status Status }

func (e *StateError) Error() string { return fmt.Sprintf("upload is %s", e.Status) }

// OutOfRangeError means a chunk number is beyond the upload's number of chunks.
type OutOfRangeError struct{ N, Total uint32 }

func (e *OutOfRangeError) Error() string {
	return fmt.Sprintf("chunk %d is beyond the upload's %d chunks", e.N, e.Total)
}

// LastChunkError means a chunk claims to be the last while the upload already has
// another last chunk, or a higher-numbered chunk.
type LastChunkError struct {
	N uint32
	// Last is the upload's last chunk, or 0 when a higher chunk (Max) was received.
	Last, Max uint32
}

func (e *LastChunkError) Error() string {
	if e.Last != 0 {
		return fmt.Sprintf("chunk %d cannot be the last: chunk %d already is", e.N, e.Last)
	}
	return fmt.Sprintf("chunk %d cannot be the last: chunk %d was already received", e.N, e.Max)
}

// PartRecordedError means a chunk's part is already in S3 with other bytes.
type PartRecordedError struct{ N uint32 }

func (e *PartRecordedError) Error() string {
	return fmt.Sprintf("chunk %d is already stored in S3 with a different checksum", e.N)
}

// ErrUnavailable means Redis cannot serve the request right now: the connection was
// refused, dropped or timed out, Redis is loading its data after a restart, or a
// cluster is failing over (CLUSTERDOWN, TRYAGAIN, MASTERDOWN, READONLY from a master
// just demoted). Nothing was changed; the same request may succeed later.
var ErrUnavailable error = kinded(fault.Unavailable, "staging store unavailable")

// ErrFull means Redis refused a write because it is at its maxmemory limit (OOM).
// Nothing was changed: every script checks its conditions before its first write, and
// Redis refuses only a script's first write. Retry once workers have drained staged
// chunks.
var ErrFull error = kinded(fault.Overloaded, "staging store out of memory")

// ErrTooManyUploads means the tenant has as many uploads in progress as
// Config.MaxActivePerTenant allows; nothing was created. It clears as the tenant's
// uploads complete, are aborted or expire.
var ErrTooManyUploads error = kinded(fault.Exhausted, "the tenant has as many uploads in progress as it may have")

// ActiveError means an upload that was to expire has been active since.
type ActiveError struct{ LastActivity time.Time }

func (e *ActiveError) Error() string { return "upload active since " + e.LastActivity.String() }

// ErrGuardLost means another completer took over; the caller must stop.
var ErrGuardLost error = kinded(fault.Internal, "completion guard lost")

// ErrAlreadyCompleted means another completer recorded the completion first (its event
// is the one in the outbox); the caller has nothing left to do.
var ErrAlreadyCompleted error = kinded(fault.Internal, "upload already completed")

// ErrChunkMissing means a claimed chunk's bytes are no longer in Redis.
var ErrChunkMissing error = kinded(fault.Conflict, "staged chunk is missing")

// ErrLockLost means a write was refused because the caller's append lock is no longer
// its own (the lease ran out, and another request may hold it now). Nothing was
// changed.
var ErrLockLost error = kinded(fault.Locked, "the upload's append lock was lost")

// SizeError means a declared size contradicts the upload: the size recorded or known
// from its last chunk (Known ≥ 0), or a chunk already received (N, of Size bytes).
type SizeError struct {
	Declared, Known int64
	N               uint32
	Size            int64
}

func (e *SizeError) Error() string {
	if e.Known >= 0 {
		return fmt.Sprintf("the upload's size is %d; it cannot become %d", e.Known, e.Declared)
	}
	return fmt.Sprintf("a size of %d does not fit chunk %d of %d bytes already received", e.Declared, e.N, e.Size)
}

// Kind implements fault's kinded errors.
func (e *SizeError) Kind() fault.Kind { return fault.Conflict }

// Kind implements fault's kinded errors: an upload that ended otherwise than by
// completion takes nothing more; one completed or being completed conflicts with
// a change.
func (e *StateError) Kind() fault.Kind {
	switch e.Status {
	case StatusFailed, StatusAborted, StatusExpired:
		return fault.Ended
	}
	return fault.Conflict
}

// Kind implements fault's kinded errors.
func (e *OutOfRangeError) Kind() fault.Kind { return fault.OutOfRange }

// Kind implements fault's kinded errors.
func (e *LastChunkError) Kind() fault.Kind { return fault.Conflict }

// Kind implements fault's kinded errors.
func (e *PartRecordedError) Kind() fault.Kind { return fault.Conflict }
