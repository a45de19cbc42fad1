package s3store

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/smithy-go"

	"github.com/chunkup/chunkup/internal/retry"
)

// MetaUploadID is the object metadata (x-amz-meta-chunkup-upload-id) naming the upload
// that wrote an object, so that a write retried after it succeeded, or a completion
// retried after it completed, can tell the upload's own object from another's.
const MetaUploadID = "chunkup-upload-id"

// Owner is the upload an object write belongs to.
type Owner struct {
	// UploadID is recorded with the object (MetaUploadID).
	UploadID string
	// IfAbsent: the write must not replace an object at its key. It is made with S3's
	// conditional write (If-None-Match: *) on PutObject and CompleteMultipartUpload;
	// where the store cannot (WithoutConditionalWrites, or it answers 501), the key is
	// looked at first, which leaves a window between the look and the write.
	IfAbsent bool
}

// ExistsError says that an object is at the key already, not written by the upload,
// and the upload asked not to replace one. It is permanent: trying again cannot help.
type ExistsError struct {
	Bucket, Key string
}

func (e *ExistsError) Error() string {
	return fmt.Sprintf("an object exists already at key %q and the upload was made with if_absent: it was not replaced; delete it or upload under another key", e.Key)
}

// WithoutConditionalWrites makes the Store check that an IfAbsent object's key is free
// with HeadObject before writing it, for S3-compatible stores that do not support
// If-None-Match on writes.
func WithoutConditionalWrites() Option { return func(s *Store) { s.conditional.Store(false) } }

// ifAbsent runs write (which must be repeatable) as o asks: unconditionally when o
// allows replacing an object; otherwise conditionally (cond true), or after a look at
// the key when the store cannot write conditionally. An object that is the upload's
// own (its metadata names the upload, and it has size bytes) is a write retried after
// it succeeded: its ETag is returned.
func (s *Store) ifAbsent(ctx context.Context, bucket, key string, o Owner, size int64, write func(cond bool) (string, error)) (string, error) {
	if !o.IfAbsent {
		return write(false)
	}
	if s.conditional.Load() {
		etag, err := write(true)
		switch {
		case err == nil:
			return etag, nil
		case httpStatus(err) == http.StatusPreconditionFailed:
			return s.ownObject(ctx, bucket, key, o, size, err)
		case httpStatus(err) == http.StatusConflict:
			// Another conditional write to the key is in flight (AWS:
			// ConditionalRequestConflict): its outcome decides on the next attempt.
			return "", &retry.TransientError{Err: err}
		case httpStatus(err) != http.StatusNotImplemented:
			return "", err
		}
		s.conditional.Store(false) // the store does not support it: look first from now on
	}
	etag, err := s.ownObject(ctx, bucket, key, o, size, nil)
	if err == nil || !NotFound(err) {
		return etag, err
	}
	return write(false)
}

// ownObject returns the ETag of the object at bucket/key if it is o's upload's own with
// size bytes; an *ExistsError (permanent) if another object is there; the HeadObject
// error (NotFound included) otherwise. refused is the conditional write's error, if any.
func (s *Store) ownObject(ctx context.Context, bucket, key string, o Owner, size int64, refused error) (string, error) {
	info, err := s.Head(ctx, bucket, key)
	if err != nil {
		if refused != nil && NotFound(err) {
			// Refused, and gone since: a race with a delete; the next attempt decides.
			return "", &retry.TransientError{Err: refused}
		}
		return "", err
	}
	if o.UploadID != "" && info.UploadID == o.UploadID && info.Size == size {
		return info.ETag, nil
	}
	return "", &retry.PermanentError{Err: &ExistsError{Bucket: bucket, Key: key}}
}

// httpStatus is the HTTP status of an S3 error, or 0.
func httpStatus(err error) int {
	var hs interface{ HTTPStatusCode() int }
	if errors.As(err, &hs) {
		return hs.HTTPStatusCode()
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "PreconditionFailed":
			return http.StatusPreconditionFailed
		case "ConditionalRequestConflict":
			return http.StatusConflict
		case "NotImplemented":
			return http.StatusNotImplemented
		}
	}
	return 0
}

// ownerMetadata is the metadata an object written for o carries.
func ownerMetadata(o Owner) map[string]string {
	if o.UploadID == "" {
		return nil
	}
	return map[string]string{MetaUploadID: o.UploadID}
}

var ifNoneMatchAny = aws.String("*")
