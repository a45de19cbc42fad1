package s3store

import (
	"errors"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsretry "github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"

	"github.com/chunkup/chunkup/internal/retry"
)

var retryables = awsretry.IsErrorRetryables(awsretry.DefaultRetryables)

// corrupted are the codes with which a store says the bytes it received do not match
// the checksum sent with them: they were damaged on the way, and chunkup sends them
// again from its intact copy. MinIO says XAmzContentChecksumMismatch, AWS and SeaweedFS
// BadDigest; a 400, which would otherwise be permanent and fail the upload.
var corrupted = map[string]bool{"BadDigest": true, "XAmzContentChecksumMismatch": true}

// Permanent reports whether an error will not go away by retrying: it is marked
// retry.PermanentError, or, unless it is marked retry.TransientError, the AWS SDK's own
// classifier says it is not retryable and S3 answered with a 4xx status (a missing
// bucket or multipart upload, denied access, a malformed request). Network errors,
// throttling, 5xx answers and bytes damaged on the way (corrupted) are transient. It lives here, not in internal/retry, so
// that the SDK, which backs off with internal/retry, links no AWS package.
func Permanent(err error) bool {
	var pe *retry.PermanentError
	if errors.As(err, &pe) {
		return true
	}
	var te *retry.TransientError
	if errors.As(err, &te) {
		return false
	}
	if retryables.IsErrorRetryable(err) == aws.TrueTernary {
		return false
	}
	var api smithy.APIError
	if errors.As(err, &api) && corrupted[api.ErrorCode()] {
		return false
	}
	var hs interface{ HTTPStatusCode() int }
	if errors.As(err, &hs) {
		code := hs.HTTPStatusCode()
		return code >= 400 && code < 500 && code != 408 && code != 429
	}
	return false
}
