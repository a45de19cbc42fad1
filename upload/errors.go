package upload

import (
	"errors"
	"fmt"
	"time"

	"github.com/chunkup/chunkup/internal/fault"
	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/staging"
)

// The core's errors. Each carries a kind (internal/fault), which each door maps to its
// protocol's code in one table; their messages speak of the request, never of the
// server's flags (docs/limits.md says which setting each limit is).

// InvalidError is a request that is wrong in itself; the message says how to fix it.
type InvalidError struct{ Msg string }

func (e *InvalidError) Error() string { return e.Msg }

// ConflictError is a create whose client_node_id names an upload made with other
// parameters.
type ConflictError struct {
	ClientNodeID, UploadID, Field string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("client_node_id %s already names upload %s, which was created with another %s; repeat the first request's parameters to get that upload back, or use a new client_node_id for a different upload", Quote(e.ClientNodeID), e.UploadID, e.Field)
}

// ObjectExistsError is a create with if_absent for a key where an object exists.
type ObjectExistsError struct{ Key string }

func (e *ObjectExistsError) Error() string {
	return fmt.Sprintf("an object exists at key %s and if_absent was set: nothing was created; delete the object first, upload under another key, or leave if_absent unset to replace it", Quote(e.Key))
}

// RangeError is a chunk number outside the upload.
type RangeError struct{ Msg string }

func (e *RangeError) Error() string { return e.Msg }

// ChecksumError is a chunk whose bytes do not match the checksum sent with it.
type ChecksumError struct {
	N         uint32
	Got, Want uint32
}

func (e *ChecksumError) Error() string {
	return fmt.Sprintf("chunk %d: crc32c of the data is %08x but the request says %08x; the chunk was corrupted on the way, send it again", e.N, e.Got, e.Want)
}

// TooLargeError is an upload larger than this server takes.
type TooLargeError struct{ Msg string }

func (e *TooLargeError) Error() string { return e.Msg }

// Kind implements fault's kinded errors.
func (e *InvalidError) Kind() fault.Kind { return fault.Invalid }

// Kind implements fault's kinded errors.
func (e *ConflictError) Kind() fault.Kind { return fault.Exists }

// Kind implements fault's kinded errors.
func (e *ObjectExistsError) Kind() fault.Kind { return fault.Exists }

// Kind implements fault's kinded errors.
func (e *RangeError) Kind() fault.Kind { return fault.OutOfRange }

// Kind implements fault's kinded errors.
func (e *ChecksumError) Kind() fault.Kind { return fault.DataLoss }

// Kind implements fault's kinded errors.
func (e *TooLargeError) Kind() fault.Kind { return fault.TooLarge }

// ErrDraining: the server is shutting down and takes no more chunks on this stream or
// request; the client resumes on another server.
var ErrDraining error = fault.New(fault.Unavailable, "this server is shutting down; resume the upload on another server (GetUpload lists the chunks it has)")

// Explain returns err, an error of the core or of the stores below it about upload id
// ("" for none), as an error of its kind with the message a client reads: what went
// wrong with its request and what to do. The error it wraps stays reachable through
// errors.Is and errors.As. An error explained already, a context's end, and an error
// of no known kind (a fault of the server) are returned as they are. Every door reads
// the core's errors through it, so that a client of any door reads the same words.
func Explain(id string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(*fault.Error); ok {
		return err
	}
	id = Clip(id)
	// Messages name the upload when there is one, so a client juggling several
	// uploads knows which one a failure belongs to; an id that is not one names no
	// upload, and ValidID's message quotes it already.
	on := ""
	if id != "" && ids.Valid(id) {
		on = "upload " + id + ": "
	}
	var (
		st   *staging.StateError
		oor  *staging.OutOfRangeError
		last *staging.LastChunkError
		rec  *staging.PartRecordedError
		size *staging.SizeError
	)
	k := fault.KindOf(err)
	wrap := func(msg string) error {
		return &fault.Error{Kind: k, Msg: msg, Err: err, RetryAfter: fault.RetryAfter(err)}
	}
	switch {
	case errors.As(err, new(*ConflictError)), errors.As(err, new(*ObjectExistsError)), errors.As(err, new(*CapError)):
		return wrap(err.Error())
	case errors.As(err, new(*InvalidError)), errors.As(err, new(*RangeError)), errors.As(err, new(*ChecksumError)),
		errors.As(err, new(*TooLargeError)), errors.As(err, new(*BudgetError)), errors.As(err, new(*LimitError)):
		return wrap(on + err.Error())
	case errors.Is(err, staging.ErrNotFound):
		return wrap(fmt.Sprintf("upload %s not found: create an upload first (it may also have expired)", Quote(id)))
	case errors.As(err, &st):
		return wrap(fmt.Sprintf("upload %s is %s and accepts no more chunks; GetUpload shows its final state", id, st.Status))
	case errors.As(err, &oor):
		return wrap(fmt.Sprintf("%s%v: the upload's last chunk is %d", on, oor, oor.Total))
	case errors.As(err, &last):
		return wrap(fmt.Sprintf("%s%v; an upload has exactly one last chunk", on, last))
	case errors.As(err, &rec):
		return wrap(fmt.Sprintf("%s%v; start a new upload to send different bytes", on, rec))
	case errors.As(err, &size):
		return wrap(fmt.Sprintf("%s%v", on, size))
	case errors.Is(err, staging.ErrLockLost):
		return wrap(on + "this request lost the upload's append lock; nothing more was stored")
	case errors.Is(err, staging.ErrNotReplicated):
		return wrap(fmt.Sprintf("%s%v; send the chunk again", on, err))
	case errors.Is(err, staging.ErrChunkBusy):
		return wrap(fmt.Sprintf("%s%v and cannot be replaced now; retry", on, err))
	case errors.Is(err, staging.ErrCompleting):
		return wrap(fmt.Sprintf("upload %s is being completed and can no longer be aborted", id))
	case errors.Is(err, staging.ErrTooManyUploads):
		return &fault.Error{Kind: k, Err: err, RetryAfter: 30 * time.Second,
			Msg: fmt.Sprintf("%v; nothing was created: complete or abort some of them (ListUploads shows them), or retry later", err)}
	case errors.Is(err, staging.ErrFull):
		return &fault.Error{Kind: k, Err: err, RetryAfter: time.Second,
			Msg: on + "Redis is full (maxmemory reached) and refused the write; nothing was changed; retry in a moment, as workers drain staged chunks to S3"}
	case errors.Is(err, staging.ErrUnavailable):
		return wrap(fmt.Sprintf("%s%v; retry later", on, err))
	}
	return err
}
