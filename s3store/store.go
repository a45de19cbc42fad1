// Package s3store is chunkup's side of S3: the one client configuration (NewClient),
// and the lifecycle of an upload's object behind one narrow interface to the AWS
// client (API): a one-chunk upload's single PutObject; a multipart upload's creation,
// parts, completion (with the HeadObject check when a retried completion finds the
// multipart upload gone), abort, and the clean-up of stray multipart uploads; deleting
// an object; reading one back. Every role that talks to S3 does it through a Store.
package s3store

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/internal/retry"
)

// API is the part of the AWS S3 client chunkup uses.
type API interface {
	PutObject(ctx context.Context, in *s3.PutObjectInput, opts ...func(*s3.Options)) (*s3.PutObjectOutput, error)
	GetObject(ctx context.Context, in *s3.GetObjectInput, opts ...func(*s3.Options)) (*s3.GetObjectOutput, error)
	HeadObject(ctx context.Context, in *s3.HeadObjectInput, opts ...func(*s3.Options)) (*s3.HeadObjectOutput, error)
	DeleteObject(ctx context.Context, in *s3.DeleteObjectInput, opts ...func(*s3.Options)) (*s3.DeleteObjectOutput, error)
	CreateMultipartUpload(ctx context.Context, in *s3.CreateMultipartUploadInput, opts ...func(*s3.Options)) (*s3.CreateMultipartUploadOutput, error)
	UploadPart(ctx context.Context, in *s3.UploadPartInput, opts ...func(*s3.Options)) (*s3.UploadPartOutput, error)
	CompleteMultipartUpload(ctx context.Context, in *s3.CompleteMultipartUploadInput, opts ...func(*s3.Options)) (*s3.CompleteMultipartUploadOutput, error)
	AbortMultipartUpload(ctx context.Context, in *s3.AbortMultipartUploadInput, opts ...func(*s3.Options)) (*s3.AbortMultipartUploadOutput, error)
	ListParts(ctx context.Context, in *s3.ListPartsInput, opts ...func(*s3.Options)) (*s3.ListPartsOutput, error)
	ListMultipartUploads(ctx context.Context, in *s3.ListMultipartUploadsInput, opts ...func(*s3.Options)) (*s3.ListMultipartUploadsOutput, error)
	ListObjectsV2(ctx context.Context, in *s3.ListObjectsV2Input, opts ...func(*s3.Options)) (*s3.ListObjectsV2Output, error)
	HeadBucket(ctx context.Context, in *s3.HeadBucketInput, opts ...func(*s3.Options)) (*s3.HeadBucketOutput, error)
	CreateBucket(ctx context.Context, in *s3.CreateBucketInput, opts ...func(*s3.Options)) (*s3.CreateBucketOutput, error)
}

var _ API = (*s3.Client)(nil)

// Store does chunkup's S3 operations.
type Store struct {
	api       API
	checksums bool
	// conditional: the store supports If-None-Match on writes (see Owner.IfAbsent).
	conditional atomic.Bool
}

// Option configures a Store.
type Option func(*Store)

// WithoutChecksums makes the Store send bytes as the S3 client did before chunkup sent
// checksums: SigV4-signed payloads (SHA-256 of every byte, both sides) and no
// x-amz-checksum-* headers, for S3-compatible stores that reject checksum headers or
// full-object multipart checksums.
func WithoutChecksums() Option { return func(s *Store) { s.checksums = false } }

// New returns a Store calling api. By default every chunk goes to S3 with
// UNSIGNED-PAYLOAD and its CRC32C in x-amz-checksum-crc32c, so S3 verifies the client's
// checksum itself instead of both sides hashing every byte with SHA-256 (what the AWS
// SDK does on a plain-HTTP endpoint); multipart uploads are created as CRC32C
// FULL_OBJECT and completed with the whole object's CRC32C (docs/s3-checksums.md).
func New(api API, opts ...Option) *Store {
	s := &Store{api: api, checksums: true}
	s.conditional.Store(true)
	for _, o := range opts {
		o(s)
	}
	return s
}

// Checksums reports whether the Store sends CRC32C checksums (see New): a multipart
// upload it creates is then a checksummed one (see CreateMultipart).
func (s *Store) Checksums() bool { return s.checksums }

func contentType(ct string) *string {
	if ct == "" {
		return nil
	}
	return aws.String(ct)
}

// EnsureBucket creates bucket unless it exists.
func (s *Store) EnsureBucket(ctx context.Context, bucket string) error {
	if _, err := s.api.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(bucket)}); err == nil {
		return nil
	}
	_, err := s.api.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)})
	var owned *types.BucketAlreadyOwnedByYou
	if err != nil && !errors.As(err, &owned) {
		return fmt.Errorf("create bucket %s: %w", bucket, err)
	}
	return nil
}

// CRC32CHeader is the value of an x-amz-checksum-crc32c header: the base64 of the
// checksum's four big-endian bytes.
func CRC32CHeader(sum uint32) string {
	return base64.StdEncoding.EncodeToString(binary.BigEndian.AppendUint32(nil, sum))
}

// chunkOptions are the per-call options of a request that carries a chunk's bytes
// with its checksum:
//   - UNSIGNED-PAYLOAD instead of the SHA-256 the SDK computes on plain HTTP (on HTTPS
//     it sends UNSIGNED-PAYLOAD already); the x-amz-checksum-crc32c header is the
//     integrity check, verified by S3. Per call, not client-wide: an operation without
//     the payload-hash middleware would fail to build with the swap in its stack.
//   - no "Expect: 100-continue": Go's transport would wait for the 100 response (a
//     round trip) before every chunk-sized body.
var chunkOptions = []func(*s3.Options){
	s3.WithAPIOptions(v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware),
	func(o *s3.Options) { o.ContinueHeaderThresholdBytes = -1 },
}

func (s *Store) callOptions() []func(*s3.Options) {
	if !s.checksums {
		return nil
	}
	return chunkOptions
}

// Put stores data as the whole object bucket/key and returns its ETag. It computes the
// data's CRC32C; PutChunk takes a known one.
func (s *Store) Put(ctx context.Context, bucket, key, ct string, data []byte) (string, error) {
	return s.PutChunk(ctx, bucket, key, ct, Owner{}, data, crc.Checksum(data))
}

// PutChunk stores data, whose CRC32C is sum, as the whole object bucket/key (a
// one-chunk upload) for o, and returns its ETag. S3 verifies sum (unless
// WithoutChecksums). With o.IfAbsent, another object at the key is an *ExistsError.
func (s *Store) PutChunk(ctx context.Context, bucket, key, ct string, o Owner, data []byte, sum uint32) (string, error) {
	return s.ifAbsent(ctx, bucket, key, o, int64(len(data)), func(cond bool) (string, error) {
		in := &s3.PutObjectInput{
			Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(data),
			ContentLength: aws.Int64(int64(len(data))), ContentType: contentType(ct), Metadata: ownerMetadata(o),
		}
		if s.checksums {
			in.ChecksumCRC32C = aws.String(CRC32CHeader(sum))
		}
		if cond {
			in.IfNoneMatch = ifNoneMatchAny
		}
		out, err := s.api.PutObject(ctx, in, s.callOptions()...)
		if err != nil {
			return "", fmt.Errorf("put object: %w", checksumTransient(err))
		}
		return aws.ToString(out.ETag), nil
	})
}

// CreateMultipart starts a multipart upload for bucket/key and returns its id, and
// whether it is checksummed: created as CRC32C FULL_OBJECT, so that every part must
// carry its CRC32C and the completion the whole object's (the caller records this with
// the id, and passes it to UploadPart and Complete, so that a multipart upload made by
// a process with other settings is finished the way it was begun).
// The object it makes carries o's upload id (MetaUploadID).
func (s *Store) CreateMultipart(ctx context.Context, bucket, key, ct string, o Owner) (id string, checksummed bool, err error) {
	in := &s3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key), ContentType: contentType(ct),
		Metadata: ownerMetadata(o)}
	if s.checksums {
		in.ChecksumAlgorithm, in.ChecksumType = types.ChecksumAlgorithmCrc32c, types.ChecksumTypeFullObject
	}
	out, err := s.api.CreateMultipartUpload(ctx, in)
	if err != nil {
		return "", false, fmt.Errorf("create multipart upload: %w", err)
	}
	return aws.ToString(out.UploadId), s.checksums, nil
}

// UploadPart stores data, whose CRC32C is sum, as part n of multipart upload uploadID
// and returns its ETag. For a checksummed multipart upload S3 verifies sum.
func (s *Store) UploadPart(ctx context.Context, bucket, key, uploadID string, checksummed bool, n uint32, data []byte, sum uint32) (string, error) {
	in := &s3.UploadPartInput{
		Bucket: aws.String(bucket), Key: aws.String(key), UploadId: aws.String(uploadID),
		PartNumber: aws.Int32(int32(n)), Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data))),
	}
	// The multipart upload decides, not the Store's setting: a checksummed one demands
	// each part's checksum, and a part of one that is not goes signed (SHA-256), so that
	// its bytes are checked either way.
	var opts []func(*s3.Options)
	if checksummed {
		in.ChecksumCRC32C = aws.String(CRC32CHeader(sum))
		opts = chunkOptions
	}
	out, err := s.api.UploadPart(ctx, in, opts...)
	if err != nil {
		return "", fmt.Errorf("upload part %d: %w", n, checksumTransient(err))
	}
	return aws.ToString(out.ETag), nil
}

// checksumTransient marks S3's refusal of a chunk's checksum as worth retrying: the
// sender checked the bytes against the checksum before sending, so a mismatch is
// corruption on the way (AWS says BadDigest, MinIO XAmzContentChecksumMismatch).
// Without the mark, a 4xx would count as permanent and fail the upload.
func checksumTransient(err error) error {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "BadDigest", "XAmzContentChecksumMismatch", "InvalidDigest":
			return &retry.TransientError{Err: err}
		}
	}
	return err
}

// Part is a part of a multipart upload to complete.
type Part struct {
	N      uint32
	ETag   string
	CRC32C uint32
}

// Complete completes multipart upload uploadID from parts (in order) and returns the
// object's ETag. size and sum are the whole object's size and CRC32C: for a
// checksummed multipart upload S3 checks both (MpuObjectSize, and the CRC32C it
// combines from the parts' against sum), so the object carries the client's checksum
// end to end. An earlier completer may have completed it and died before recording
// that: when S3 says the multipart upload is gone, the object is accepted if it has
// the expected size (and, where S3 reports it, the expected CRC32C) and is not another
// upload's. With o.IfAbsent the completion is conditional: another object at the key is
// an *ExistsError, and the multipart upload is left for the caller to abort.
func (s *Store) Complete(ctx context.Context, bucket, key, uploadID string, checksummed bool, parts []Part, size int64, sum uint32, o Owner) (string, error) {
	done := make([]types.CompletedPart, len(parts))
	for i, p := range parts {
		done[i] = types.CompletedPart{ETag: aws.String(p.ETag), PartNumber: aws.Int32(int32(p.N))}
		if checksummed {
			done[i].ChecksumCRC32C = aws.String(CRC32CHeader(p.CRC32C))
		}
	}
	in := &s3.CompleteMultipartUploadInput{
		Bucket: aws.String(bucket), Key: aws.String(key), UploadId: aws.String(uploadID),
		MultipartUpload: &types.CompletedMultipartUpload{Parts: done},
	}
	if checksummed {
		in.ChecksumCRC32C, in.ChecksumType = aws.String(CRC32CHeader(sum)), types.ChecksumTypeFullObject
		in.MpuObjectSize = aws.Int64(size)
	}
	etag, err := s.ifAbsent(ctx, bucket, key, o, size, func(cond bool) (string, error) {
		in.IfNoneMatch = nil
		if cond {
			in.IfNoneMatch = ifNoneMatchAny
		}
		out, err := s.api.CompleteMultipartUpload(ctx, in)
		if err != nil {
			var ae smithy.APIError
			if errors.As(err, &ae) && (ae.ErrorCode() == "BadDigest" || ae.ErrorCode() == "XAmzContentChecksumMismatch") {
				// The parts S3 holds do not add up to the checksum given: asking again
				// gets the same answer (unlike a part's bytes, nothing here is resent).
				return "", &retry.PermanentError{Err: err}
			}
			return "", err
		}
		// A store that completes a completed upload again (SeaweedFS, versitygw) does not
		// check the whole-object CRC32C a second time. SeaweedFS's answer still says the
		// object's; where the answer says none (versitygw), the object is looked at.
		got, kind := aws.ToString(out.ChecksumCRC32C), out.ChecksumType
		if checksummed && got == "" {
			head, herr := s.api.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), ChecksumMode: types.ChecksumModeEnabled})
			switch {
			case herr != nil && (NotFound(herr) || !Permanent(herr)):
				// %v: the HEAD's status is not the completion's, which ifAbsent reads.
				return "", &retry.TransientError{Err: fmt.Errorf("complete multipart upload: its answer gave no CRC32C, and looking at the object failed: %v", herr)}
			case herr != nil:
				// A store that will not show the object (credentials that may not read
				// it): the completion stands as S3 answered it.
			case aws.ToString(head.ETag) != aws.ToString(out.ETag) && (o.UploadID == "" || head.Metadata[MetaUploadID] != o.UploadID):
				// Another upload's object, written to the same key since: not this
				// completion's to judge.
			case head.ChecksumType == types.ChecksumTypeFullObject: // a composite one is not the whole object's
				got, kind = aws.ToString(head.ChecksumCRC32C), head.ChecksumType
			}
		}
		if checksummed && got != "" && !strings.Contains(got, "-") && kind != types.ChecksumTypeComposite && got != CRC32CHeader(sum) {
			return "", &retry.PermanentError{Err: fmt.Errorf("complete multipart upload: the object has CRC32C %s, want %s", got, CRC32CHeader(sum))}
		}
		return aws.ToString(out.ETag), nil
	})
	if err == nil {
		return etag, nil
	}
	// A completion retried after an earlier one completed the upload (its completer died
	// before recording it) meets NoSuchUpload, or, on MinIO when the earlier request was
	// cut off between moving the parts into the object and deleting the upload,
	// InvalidPart for parts that are in the object now. Either way the object may be
	// this upload's; for InvalidPart only its own upload id in the object's metadata
	// says so, since the answer also means a part really is missing.
	var exists *ExistsError
	invalidPart := InvalidPart(err)
	if errors.As(err, &exists) || !NoSuchUpload(err) && !invalidPart {
		return "", fmt.Errorf("complete multipart upload: %w", err)
	}
	head, herr := s.api.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), ChecksumMode: types.ChecksumModeEnabled})
	switch {
	case herr != nil && !NotFound(herr) && !Permanent(herr):
		// Whether the object is this upload's is not known yet: ask again later rather
		// than let the completion's 4xx fail an upload whose object may be there.
		return "", &retry.TransientError{Err: fmt.Errorf("complete multipart upload: %w; and looking for the object failed: %w", err, herr)}
	case herr != nil:
		return "", fmt.Errorf("complete multipart upload: %w; and the object is not there: %w", err, herr)
	}
	other := head.Metadata[MetaUploadID]
	if o.UploadID != "" && other != "" && other != o.UploadID {
		return "", &retry.PermanentError{Err: fmt.Errorf("complete multipart upload: %w; the object there is upload %s's", err, other)}
	}
	if invalidPart && (o.UploadID == "" || other != o.UploadID) {
		return "", &retry.PermanentError{Err: fmt.Errorf("complete multipart upload: %w", err)}
	}
	if aws.ToInt64(head.ContentLength) != size {
		return "", fmt.Errorf("complete multipart upload: %w; the object there has %d bytes, want %d", err, aws.ToInt64(head.ContentLength), size)
	}
	if got := aws.ToString(head.ChecksumCRC32C); checksummed && got != "" && head.ChecksumType == types.ChecksumTypeFullObject && got != CRC32CHeader(sum) {
		return "", fmt.Errorf("complete multipart upload: %w; the object there has CRC32C %s, want %s", err, got, CRC32CHeader(sum))
	}
	return aws.ToString(head.ETag), nil
}

// Abort aborts multipart upload uploadID; one that is gone already counts as aborted.
func (s *Store) Abort(ctx context.Context, bucket, key, uploadID string) error {
	_, err := s.api.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
		Bucket: aws.String(bucket), Key: aws.String(key), UploadId: aws.String(uploadID),
	})
	if err != nil && !NoSuchUpload(err) {
		return fmt.Errorf("abort multipart upload: %w", err)
	}
	return nil
}

// Delete deletes object bucket/key.
func (s *Store) Delete(ctx context.Context, bucket, key string) error {
	if _, err := s.api.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}); err != nil {
		return fmt.Errorf("delete object: %w", err)
	}
	return nil
}

// Open reads object bucket/key and returns its body and size.
func (s *Store) Open(ctx context.Context, bucket, key string) (io.ReadCloser, int64, error) {
	out, err := s.api.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		return nil, 0, fmt.Errorf("get object: %w", err)
	}
	return out.Body, aws.ToInt64(out.ContentLength), nil
}

// FirstBytes reads at most n bytes from the start of object bucket/key (one ranged
// GET): what the completer needs to recognize an object's type without reading all of
// it. An empty object has none.
func (s *Store) FirstBytes(ctx context.Context, bucket, key string, n int64) ([]byte, error) {
	body, err := s.OpenRange(ctx, bucket, key, 0, n)
	if err != nil {
		var re interface{ ErrorCode() string }
		if errors.As(err, &re) && re.ErrorCode() == "InvalidRange" {
			return nil, nil // an empty object has no byte 0
		}
		return nil, err
	}
	defer body.Close()
	return io.ReadAll(io.LimitReader(body, n))
}

// KeyOwnedBy reports whether object key belongs to upload id alone: one of its
// "/"-separated segments is the id, as in every default key (prefix/ID/name, with or
// without a tenant in front). A key a client chose may be shared by another upload at
// the same moment, so its multipart uploads cannot be told apart and AbortStrays must
// not be run on it.
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

// AbortStrays aborts every multipart upload in progress for exactly bucket/key whose
// UploadId is not keep (all of them when keep is empty), and returns the ids it
// aborted. Several workers may each create a multipart upload for one upload before one
// id is recorded; a worker killed (or cancelled) between S3 creating its multipart
// upload and Redis deciding whose it is leaves that multipart upload behind, holding
// its parts' storage until someone aborts it. The caller must own key (KeyOwnedBy).
// An upload that is gone already (NoSuchUpload) counts as aborted, and a listing
// answered NoSuchUpload (gofakes3, chunkup dev's S3, says so of a bucket that never
// had a multipart upload) finds none: there is nothing to abort, which is no error. It
// stops at the first other error, returning what it aborted before.
func (s *Store) AbortStrays(ctx context.Context, bucket, key, keep string) ([]string, error) {
	var aborted []string
	seen := map[string]bool{}
	// abort aborts the strays among uploads not seen before and says how many it found.
	abort := func(uploads []types.MultipartUpload) (int, error) {
		found := 0
		for _, u := range uploads {
			// The prefix also matches longer keys; only this exact key is the upload's.
			id := aws.ToString(u.UploadId)
			if aws.ToString(u.Key) != key || id == "" || id == keep || seen[id] {
				continue
			}
			seen[id] = true
			found++
			if err := s.Abort(ctx, bucket, key, id); err != nil {
				return found, fmt.Errorf("abort stray multipart upload %s of %s: %w", id, key, err)
			}
			aborted = append(aborted, id)
		}
		return found, nil
	}
	// The whole listing first, then the aborts: a page's markers name an upload of the
	// page before, which an abort would take away from under the next listing.
	var listed []types.MultipartUpload
	in := &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket), Prefix: aws.String(key)}
	if strayListPageSize > 0 {
		in.MaxUploads = aws.Int32(strayListPageSize)
	}
	fromStart := false
	for page := 1; page <= strayMaxPages; page++ {
		out, err := s.api.ListMultipartUploads(ctx, in)
		if err != nil && NoSuchUpload(err) {
			break
		}
		if err != nil && in.UploadIdMarker != nil && invalidArgument(err) {
			// The store refuses the next page's markers (versitygw 1.8 answers 400
			// InvalidArgument to an upload-id marker): abort what the pages before
			// showed, then list from the start again, in S3's largest pages, aborting
			// as it goes, until the first page shows no stray left.
			if _, err := abort(listed); err != nil {
				return aborted, err
			}
			listed, fromStart = nil, true
			in.KeyMarker, in.UploadIdMarker, in.MaxUploads = nil, nil, nil
			continue
		}
		if err != nil {
			return aborted, fmt.Errorf("list multipart uploads of %s: %w", key, err)
		}
		if fromStart {
			found, err := abort(out.Uploads)
			if err != nil || found == 0 || !aws.ToBool(out.IsTruncated) {
				return aborted, err
			}
			continue
		}
		listed = append(listed, out.Uploads...)
		if !aws.ToBool(out.IsTruncated) {
			break
		}
		km, um := aws.ToString(out.NextKeyMarker), aws.ToString(out.NextUploadIdMarker)
		if (km == "" && um == "") || (km == aws.ToString(in.KeyMarker) && um == aws.ToString(in.UploadIdMarker)) {
			break // a listing that does not advance: abort what it showed
		}
		in.KeyMarker, in.UploadIdMarker = aws.String(km), aws.String(um)
	}
	_, err := abort(listed)
	return aborted, err
}

// invalidArgument reports whether err is S3's InvalidArgument.
func invalidArgument(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == "InvalidArgument"
}

// InvalidPart reports whether err says a part named in a completion is not there (or
// has another ETag).
func InvalidPart(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == "InvalidPart"
}

// NoSuchUpload reports whether err says the multipart upload does not exist (any more).
func NoSuchUpload(err error) bool {
	var nsu *types.NoSuchUpload
	var ae smithy.APIError
	return errors.As(err, &nsu) || (errors.As(err, &ae) && ae.ErrorCode() == "NoSuchUpload")
}
