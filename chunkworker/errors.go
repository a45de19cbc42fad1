package chunkworker

import (
	"errors"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
)

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

var retryables = retry.IsErrorRetryables(retry.DefaultRetryables)

// Permanent reports whether an S3 error will not go away by retrying: the SDK's own
// classifier says it is not retryable and S3 answered with a 4xx status (a missing
// bucket or multipart upload, denied access, a malformed request). Network errors,
// throttling and 5xx answers are transient.
func Permanent(err error) bool {
	var pe *permanentError
	if errors.As(err, &pe) {
		return true
	}
	if retryables.IsErrorRetryable(err) == aws.TrueTernary {
		return false
	}
	var hs interface{ HTTPStatusCode() int }
	if errors.As(err, &hs) {
		code := hs.HTTPStatusCode()
		return code >= 400 && code < 500 && code != 408 && code != 429
	}
	return false
}
