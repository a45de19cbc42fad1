package s3store

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
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
//
// The AWS SDK's presign client runs an operation's whole middleware stack for each URL,
// endpoint rules included, whose resolver alone grows a goroutine's stack by tens of
// kilobytes each time: for a direct upload that signs each of its parts apart, that
// was most of the server's CPU per part. So the first part of an upload is signed by the
// SDK's presign client, and its URL, without its signature, is the template the
// others are signed from with the SDK's own SigV4 signer (the same signer, options and
// headers the presign client uses): only the part number and the signed headers' values
// differ from part to part.
type Presigner struct {
	p      *s3.PresignClient
	signer *v4.Signer
	creds  aws.CredentialsProvider

	mu    sync.Mutex
	forms map[partForm]*form
}

// form is a template of an upload's part URLs: the URL without its signature, and the
// region and service the presign client signed for (its endpoint rules may choose
// another region than the client's).
type form struct {
	u               *url.URL
	region, service string
}

// partForm names the shape of an upload's part URLs: the same object, multipart
// upload, and signed headers.
type partForm struct {
	bucket, key, uploadID string
	sized, summed         bool
}

// maxForms bounds the templates kept: one per upload being signed for, a few hundred
// bytes each. Past it they are all dropped rather than tracked for eviction: the next
// part of each upload is signed by the presign client once more, and makes its template
// again.
const maxForms = 4096

// authParams are the query parameters a presigned URL's signing adds.
var authParams = []string{"X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires",
	"X-Amz-SignedHeaders", "X-Amz-Signature", "X-Amz-Security-Token"}

// NewPresigner signs for client's store; publicEndpoint, when set, is the store's
// address as clients reach it (e.g. https://s3.example.com), in place of client's.
func NewPresigner(client *s3.Client, publicEndpoint string, creds aws.CredentialsProvider) *Presigner {
	o := client.Options()
	if creds == nil {
		creds = o.Credentials
	}
	return &Presigner{
		p: s3.NewPresignClient(client, func(o *s3.PresignOptions) {
			o.ClientOptions = append(o.ClientOptions, func(o *s3.Options) { o.Credentials = creds })
			if publicEndpoint != "" {
				o.ClientOptions = append(o.ClientOptions, func(o *s3.Options) { o.BaseEndpoint = aws.String(publicEndpoint) })
			}
		}),
		// As the S3 client's own signer (s3.Options.HTTPSignerV4's default): S3 takes
		// object keys' paths escaped once.
		signer: v4.NewSigner(func(so *v4.SignerOptions) { so.DisableURIPathEscaping = true }),
		creds:  creds,
		forms:  map[partForm]*form{},
	}
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
	f := partForm{bucket: bucket, key: key, uploadID: uploadID, sized: size > 0, summed: crc != nil}
	p.mu.Lock()
	fm := p.forms[f]
	p.mu.Unlock()
	if fm != nil && p.creds != nil {
		return p.signFromForm(ctx, fm, n, ttl, size, crc)
	}
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
	if u, err := url.Parse(req.URL); err == nil && req.Method == http.MethodPut {
		q := u.Query()
		// The credential's scope: KEY/DATE/REGION/SERVICE/aws4_request.
		if scope := strings.Split(q.Get("X-Amz-Credential"), "/"); len(scope) == 5 {
			for _, a := range authParams {
				q.Del(a)
			}
			u.RawQuery = q.Encode()
			p.mu.Lock()
			if len(p.forms) >= maxForms {
				clear(p.forms)
			}
			p.forms[f] = &form{u: u, region: scope[2], service: scope[3]}
			p.mu.Unlock()
		}
	}
	return Signed{URL: req.URL, Method: req.Method, Headers: h}, nil
}

// signFromForm signs part n from the template of its upload's part URLs.
func (p *Presigner) signFromForm(ctx context.Context, fm *form, n uint32, ttl time.Duration, size int64, crc *uint32) (Signed, error) {
	u := *fm.u
	q := u.Query()
	q.Set("partNumber", strconv.FormatUint(uint64(n), 10))
	q.Set("X-Amz-Expires", strconv.FormatInt(int64(ttl/time.Second), 10))
	u.RawQuery = q.Encode()
	req := &http.Request{Method: http.MethodPut, URL: &u, Host: u.Host, Header: http.Header{}}
	if size > 0 {
		req.ContentLength = size
	}
	if crc != nil {
		req.Header.Set("X-Amz-Checksum-Crc32c", CRC32CHeader(*crc))
	}
	creds, err := p.creds.Retrieve(ctx)
	if err != nil {
		return Signed{}, fmt.Errorf("sign part %d: credentials: %w", n, err)
	}
	signed, h, err := p.signer.PresignHTTP(ctx, creds, req, "UNSIGNED-PAYLOAD", fm.service, fm.region, time.Now())
	if err != nil {
		return Signed{}, fmt.Errorf("sign part %d: %w", n, err)
	}
	h.Del("Host")
	return Signed{URL: signed, Method: http.MethodPut, Headers: h}, nil
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
