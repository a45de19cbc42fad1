package s3store

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// ObjectInfo is what S3 says of an object.
type ObjectInfo struct {
	Size int64
	ETag string
	// CRC32C of the whole object, when the store keeps one for it (HasCRC32C): a
	// full-object checksum, or the checksum of an object put in one piece.
	CRC32C    uint32
	HasCRC32C bool
	// UploadID is the chunkup upload that wrote it ("" when unknown).
	UploadID string
	// LastModified is when it was written; ContentType what it was stored with.
	LastModified time.Time
	ContentType  string
}

// Head returns what S3 says of object bucket/key, its whole-object CRC32C included when
// the store has one.
func (s *Store) Head(ctx context.Context, bucket, key string) (ObjectInfo, error) {
	out, err := s.api.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key),
		ChecksumMode: types.ChecksumModeEnabled})
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("head object: %w", err)
	}
	info := ObjectInfo{Size: aws.ToInt64(out.ContentLength), ETag: aws.ToString(out.ETag), UploadID: out.Metadata[MetaUploadID],
		LastModified: aws.ToTime(out.LastModified), ContentType: aws.ToString(out.ContentType)}
	// A composite checksum ("…-N") is a checksum of the parts' checksums, not the
	// object's; only a full-object one, or one of an object put whole, is.
	if c := aws.ToString(out.ChecksumCRC32C); c != "" && !strings.Contains(c, "-") &&
		(out.ChecksumType == types.ChecksumTypeFullObject || !strings.Contains(info.ETag, "-")) {
		if b, err := base64.StdEncoding.DecodeString(c); err == nil && len(b) == 4 {
			info.CRC32C, info.HasCRC32C = binary.BigEndian.Uint32(b), true
		}
	}
	return info, nil
}

// ListedObject is one object of a listing.
type ListedObject struct {
	Key          string
	Size         int64
	ETag         string
	LastModified time.Time
}

// List lists at most limit objects of bucket whose keys begin with prefix and sort after
// the key after ("" from the first), in key order, and whether more follow.
func (s *Store) List(ctx context.Context, bucket, prefix, after string, limit int) ([]ListedObject, bool, error) {
	in := &s3.ListObjectsV2Input{Bucket: aws.String(bucket), MaxKeys: aws.Int32(int32(limit))}
	if prefix != "" {
		in.Prefix = aws.String(prefix)
	}
	if after != "" {
		in.StartAfter = aws.String(after)
	}
	out, err := s.api.ListObjectsV2(ctx, in)
	if err != nil {
		return nil, false, fmt.Errorf("list objects: %w", err)
	}
	objs := make([]ListedObject, 0, len(out.Contents))
	for _, o := range out.Contents {
		objs = append(objs, ListedObject{Key: aws.ToString(o.Key), Size: aws.ToInt64(o.Size), ETag: aws.ToString(o.ETag),
			LastModified: aws.ToTime(o.LastModified)})
	}
	return objs, aws.ToBool(out.IsTruncated), nil
}

// OpenRange reads length bytes of object bucket/key from offset (length 0: to the end).
func (s *Store) OpenRange(ctx context.Context, bucket, key string, offset, length int64) (io.ReadCloser, error) {
	in := &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}
	if offset > 0 || length > 0 {
		r := fmt.Sprintf("bytes=%d-", offset)
		if length > 0 {
			r += fmt.Sprint(offset + length - 1)
		}
		in.Range = aws.String(r)
	}
	out, err := s.api.GetObject(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("get object: %w", err)
	}
	return out.Body, nil
}

// NotFound reports whether err says the object does not exist.
func NotFound(err error) bool {
	var nsk *types.NoSuchKey
	var nf *types.NotFound
	var ae smithy.APIError
	return errors.As(err, &nsk) || errors.As(err, &nf) ||
		(errors.As(err, &ae) && (ae.ErrorCode() == "NoSuchKey" || ae.ErrorCode() == "NotFound"))
}
