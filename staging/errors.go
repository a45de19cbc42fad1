package staging

import (
	"errors"
	"fmt"
	"time"
)

// ErrNotFound means no upload has the id (or it has been cleaned up).
var ErrNotFound = errors.New("upload not found")

// ErrChunkBusy means a chunk is being uploaded to S3 right now, so it cannot be
// replaced by different bytes; the caller may retry once the part is recorded (and will
// then get a PartRecordedError) or later.
var ErrChunkBusy = errors.New("chunk is being uploaded")

// ErrNotReplicated means a chunk was staged on the Redis master but fewer replicas
// than Config.MinReplicas confirmed it in time: a failover now could lose it, so it is
// not acknowledged. Sending it again is safe (a repeat is idempotent).
var ErrNotReplicated = errors.New("chunk not yet copied to enough Redis replicas")

// ErrCompleting means the upload is being finalized and can no longer be aborted.
var ErrCompleting = errors.New("upload is being completed")

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
var ErrUnavailable = errors.New("staging store unavailable")

// ErrFull means Redis refused a write because it is at its maxmemory limit (OOM).
// Nothing was changed: every script checks its conditions before its first write, and
// Redis refuses only a script's first write. Retry once workers have drained staged
// chunks.
var ErrFull = errors.New("staging store out of memory")

// ErrTooManyUploads means the tenant has as many uploads in progress as
// Config.MaxActivePerTenant allows; nothing was created. It clears as the tenant's
// uploads complete, are aborted or expire.
var ErrTooManyUploads = errors.New("the tenant has as many uploads in progress as it may have")

// ActiveError means an upload that was to expire has been active since.
type ActiveError struct{ LastActivity time.Time }

func (e *ActiveError) Error() string { return "upload active since " + e.LastActivity.String() }

// ErrGuardLost means another completer took over; the caller must stop.
var ErrGuardLost = errors.New("completion guard lost")

// ErrAlreadyCompleted means another completer recorded the completion first (its event
// is the one in the outbox); the caller has nothing left to do.
var ErrAlreadyCompleted = errors.New("upload already completed")

// ErrChunkMissing means a claimed chunk's bytes are no longer in Redis.
var ErrChunkMissing = errors.New("staged chunk is missing")
