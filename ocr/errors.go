package ocr

import (
	"context"
	"errors"
	"fmt"

	"github.com/chunkup/chunkup/internal/retry"
)

// InvalidFileError means a file's bytes are not what its content type claims, or not a
// type OCR handles. It is permanent: retrying cannot help.
type InvalidFileError struct {
	Declared string
	// Detected is the type found by magic bytes, "" when none.
	Detected FileType
	// Head is the first bytes, in hex, when no type was detected.
	Head string
}

func (e *InvalidFileError) Error() string {
	switch {
	case e.Detected == "":
		return fmt.Sprintf("invalid file: declared %s, but its bytes are not a JPEG, PNG, TIFF or PDF (they start with %s)", e.Declared, e.Head)
	case !Supported(e.Declared):
		return fmt.Sprintf("invalid file: content type %q is not one OCR handles (its bytes are %s)", e.Declared, e.Detected)
	}
	return fmt.Sprintf("invalid file: declared %s, but its bytes are %s", e.Declared, e.Detected)
}

// OutageError wraps a failure of a dependency (Redis, S3) rather than of the job: the
// job is retried later without counting an attempt.
type OutageError struct{ Err error }

func (e *OutageError) Error() string { return "outage: " + e.Err.Error() }
func (e *OutageError) Unwrap() error { return e.Err }

func outage(err error) error { return &OutageError{Err: err} }

// UnavailableError says an engine cannot take work now (not installed, unreachable,
// overloaded): the job is not at fault. It runs on the fallback engine when there is
// one, and is otherwise released without counting an attempt.
type UnavailableError struct {
	Engine string
	Err    error
}

func (e *UnavailableError) Error() string { return e.Engine + " unavailable: " + e.Err.Error() }
func (e *UnavailableError) Unwrap() error { return e.Err }

// Permanent marks an error as one that retrying cannot fix: the job is dead-lettered at
// once.
func Permanent(err error) error { return &retry.PermanentError{Err: err} }

// errLeaseLost is the cause of a job's context when its lease is lost.
var errLeaseLost = errors.New("job lease lost")

// failKind says how a job's error is treated.
type failKind int

const (
	failRetry failKind = iota
	failPermanent
	failOutage
)

func classify(err error) failKind {
	var inv *InvalidFileError
	var pe *retry.PermanentError
	var oe *OutageError
	var ue *UnavailableError
	switch {
	case errors.As(err, &inv), errors.As(err, &pe):
		return failPermanent
	case errors.As(err, &oe), errors.As(err, &ue), errors.Is(err, context.Canceled):
		return failOutage
	}
	return failRetry
}
