package uploads_test

import (
	"errors"
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
