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

// plainReasons say in plain words what an S3 error code means for an upload that
// failed with it, and what to do; Reason adds the store's own words as detail.
var plainReasons = map[string]string{
	"NoSuchUpload": "S3 no longer has the multipart upload this upload stored its parts in (it was aborted " +
		"or expired outside chunkup, or the store lost it), so the parts stored so far are gone: upload the file again",
	"InvalidPart": "S3 does not have every part this upload stored (a part was lost or replaced outside chunkup), " +
		"so the object cannot be assembled: upload the file again",
	"NoSuchBucket": "the upload's bucket does not exist in S3: create the bucket (or use one that exists), " +
		"then upload the file again",
	"AccessDenied": "S3 refused chunkup's credentials for the upload's bucket or key: grant them access " +
		"(credentials, bucket policy), then upload the file again",
	"EntityTooSmall": "S3 refused to assemble the object because a part is below its minimum part size " +
		"(5 MiB on AWS): upload the file again with a chunk size of at least that",
	"EntityTooLarge": "S3 refused a part or object as larger than it accepts: upload the file again with a " +
		"smaller chunk size",
	"InvalidBucketName": "S3 does not accept the upload's bucket name: use a valid bucket name, then upload " +
		"the file again",
	// At completion (a part's own refusal is retried, corrupted): the CRC32Cs given for
	// the parts, or for the whole object, are not those of the bytes S3 holds. SeaweedFS
	// lists no part checksums, so a direct upload's wrong report shows only here.
	"BadDigest":                   badDigest,
	"XAmzContentChecksumMismatch": badDigest,
}

const badDigest = "S3 found that the parts it holds do not have the CRC32Cs given for them (for a direct " +
	"upload: a part's reported CRC32C is not that of the bytes put), so no object was made: upload the file again"

// Reason is what an upload that failed with err records as its reason: for the S3
// errors a caller can act on, plain words saying what happened and what to do, with
// the store's answer after them; otherwise err's own text.
func Reason(err error) string {
	var api smithy.APIError
	if !errors.As(err, &api) {
		return err.Error()
	}
	plain, ok := plainReasons[api.ErrorCode()]
	if !ok {
		return err.Error()
	}
	return plain + " (S3 answered: " + err.Error() + ")"
}
