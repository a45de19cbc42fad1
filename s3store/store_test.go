package s3store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/s3store"
)

// TestAbortStraysPages lists one multipart upload per page from the real MinIO:
// every stray one is found across the pages and aborted, and the kept one stays.
func TestAbortStraysPages(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	minio := testenv.StartMinIO(t)
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
