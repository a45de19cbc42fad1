package staging

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/redis/go-redis/v9"
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

// classify wraps a Redis error in ErrUnavailable or ErrFull when it is one of those
// refusals; other errors (and redis.Nil) are returned as they are.
func classify(err error) error {
	if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrFull) {
		return err
	}
	switch {
	case redis.IsOOMError(err):
		return fmt.Errorf("%w: %w", ErrFull, err)
	case unavailable(err):
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

func unavailable(err error) bool {
	var ne net.Error
	switch {
	case errors.Is(err, redis.ErrClosed), errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrPoolExhausted),
		errors.As(err, &ne), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	}
	return redis.IsLoadingError(err) || redis.IsMasterDownError(err) || redis.IsClusterDownError(err) ||
		redis.IsTryAgainError(err) || redis.IsReadOnlyError(err) || redis.IsMaxClientsError(err) ||
		redis.IsNoReplicasError(err)
}

// classifyHook makes every command's error pass through classify, so that callers of
// the store see ErrUnavailable and ErrFull whichever method they called.
type classifyHook struct{}

func (classifyHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (classifyHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return classify(next(ctx, cmd))
	}
}

func (classifyHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if e := c.Err(); e != nil {
				c.SetErr(classify(e))
			}
		}
		return classify(err)
	}
}
