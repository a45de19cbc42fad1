package uploads_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/uploads"
)

// TestTouchDirect: signing a direct upload's parts reads what signing needs and records
// activity; every refusal (another tenant's upload, a part beyond the upload's, a part
// without the CRC32C its multipart upload requires, an upload that is not direct)
// touches nothing.
func TestTouchDirect(t *testing.T) {
	s, clk := newStore(t)
	ctx := ctxT(t)
	id := ids.New()
	if _, err := s.Create(ctx, staging.NewUpload{ID: id, Bucket: "b", Key: "k", ChunkSize: 8, ExpectedSize: 20, Total: 3,
		Tenant: "acme", Direct: true, MultipartID: "mpu", MultipartChecksummed: true, At: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	updated := func() time.Time {
		t.Helper()
		u, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return u.Updated
	}
	created := updated()
	clk.Add(time.Minute)
	var beyond *uploads.BeyondError
	for _, tc := range []struct {
		name   string
		tenant string
		maxN   uint32
		noCRC  bool
		is     func(error) bool
	}{
		{"another tenant", "other", 1, false, func(err error) bool { return errors.Is(err, staging.ErrNotFound) }},
		{"a part beyond", "acme", 4, false, func(err error) bool { return errors.As(err, &beyond) && beyond.Total == 3 }},
		{"a part without its CRC32C", "acme", 1, true, func(err error) bool { return errors.Is(err, uploads.ErrCRCRequired) }},
	} {
		if _, err := s.TouchDirect(ctx, id, tc.tenant, tc.maxN, tc.noCRC); !tc.is(err) {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := updated(); !got.Equal(created) {
			t.Fatalf("%s touched the upload: updated %v, was %v", tc.name, got, created)
		}
	}
	d, err := s.TouchDirect(ctx, id, "acme", 3, false)
	if err != nil {
		t.Fatal(err)
	}
	want := uploads.DirectTarget{Direct: true, Bucket: "b", Key: "k", MultipartID: "mpu", Checksummed: true, Total: 3, ChunkSize: 8, Expected: 20}
	if d != want {
		t.Fatalf("TouchDirect: %+v, want %+v", d, want)
	}
	if got := updated(); !got.Equal(clk.Now().Truncate(time.Millisecond)) {
		t.Fatalf("updated %v after a signing, want %v", got, clk.Now())
	}
	plain := newUpload(t, s, 8, 2)
	if d, err := s.TouchDirect(ctx, plain, "", 1, false); err != nil || d.Direct {
		t.Fatalf("TouchDirect of an upload that is not direct: %+v, %v", d, err)
	}
}

// TestRecordDirectParts: a direct upload's parts are recorded in one script per 1,000
// (here 1,201 parts, two batches), make the upload ready, and index its completion
// (due after a grace when the caller completes it, at once otherwise); a repeat changes
// nothing; a part recorded before as another part (in the second batch), or a last
// part that is not the upload's, is refused and records nothing.
func TestRecordDirectParts(t *testing.T) {
	s, clk := newStore(t)
	ctx := ctxT(t)
	create := func(t *testing.T, total uint32) string {
		t.Helper()
		id := ids.New()
		if _, err := s.Create(ctx, staging.NewUpload{ID: id, Bucket: "b", Key: "k-" + id, ChunkSize: 8, ExpectedSize: -1, Total: total,
			Direct: true, MultipartID: "mpu", At: clk.Now()}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	parts := func(n int) []uploads.DirectPart {
		ps := make([]uploads.DirectPart, n)
		for i := range ps {
			sum := uint32(1000 + i)
			ps[i] = uploads.DirectPart{N: uint32(i + 1), ETag: fmt.Sprintf(`"e%d"`, i+1), CRC32C: &sum, Size: 8}
		}
		ps[n-1].Size = 3
		ps[n-1].CRC32C = nil // a part whose CRC32C S3 did not give
		return ps
	}
	get := func(t *testing.T, id string) *staging.Upload {
		t.Helper()
		u, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	due := func(t *testing.T) []string {
		t.Helper()
		clk.Add(5 * time.Second) // past the grace the recording process has to complete it itself
		d, err := s.Completions().Due(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}

	id := create(t, 0)
	ps := parts(1201)
	for range 2 { // the second time, a repeat
		ready, err := s.RecordDirectParts(ctx, id, ps, true)
		if err != nil || !ready {
			t.Fatalf("RecordDirectParts: ready %v, %v", ready, err)
		}
		u := get(t, id)
		if u.Status != staging.StatusActive || u.Total != 1201 || u.Uploaded != 1201 || u.UploadedBytes != 1200*8+3 ||
			len(u.ReceivedChunks) != 1201 || u.ReceivedBytes != 1200*8+3 {
			t.Fatalf("after the records: %s total %d uploaded %d (%d bytes) received %d (%d bytes)",
				u.Status, u.Total, u.Uploaded, u.UploadedBytes, len(u.ReceivedChunks), u.ReceivedBytes)
		}
	}
	got, err := s.Completions().Parts(ctx, id, 1201)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range got {
		w := ps[i]
		if p.N != w.N || p.ETag != w.ETag || p.Size != w.Size || p.NoCRC != (w.CRC32C == nil) || (w.CRC32C != nil && p.CRC32C != *w.CRC32C) {
			t.Fatalf("part %d recorded as %+v, reported %+v", i+1, p, w)
		}
	}
	if d := due(t); !slices.Contains(d, id) {
		t.Fatalf("the ready upload's completion is not indexed: due %v", d)
	}

	// Recorded as other parts: part 1003 (in the second batch) with another ETag; the
	// first batch's parts are the same, and recorded already.
	prior, other := parts(1005), parts(1005)
	other[1002].ETag = `"replaced"`
	var recorded *staging.PartRecordedError
	var last *staging.LastChunkError
	for _, tc := range []struct {
		name  string
		total uint32
		prior []uploads.DirectPart // recorded first (its completion is indexed)
		parts []uploads.DirectPart
		is    func(error) bool
	}{
		{"part 1003 recorded as another part", 0, prior, other, func(err error) bool { return errors.As(err, &recorded) && recorded.N == 1003 }},
		{"a last part that is not the upload's", 4, nil, parts(3), func(err error) bool { return errors.As(err, &last) && last.Last == 4 }},
	} {
		id := create(t, tc.total)
		if tc.prior != nil {
			if ready, err := s.RecordDirectParts(ctx, id, tc.prior, false); err != nil || !ready {
				t.Fatalf("%s: ready %v, %v", tc.name, ready, err)
			}
			// Due at once: the caller said it does not complete the upload itself.
			if d, err := s.Completions().Due(ctx, 100); err != nil || !slices.Contains(d, id) {
				t.Fatalf("%s: the ready upload's completion is not due at once: %v %v", tc.name, d, err)
			}
		}
		before := get(t, id)
		ready, err := s.RecordDirectParts(ctx, id, tc.parts, true)
		if ready || !tc.is(err) {
			t.Fatalf("%s: ready %v, %v", tc.name, ready, err)
		}
		u := get(t, id)
		if u.Uploaded != before.Uploaded || u.UploadedBytes != before.UploadedBytes || u.Total != before.Total {
			t.Fatalf("%s changed the upload: uploaded %d (%d bytes), total %d", tc.name, u.Uploaded, u.UploadedBytes, u.Total)
		}
		// A refused record drops the index entry it made, not one it found.
		if d := due(t); slices.Contains(d, id) != (tc.prior != nil) {
			t.Fatalf("%s: the upload's completion indexed %v after the refusal, want %v", tc.name, slices.Contains(d, id), tc.prior != nil)
		}
	}
}
