package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/chunkup/chunkup/s3store"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/documents"
	"github.com/chunkup/chunkup/staging/ocrqueue"
)

// UnsupportedError is a call this server cannot serve as configured (OCR off).
type UnsupportedError struct{ Msg string }

func (e *UnsupportedError) Error() string { return e.Msg }

// PermissionError is a call the caller's tenant may not make.
type PermissionError struct{ Msg string }

func (e *PermissionError) Error() string { return e.Msg }

// ResultError is a document's OCR result that could not be read from S3.
type ResultError struct {
	Key string
	Err error
}

func (e *ResultError) Error() string { return fmt.Sprintf("read the OCR result %s: %v", e.Key, e.Err) }
func (e *ResultError) Unwrap() error { return e.Err }

// JobError is a dead-lettered job that could not be requeued, after Requeued others
// were.
type JobError struct {
	JobID    string
	Requeued int
	Err      error
}

func (e *JobError) Error() string {
	return fmt.Sprintf("requeue job %s (after %d requeued): %v", e.JobID, e.Requeued, e.Err)
}
func (e *JobError) Unwrap() error { return e.Err }

// toStatus turns a domain error into the gRPC status a client sees. It is the only place
// where errors become statuses; id names the upload for the message.
func toStatus(id string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	id = clip(id)
	var (
		inv    *InvalidError
		rng    *RangeError
		sum    *ChecksumError
		st     *staging.StateError
		oor    *staging.OutOfRangeError
		last   *staging.LastChunkError
		rec    *staging.PartRecordedError
		dst    *documents.StateError
		fen    *documents.FencedError
		capErr *CapError
	)
	// Messages name the upload when there is one, so a client juggling several
	// uploads knows which one a failure belongs to.
	on := ""
	if id != "" {
		on = "upload " + id + ": "
	}
	var (
		uns *UnsupportedError
		prm *PermissionError
		res *ResultError
		job *JobError
		mal *ocrqueue.MalformedJobError
	)
	switch {
	case errors.As(err, &uns):
		return status.Error(codes.FailedPrecondition, uns.Msg)
	case errors.As(err, &prm):
		return status.Error(codes.PermissionDenied, prm.Msg)
	case errors.As(err, &res):
		if s3store.Permanent(res.Err) {
			return status.Errorf(codes.FailedPrecondition, "document %s: %v; reprocess the document to make it again", id, res)
		}
		return status.Errorf(codes.Unavailable, "document %s: %v; retry later", id, res)
	case errors.As(err, &job) && errors.Is(err, ocrqueue.ErrJobNotFound):
		return status.Errorf(codes.NotFound, "OCR job %s is not dead-lettered (or does not exist); %d requeued before it", quote(job.JobID), job.Requeued)
	case errors.As(err, &job) && errors.As(err, &mal):
		return status.Errorf(codes.FailedPrecondition, "%v; %d requeued before it", mal, job.Requeued)
	case errors.As(err, &inv):
		return status.Error(codes.InvalidArgument, on+inv.Msg)
	case errors.As(err, &rng):
		return status.Error(codes.OutOfRange, on+rng.Msg)
	case errors.As(err, &sum):
		return status.Error(codes.DataLoss, on+sum.Error())
	case errors.As(err, new(*ConflictError)), errors.As(err, new(*ObjectExistsError)):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.As(err, new(*NoObjectError)):
		return status.Errorf(codes.FailedPrecondition, "upload %s %v", id, err)
	case errors.As(err, new(*ObjectNotFoundError)):
		return status.Errorf(codes.NotFound, "%v: it may not exist, or be another tenant's", err)
	case errors.Is(err, staging.ErrNotFound):
		return status.Errorf(codes.NotFound, "upload %s not found: create an upload first (it may also have expired)", quote(id))
	case errors.As(err, &st):
		return status.Errorf(codes.FailedPrecondition, "upload %s is %s and accepts no more chunks; GetUpload shows its final state", id, st.Status)
	case errors.As(err, &oor):
		return status.Errorf(codes.OutOfRange, "%s%v: the upload's last chunk is %d", on, oor, oor.Total)
	case errors.As(err, &last):
		return status.Errorf(codes.FailedPrecondition, "%s%v; an upload has exactly one last chunk", on, last)
	case errors.As(err, &rec):
		return status.Errorf(codes.FailedPrecondition, "%s%v; start a new upload to send different bytes", on, rec)
	case errors.Is(err, staging.ErrNotReplicated):
		return status.Errorf(codes.Unavailable, "upload %s: %v; send the chunk again", id, err)
	case errors.Is(err, staging.ErrChunkBusy):
		return status.Errorf(codes.Aborted, "upload %s: %v and cannot be replaced now; retry", id, err)
	case errors.Is(err, staging.ErrCompleting):
		return status.Errorf(codes.FailedPrecondition, "upload %s is being completed and can no longer be aborted", id)
	case errors.Is(err, documents.ErrNotFound):
		return status.Errorf(codes.NotFound, "document %s not found: only completed image and PDF uploads handed to OCR are documents (it may also have expired)", quote(id))
	case errors.Is(err, ocrqueue.ErrJobNotFound):
		return status.Errorf(codes.NotFound, "OCR job %s not found", quote(id))
	case errors.As(err, &dst):
		return status.Errorf(codes.FailedPrecondition, "document %s: %v", id, dst)
	case errors.As(err, &fen):
		return status.Errorf(codes.Aborted, "document %s: %v", id, fen)
	case errors.As(err, &capErr):
		return retryLater(codes.ResourceExhausted, capErr.RetryAfter, "%v", capErr)
	case errors.Is(err, staging.ErrTooManyUploads):
		return retryLater(codes.ResourceExhausted, 30*time.Second, "%v (--max-active-uploads-per-tenant); nothing was created: complete or abort some of them (ListUploads shows them), or retry later", err)
	case errors.As(err, new(*BudgetError)), errors.As(err, new(*LimitError)), errors.As(err, new(*MemoryError)):
		return retryLater(codes.ResourceExhausted, time.Second, "%s%v", on, err)
	case errors.As(err, new(*IdleError)):
		return status.Errorf(codes.DeadlineExceeded, "%v", err)
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, staging.ErrUnavailable):
		return status.Errorf(codes.Unavailable, "%s%v; retry later", on, err)
	case errors.Is(err, staging.ErrFull):
		return retryLater(codes.ResourceExhausted, time.Second, "%sRedis is full (maxmemory reached) and refused the write; nothing was changed; retry in a moment, as workers drain staged chunks to S3", on)
	}
	return status.Error(codes.Internal, fmt.Sprintf("upload %s: %v", id, err))
}

// retryLater is a status with retry advice (google.rpc.RetryInfo): clients that read
// it wait after before they retry.
func retryLater(code codes.Code, after time.Duration, format string, a ...any) error {
	st := status.Newf(code, format, a...)
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(after)}); err == nil {
		st = d
	}
	return st.Err()
}
