package s3store

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/chunkup/chunkup/internal/crc"
)

// Direct uploads: the client puts the parts into S3 itself with URLs chunkup signs
// (Presigner), and chunkup checks what S3 holds (ListParts) before it completes.

// CreateDirectMultipart starts a multipart upload for a direct upload of bucket/key:
// checksummed (CRC32C FULL_OBJECT, see CreateMultipart) only when asked, because then
// S3 refuses every part that does not carry its CRC32C, and a client such as Uppy's
// sends none.
func (s *Store) CreateDirectMultipart(ctx context.Context, bucket, key, ct string, o Owner, checksummed bool) (string, error) {
	in := &s3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key), ContentType: contentType(ct),
		Metadata: ownerMetadata(o)}
	if checksummed {
		in.ChecksumAlgorithm, in.ChecksumType = types.ChecksumAlgorithmCrc32c, types.ChecksumTypeFullObject
	}
	out, err := s.api.CreateMultipartUpload(ctx, in)
	if err != nil {
		return "", fmt.Errorf("create multipart upload: %w", err)
	}
	return aws.ToString(out.UploadId), nil
}

// ListedPart is a part S3 holds of a multipart upload.
type ListedPart struct {
	N    uint32
	ETag string // as S3 gives it, quoted
	Size int64
	// CRC32C is the part's checksum when S3 keeps one ("" otherwise), base64 as in
	// the x-amz-checksum-crc32c header.
	CRC32C string
}

// ListParts returns every part S3 holds of multipart upload uploadID, in order.
func (s *Store) ListParts(ctx context.Context, bucket, key, uploadID string) ([]ListedPart, error) {
	var parts []ListedPart
	var marker *string
	for {
		out, err := s.api.ListParts(ctx, &s3.ListPartsInput{Bucket: aws.String(bucket), Key: aws.String(key),
			UploadId: aws.String(uploadID), PartNumberMarker: marker})
		if err != nil {
			return nil, fmt.Errorf("list parts: %w", err)
		}
		for _, p := range out.Parts {
			parts = append(parts, ListedPart{N: uint32(aws.ToInt32(p.PartNumber)), ETag: aws.ToString(p.ETag),
				Size: aws.ToInt64(p.Size), CRC32C: aws.ToString(p.ChecksumCRC32C)})
		}
		next := aws.ToString(out.NextPartNumberMarker)
		if !aws.ToBool(out.IsTruncated) || next == "" || next == aws.ToString(marker) {
			return parts, nil // (a marker that does not move on would list for ever)
		}
		marker = out.NextPartNumberMarker
	}
}

// SameETag reports whether two ETags name the same bytes: S3 quotes them, clients
// (and browsers reading the header) may not.
func SameETag(a, b string) bool {
	return a != "" && strings.Trim(a, `"`) == strings.Trim(b, `"`)
}

// Presigner signs the requests a direct upload's client sends to S3 itself, for the
// store's address as clients reach it (which may differ from chunkup's).
type Presigner struct {
	p *s3.PresignClient
}

// NewPresigner signs for client's store; publicEndpoint, when set, is the store's
// address as clients reach it (e.g. https://s3.example.com), in place of client's.
func NewPresigner(client *s3.Client, publicEndpoint string) *Presigner {
	return &Presigner{p: s3.NewPresignClient(client, func(o *s3.PresignOptions) {
		if publicEndpoint != "" {
			o.ClientOptions = append(o.ClientOptions, func(o *s3.Options) { o.BaseEndpoint = aws.String(publicEndpoint) })
		}
	})}
}

// Signed is a presigned request: its URL, and the headers the client must send with it
// exactly (they are signed).
type Signed struct {
	URL     string
	Method  string
	Headers http.Header
}

// SignPart signs the PUT of part n of multipart upload uploadID of bucket/key, valid for
// ttl. With size > 0 the request must carry exactly size bytes (Content-Length is
// signed); with crc, S3 checks the bytes against it (x-amz-checksum-crc32c is signed).
func (p *Presigner) SignPart(ctx context.Context, bucket, key, uploadID string, n uint32, ttl time.Duration, size int64, crc *uint32) (Signed, error) {
	in := &s3.UploadPartInput{Bucket: aws.String(bucket), Key: aws.String(key), UploadId: aws.String(uploadID),
		PartNumber: aws.Int32(int32(n))}
	if size > 0 {
		in.ContentLength = aws.Int64(size)
	}
	if crc != nil {
		in.ChecksumCRC32C = aws.String(CRC32CHeader(*crc))
	}
	req, err := p.p.PresignUploadPart(ctx, in, s3.WithPresignExpires(ttl))
	if err != nil {
		return Signed{}, fmt.Errorf("sign part %d: %w", n, err)
	}
	h := req.SignedHeader.Clone()
	h.Del("Host")
	return Signed{URL: req.URL, Method: req.Method, Headers: h}, nil
}

// ObjectCRC reads object bucket/key whole and returns its CRC32C: for a direct upload
// whose client gave no checksums, the one way to learn the object's.
func (s *Store) ObjectCRC(ctx context.Context, bucket, key string) (uint32, int64, error) {
	body, _, err := s.Open(ctx, bucket, key)
	if err != nil {
		return 0, 0, err
	}
	defer body.Close()
	h := crc.New()
	n, err := io.Copy(h, body)
	if err != nil {
		return 0, 0, fmt.Errorf("read object %s: %w", key, err)
	}
	return h.Sum32(), n, nil
}
