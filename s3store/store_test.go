package s3store_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/s3store"
)

// TestAbortStraysPages lists one multipart upload per page from the real MinIO:
// every stray one is found across the pages and aborted, and the kept one stays.
func TestAbortStraysPages(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	minio := testenv.StartS3(t)
	minio.CreateBucket(t, "bkt")
	s3c := minio.Client(t)
	const key = "uploads/ID/f.bin"
	var ids []string
	for range 4 {
		out, err := s3c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String(key)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, aws.ToString(out.UploadId))
	}
	keep := ids[2]

	defer s3store.SetStrayListPageSize(1)()
	aborted, err := s3store.New(s3c).AbortStrays(ctx, "bkt", key, keep)
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Delete(slices.Clone(ids), 2, 3)
	slices.Sort(want)
	slices.Sort(aborted)
	if !slices.Equal(aborted, want) {
		t.Errorf("aborted %v, want %v", aborted, want)
	}
	out, err := s3c.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String("bkt"), Prefix: aws.String(key)})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Uploads) != 1 || aws.ToString(out.Uploads[0].UploadId) != keep {
		t.Errorf("open after the clean-up: %v, want only %s", out.Uploads, keep)
	}
}

// pagedS3 serves fixed pages of a listing and records aborts (it calls nothing else).
type pagedS3 struct {
	s3store.API
	pages   []*s3.ListMultipartUploadsOutput
	calls   int
	aborted []string
}

func (p *pagedS3) ListMultipartUploads(_ context.Context, in *s3.ListMultipartUploadsInput, _ ...func(*s3.Options)) (*s3.ListMultipartUploadsOutput, error) {
	out := p.pages[min(p.calls, len(p.pages)-1)]
	p.calls++
	return out, nil
}

func (p *pagedS3) AbortMultipartUpload(_ context.Context, in *s3.AbortMultipartUploadInput, _ ...func(*s3.Options)) (*s3.AbortMultipartUploadOutput, error) {
	p.aborted = append(p.aborted, aws.ToString(in.UploadId))
	if aws.ToString(in.UploadId) == "gone" {
		return nil, &types.NoSuchUpload{}
	}
	return &s3.AbortMultipartUploadOutput{}, nil
}

// TestAbortStraysListing checks the listing's edges: only the exact key counts,
// NoSuchUpload counts as aborted, and a listing that stops advancing ends the loop.
func TestAbortStraysListing(t *testing.T) {
	up := func(key, id string) types.MultipartUpload {
		return types.MultipartUpload{Key: aws.String(key), UploadId: aws.String(id)}
	}
	p := &pagedS3{pages: []*s3.ListMultipartUploadsOutput{
		{Uploads: []types.MultipartUpload{up("k", "a"), up("k2", "x"), up("k", "keep")}, IsTruncated: aws.Bool(true),
			NextKeyMarker: aws.String("k"), NextUploadIdMarker: aws.String("keep")},
		// A store that repeats its markers for ever.
		{Uploads: []types.MultipartUpload{up("k", "gone")}, IsTruncated: aws.Bool(true),
			NextKeyMarker: aws.String("k"), NextUploadIdMarker: aws.String("keep")},
	}}
	aborted, err := s3store.New(p).AbortStrays(context.Background(), "b", "k", "keep")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(aborted, []string{"a", "gone"}) || p.calls != 2 {
		t.Errorf("aborted %v after %d listings, want [a gone] after 2", aborted, p.calls)
	}
}

func TestKeyOwnedBy(t *testing.T) {
	for _, tc := range []struct {
		key, id string
		want    bool
	}{
		{"uploads/ID1/f.bin", "ID1", true},
		{"tenant/uploads/ID1/f.bin", "ID1", true},
		{"ID1", "ID1", true},
		{"uploads/ID1", "ID1", true},
		{"uploads/ID12/f.bin", "ID1", false},
		{"uploads/xID1/f.bin", "ID1", false},
		{"my/key", "ID1", false},
		{"uploads//f.bin", "", false},
	} {
		if got := s3store.KeyOwnedBy(tc.key, tc.id); got != tc.want {
			t.Errorf("KeyOwnedBy(%q, %q) = %v, want %v", tc.key, tc.id, got, tc.want)
		}
	}
}

// headerRecorder records the headers of every request it passes on.
type headerRecorder struct {
	next interface {
		Do(*http.Request) (*http.Response, error)
	}
	mu   sync.Mutex
	seen []http.Header
}

func (r *headerRecorder) Do(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.seen = append(r.seen, req.Header.Clone())
	r.mu.Unlock()
	return r.next.Do(req)
}

// TestChunkChecksums puts a one-chunk object and a multipart object through the real
// MinIO with their CRC32C, as chunkup sends them: the payload unsigned (no SHA-256 on
// either side), the checksum verified by MinIO (a wrong one is refused, as a transient
// error: the bytes were checked before they left), and the objects carry their
// whole-object CRC32C (FULL_OBJECT), which a wrong whole-object value fails to
// complete.
func TestChunkChecksums(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	minio := testenv.StartS3(t)
	minio.CreateBucket(t, "bkt")
	plain := minio.Client(t)
	rec := &headerRecorder{next: plain.Options().HTTPClient}
	s3c := s3.New(plain.Options(), func(o *s3.Options) { o.HTTPClient = rec })
	st := s3store.New(s3c)
	data := bytes.Repeat([]byte("chunkup "), 5<<20/8+3) // a little over 5 MiB
	sum := crc.Checksum(data)

	if _, err := st.PutChunk(ctx, "bkt", "one", "", s3store.Owner{}, data, sum+1); err == nil || s3store.Permanent(err) || !strings.Contains(err.Error(), "Checksum") && !strings.Contains(err.Error(), "BadDigest") {
		t.Fatalf("put with a wrong CRC32C: %v; want a transient refusal", err)
	}
	if _, err := st.PutChunk(ctx, "bkt", "one", "", s3store.Owner{}, data, sum); err != nil {
		t.Fatal(err)
	}
	for _, h := range rec.seen {
		if got := h.Get("X-Amz-Content-Sha256"); got != "UNSIGNED-PAYLOAD" {
			t.Errorf("x-amz-content-sha256 %q, want UNSIGNED-PAYLOAD", got)
		}
		if h.Get("Expect") != "" || h.Get("Content-Encoding") != "" {
			t.Errorf("chunk request with Expect %q, Content-Encoding %q", h.Get("Expect"), h.Get("Content-Encoding"))
		}
	}
	// A single PUT's checksum is the whole object's by definition: SeaweedFS does not
	// say FULL_OBJECT for it.
	checkCRC := func(key string, want uint32, single bool) {
		t.Helper()
		head, err := s3c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("bkt"), Key: aws.String(key), ChecksumMode: types.ChecksumModeEnabled})
		if err != nil {
			t.Fatal(err)
		}
		full := head.ChecksumType == types.ChecksumTypeFullObject || single && head.ChecksumType == ""
		if got := aws.ToString(head.ChecksumCRC32C); got != s3store.CRC32CHeader(want) || !full {
			t.Errorf("%s: CRC32C %q (%s), want %q (FULL_OBJECT)", key, got, head.ChecksumType, s3store.CRC32CHeader(want))
		}
	}
	checkCRC("one", sum, true)

	// Two parts; S3 combines their CRC32Cs and checks the whole object's.
	for _, wrongWhole := range []bool{true, false} {
		mpu, checksummed, err := st.CreateMultipart(ctx, "bkt", "multi", "", s3store.Owner{})
		if err != nil || !checksummed {
			t.Fatalf("create: %v (checksummed %v)", err, checksummed)
		}
		var parts []s3store.Part
		whole := uint32(0)
		for n, part := range [][]byte{data, data[:1000]} {
			psum := crc.Checksum(part)
			if _, err := st.UploadPart(ctx, "bkt", "multi", mpu, true, uint32(n+1), part, psum+1); err == nil || s3store.Permanent(err) {
				t.Fatalf("part with a wrong CRC32C: %v; want a transient refusal", err)
			}
			etag, err := st.UploadPart(ctx, "bkt", "multi", mpu, true, uint32(n+1), part, psum)
			if err != nil {
				t.Fatal(err)
			}
			parts = append(parts, s3store.Part{N: uint32(n + 1), ETag: etag, CRC32C: psum})
			whole = crc.Combine(whole, psum, int64(len(part)))
		}
		size := int64(len(data) + 1000)
		if wrongWhole {
			if _, err := st.Complete(ctx, "bkt", "multi", mpu, true, parts, size, whole+1, s3store.Owner{}); err == nil {
				t.Fatal("completed with a wrong whole-object CRC32C")
			}
			if err := st.Abort(ctx, "bkt", "multi", mpu); err != nil {
				t.Fatal(err)
			}
			continue
		}
		etag, err := st.Complete(ctx, "bkt", "multi", mpu, true, parts, size, whole, s3store.Owner{})
		if err != nil {
			t.Fatal(err)
		}
		checkCRC("multi", whole, false)
		// A second completion (a completer that died after the first) meets NoSuchUpload
		// and accepts the object by its size and CRC32C.
		if again, err := st.Complete(ctx, "bkt", "multi", mpu, true, parts, size, whole, s3store.Owner{}); err != nil || again != etag {
			t.Fatalf("completed again: %q, %v; want %q", again, err, etag)
		}
		if _, err := st.Complete(ctx, "bkt", "multi", mpu, true, parts, size, whole+1, s3store.Owner{}); err == nil {
			t.Fatal("a retried completion accepted an object with another CRC32C")
		}
	}
}

// TestAbortStraysNothingToAbort: an upload that never got data has no multipart upload
// in S3, and releasing it after a DELETE looks for strays under its key: finding none
// is no error, whatever the store answers (MinIO an empty listing; gofakes3, chunkup
// dev's S3, NoSuchUpload for a bucket that never had a multipart upload, which made
// dev WARN "abort stray multipart uploads ... NoSuchUpload"). An abort of a multipart
// upload that does not exist is none either.
func TestAbortStraysNothingToAbort(t *testing.T) {
	for _, tc := range testenv.S3Stores {
		t.Run(tc.Name, func(t *testing.T) {
			st := s3store.New(tc.Start(t, "bkt"))
			ctx := testenv.Context(t, time.Minute)
			for _, key := range []string{"uploads/NEVERDATA/f.bin", "uploads/NEVERDATA/"} {
				aborted, err := st.AbortStrays(ctx, "bkt", key, "")
				if err != nil || len(aborted) != 0 {
					t.Errorf("AbortStrays(%q) = %v, %v; want nothing aborted and no error", key, aborted, err)
				}
			}
		})
	}
}

// TestAbortStraysListingNoSuchUpload: a listing answered NoSuchUpload aborts nothing
// and is no error; another error still is.
func TestAbortStraysListingNoSuchUpload(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		wantErr bool
	}{
		{"NoSuchUpload", &types.NoSuchUpload{}, false},
		{"NoSuchBucket", &types.NoSuchBucket{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &failingList{err: tc.err}
			aborted, err := s3store.New(f).AbortStrays(context.Background(), "b", "k", "")
			if (err != nil) != tc.wantErr || len(aborted) != 0 || f.aborts != 0 {
				t.Errorf("AbortStrays = %v, %v after %d aborts; want error %v, nothing aborted", aborted, err, f.aborts, tc.wantErr)
			}
		})
	}
}

// failingList answers every listing with err.
type failingList struct {
	s3store.API
	err    error
	aborts int
}

func (f *failingList) ListMultipartUploads(context.Context, *s3.ListMultipartUploadsInput, ...func(*s3.Options)) (*s3.ListMultipartUploadsOutput, error) {
	return nil, f.err
}

func (f *failingList) AbortMultipartUpload(context.Context, *s3.AbortMultipartUploadInput, ...func(*s3.Options)) (*s3.AbortMultipartUploadOutput, error) {
	f.aborts++
	return &s3.AbortMultipartUploadOutput{}, nil
}

// cutOffCompletion is the real S3 client, except that once a completion has gone through
// it answers the next ones as MinIO does when the request that completed the upload was
// cut off (its completer killed) between moving the parts into the object and deleting
// the multipart upload.
type cutOffCompletion struct {
	s3store.API
	completed bool
}

func (c *cutOffCompletion) CompleteMultipartUpload(ctx context.Context, in *s3.CompleteMultipartUploadInput, opts ...func(*s3.Options)) (*s3.CompleteMultipartUploadOutput, error) {
	if c.completed {
		return nil, &smithy.GenericAPIError{Code: "InvalidPart", Message: "One or more of the specified parts could not be found."}
	}
	out, err := c.API.CompleteMultipartUpload(ctx, in, opts...)
	c.completed = err == nil
	return out, err
}

// TestCompleteAfterCutOffCompletion: a completion retried after one that completed the
// upload but was cut off meets InvalidPart on MinIO; the object there is the upload's
// own (its metadata says so), so the retry succeeds with its ETag. InvalidPart for an
// object that is not there, or is another upload's, stays a permanent failure.
func TestCompleteAfterCutOffCompletion(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	srv := testenv.StartS3(t)
	srv.CreateBucket(t, "bkt")
	part := bytes.Repeat([]byte("p"), 5<<20)
	sum := crc.Checksum(part)
	for _, tc := range []struct {
		name          string
		completeFirst bool
		retryAs       string
		wantPermanent bool
	}{
		{"the upload's own object", true, "up-1", false},
		{"another upload's object", true, "up-2", true},
		{"an object that names no upload", true, "", true},
		{"no object", false, "up-1", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := &cutOffCompletion{API: srv.Client(t), completed: !tc.completeFirst}
			st := s3store.New(api)
			key := "cut/" + strings.ReplaceAll(tc.name, " ", "-")
			writer := s3store.Owner{UploadID: "up-1"}
			if tc.retryAs == "" {
				writer = s3store.Owner{} // an object chunkup did not label
			}
			mpu, checksummed, err := st.CreateMultipart(ctx, "bkt", key, "", writer)
			if err != nil {
				t.Fatal(err)
			}
			etag, err := st.UploadPart(ctx, "bkt", key, mpu, checksummed, 1, part, sum)
			if err != nil {
				t.Fatal(err)
			}
			parts := []s3store.Part{{N: 1, ETag: etag, CRC32C: sum}}
			var first string
			if tc.completeFirst {
				if first, err = st.Complete(ctx, "bkt", key, mpu, checksummed, parts, int64(len(part)), sum, writer); err != nil {
					t.Fatal(err)
				}
			}
			retryAs := s3store.Owner{UploadID: cmp.Or(tc.retryAs, "up-1")}
			again, err := st.Complete(ctx, "bkt", key, mpu, checksummed, parts, int64(len(part)), sum, retryAs)
			if tc.wantPermanent {
				if err == nil || !s3store.Permanent(err) {
					t.Fatalf("retried completion: %q, %v; want a permanent failure", again, err)
				}
				return
			}
			if err != nil || again != first {
				t.Fatalf("retried completion: %q, %v; want %q", again, err, first)
			}
		})
	}
}

// TestReason: an upload failed by an S3 error a caller can act on records plain words
// and what to do, with the store's own answer as detail (here a part sent to a
// multipart upload the store no longer has); other errors keep their own text.
func TestReason(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	srv := testenv.StartS3(t)
	srv.CreateBucket(t, "bkt")
	st := s3store.New(srv.Client(t))
	mpu, checksummed, err := st.CreateMultipart(ctx, "bkt", "k", "", s3store.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Abort(ctx, "bkt", "k", mpu); err != nil {
		t.Fatal(err)
	}
	_, err = st.UploadPart(ctx, "bkt", "k", mpu, checksummed, 1, []byte("data"), crc.Checksum([]byte("data")))
	if !s3store.Permanent(err) {
		t.Fatalf("part of an aborted upload: %v; want a permanent error", err)
	}
	got := s3store.Reason(err)
	for _, want := range []string{"no longer has the multipart upload", "upload the file again", "NoSuchUpload"} {
		if !strings.Contains(got, want) {
			t.Errorf("reason %q does not say %q", got, want)
		}
	}
	if got := s3store.Reason(errors.New("boom")); got != "boom" {
		t.Errorf("reason of a plain error: %q", got)
	}

	// A completion whose CRC32Cs are not the bytes' (a direct upload's wrong report):
	// the reason says so in plain words, whatever the store calls it.
	mpu, checksummed, err = st.CreateMultipart(ctx, "bkt", "k2", "", s3store.Owner{})
	if err != nil || !checksummed {
		t.Fatalf("checksummed multipart upload: %v %v", checksummed, err)
	}
	data := []byte("data")
	etag, err := st.UploadPart(ctx, "bkt", "k2", mpu, true, 1, data, crc.Checksum(data))
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.Complete(ctx, "bkt", "k2", mpu, true, []s3store.Part{{N: 1, ETag: etag, CRC32C: crc.Checksum(data) + 1}}, 4, crc.Checksum(data)+1, s3store.Owner{})
	// SeaweedFS and AWS say BadDigest; MinIO takes the part for another (InvalidPart).
	want := "do not have the CRC32Cs given for them"
	if s3store.InvalidPart(err) {
		want = "does not have every part"
	}
	if got := s3store.Reason(err); !s3store.Permanent(err) || !strings.Contains(got, want) {
		t.Errorf("completion with a wrong CRC32C: permanent %v, reason %q; want it to say %q", s3store.Permanent(err), got, want)
	}
}
