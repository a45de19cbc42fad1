package server

import (
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/chunkup/chunkup/internal/fault"
	"github.com/chunkup/chunkup/s3store"
	"github.com/chunkup/chunkup/staging/documents"
	"github.com/chunkup/chunkup/staging/ocrqueue"
	"github.com/chunkup/chunkup/upload"
)

// UnsupportedError is a call this server cannot serve as configured (OCR off).
type UnsupportedError struct{ Msg string }

func (e *UnsupportedError) Error() string { return e.Msg }

// Kind implements fault's kinded errors.
func (e *UnsupportedError) Kind() fault.Kind { return fault.Unsupported }

// PermissionError is a call the caller's tenant may not make.
type PermissionError struct{ Msg string }

func (e *PermissionError) Error() string { return e.Msg }

// Kind implements fault's kinded errors.
func (e *PermissionError) Kind() fault.Kind { return fault.Denied }

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

// grpcCodes maps each kind of error to the gRPC code a client sees: the one table of
// the gRPC door (httpdoor's statusOf is the HTTP door's).
var grpcCodes = map[fault.Kind]codes.Code{
	fault.Internal:        codes.Internal,
	fault.Invalid:         codes.InvalidArgument,
	fault.NotFound:        codes.NotFound,
	fault.OutOfRange:      codes.OutOfRange,
	fault.TooLarge:        codes.InvalidArgument,
	fault.Exists:          codes.AlreadyExists,
	fault.Conflict:        codes.FailedPrecondition,
	fault.Ended:           codes.FailedPrecondition,
	fault.Busy:            codes.Aborted,
	fault.Locked:          codes.Aborted,
	fault.DataLoss:        codes.DataLoss,
	fault.Exhausted:       codes.ResourceExhausted,
	fault.Overloaded:      codes.ResourceExhausted,
	fault.Unavailable:     codes.Unavailable,
	fault.Deadline:        codes.DeadlineExceeded,
	fault.Canceled:        codes.Canceled,
	fault.Unauthenticated: codes.Unauthenticated,
	fault.Denied:          codes.PermissionDenied,
	fault.Unsupported:     codes.FailedPrecondition,
}

// CodeOf is the gRPC code of errors of kind k.
func CodeOf(k fault.Kind) codes.Code {
	if c, ok := grpcCodes[k]; ok {
		return c
	}
	return codes.Internal
}

// toStatus turns an error into the gRPC status a client sees: its kind's code (see
// grpcCodes), its message, and the delay to wait before a retry when it asks for one
// (google.rpc.RetryInfo). It is the only place where errors become statuses; id names
// the upload (or document) for the message.
func toStatus(id string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	err = explain(id, err)
	k := fault.KindOf(err)
	msg := err.Error()
	if k == fault.Internal && id != "" {
		msg = fmt.Sprintf("upload %s: %v", clip(id), err)
	}
	st := status.New(CodeOf(k), msg)
	if after := fault.RetryAfter(err); after > 0 {
		if d, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(after)}); derr == nil {
			st = d
		}
	}
	return st.Err()
}

// explain is upload.Explain for the errors of documents, OCR jobs and objects read
// back, which only the gRPC door serves.
func explain(id string, err error) error {
	if _, ok := err.(*fault.Error); ok {
		return err
	}
	id = clip(id)
	var (
		res *ResultError
		job *JobError
		mal *ocrqueue.MalformedJobError
		dst *documents.StateError
		fen *documents.FencedError
	)
	switch {
	case errors.As(err, &res):
		if s3store.Permanent(res.Err) {
			return fault.Wrap(err, fault.Conflict, fmt.Sprintf("document %s: %v; reprocess the document to make it again", id, res))
		}
		return fault.Wrap(err, fault.Unavailable, fmt.Sprintf("document %s: %v; retry later", id, res))
	case errors.As(err, &job) && errors.Is(err, ocrqueue.ErrJobNotFound):
		return fault.Wrap(err, fault.NotFound, fmt.Sprintf("OCR job %s is not dead-lettered (or does not exist); %d requeued before it", quote(job.JobID), job.Requeued))
	case errors.As(err, &job) && errors.As(err, &mal):
		return fault.Wrap(err, fault.Conflict, fmt.Sprintf("%v; %d requeued before it", mal, job.Requeued))
	case errors.As(err, new(*NoObjectError)):
		return fault.Wrap(err, fault.Conflict, fmt.Sprintf("upload %s %v", id, err))
	case errors.Is(err, documents.ErrNotFound):
		return fault.Wrap(err, fault.NotFound, fmt.Sprintf("document %s not found: only completed image and PDF uploads handed to OCR are documents (it may also have expired)", quote(id)))
	case errors.Is(err, ocrqueue.ErrJobNotFound):
		return fault.Wrap(err, fault.NotFound, fmt.Sprintf("OCR job %s not found", quote(id)))
	case errors.As(err, &dst):
		return fault.Wrap(err, fault.Conflict, fmt.Sprintf("document %s: %v", id, dst))
	case errors.As(err, &fen):
		return fault.Wrap(err, fault.Busy, fmt.Sprintf("document %s: %v", id, fen))
	}
	return upload.Explain(id, err)
}
