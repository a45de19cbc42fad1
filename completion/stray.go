package completion

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// MultipartAPI is the part of the S3 client that AbortStrayMultipart uses.
type MultipartAPI interface {
	ListMultipartUploads(ctx context.Context, in *s3.ListMultipartUploadsInput, opts ...func(*s3.Options)) (*s3.ListMultipartUploadsOutput, error)
	AbortMultipartUpload(ctx context.Context, in *s3.AbortMultipartUploadInput, opts ...func(*s3.Options)) (*s3.AbortMultipartUploadOutput, error)
}

var _ MultipartAPI = (*s3.Client)(nil)

// KeyOwnedBy reports whether object key belongs to upload id alone: one of its
// "/"-separated segments is the id, as in every default key (prefix/ID/name, with or
// without a tenant in front). A key a client chose (WithKey) may be shared by another
// upload at the same moment, so its multipart uploads cannot be told apart and
// AbortStrayMultipart must not be run on it.
func KeyOwnedBy(key, id string) bool {
	if id == "" {
		return false
	}
	for seg := range strings.SplitSeq(key, "/") {
		if seg == id {
			return true
		}
	}
	return false
}

// strayListPageSize is how many multipart uploads one ListMultipartUploads call asks
// for; zero leaves it to S3 (1,000). Tests make it small to exercise pagination.
var strayListPageSize int32

// strayMaxPages bounds the listing, so that a store that never stops saying
// IsTruncated cannot keep a completer or a cleanup sweep busy for ever.
const strayMaxPages = 100

// AbortStrayMultipart aborts every multipart upload in progress for exactly bucket/key
// whose UploadId is not keep (all of them when keep is empty), and returns the ids it
// aborted. Several workers may each create a multipart upload for one upload before one
// id is recorded; a worker killed (or cancelled) between S3 creating its multipart
// upload and Redis deciding whose it is leaves that multipart upload behind, holding
// its parts' storage until someone aborts it. The caller must own key (KeyOwnedBy).
// An upload that is gone already (NoSuchUpload) counts as aborted. It stops at the
// first other error, returning what it aborted before.
func AbortStrayMultipart(ctx context.Context, c MultipartAPI, bucket, key, keep string) ([]string, error) {
	var stray []string
	in := &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket), Prefix: aws.String(key)}
	if strayListPageSize > 0 {
		in.MaxUploads = aws.Int32(strayListPageSize)
	}
	for page := 1; ; page++ {
		out, err := c.ListMultipartUploads(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("list multipart uploads of %s: %w", key, err)
		}
		for _, u := range out.Uploads {
			// The prefix also matches longer keys; only this exact key is the upload's.
			if id := aws.ToString(u.UploadId); aws.ToString(u.Key) == key && id != "" && id != keep {
				stray = append(stray, id)
			}
		}
		if !aws.ToBool(out.IsTruncated) {
			break
		}
		km, um := aws.ToString(out.NextKeyMarker), aws.ToString(out.NextUploadIdMarker)
		if (km == "" && um == "") || (km == aws.ToString(in.KeyMarker) && um == aws.ToString(in.UploadIdMarker)) || page >= strayMaxPages {
			break // a listing that does not advance: abort what it showed
		}
		in.KeyMarker, in.UploadIdMarker = aws.String(km), aws.String(um)
	}
	var aborted []string
	for _, id := range stray {
		_, err := c.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
			Bucket: aws.String(bucket), Key: aws.String(key), UploadId: aws.String(id),
		})
		if err != nil && !noSuchUpload(err) {
			return aborted, fmt.Errorf("abort stray multipart upload %s of %s: %w", id, key, err)
		}
		aborted = append(aborted, id)
	}
	return aborted, nil
}

// noSuchUpload reports whether err says the multipart upload does not exist (any more).
func noSuchUpload(err error) bool {
	var nsu *types.NoSuchUpload
	var ae smithy.APIError
	return errors.As(err, &nsu) || (errors.As(err, &ae) && ae.ErrorCode() == "NoSuchUpload")
}
