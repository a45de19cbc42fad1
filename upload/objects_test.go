package upload_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/chunkup/chunkup/cleanup"
	"github.com/chunkup/chunkup/internal/fault"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/s3store"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/stagingtest"
	"github.com/chunkup/chunkup/upload"
)

// TestObjects lists, describes and deletes objects in a real S3 as two tenants: a
// tenant sees only its own prefix (a prefix outside it lists nothing, another's key is
// NOT_FOUND), pages follow one another to the end, a token is checked, and a delete
// with an ETag that no longer holds changes nothing.
func TestObjects(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	m := testenv.StartS3(t)
	m.CreateBucket(t, "objs")
	s3c := m.Client(t)
	for _, key := range []string{"acme/a", "acme/b/c", "acme/b/d", "globex/x"} {
		if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("objs"), Key: aws.String(key), Body: strings.NewReader(key)}); err != nil {
			t.Fatal(err)
		}
	}
	st := stagingtest.Open(t, testenv.StartRedis(t).Client(t), staging.Config{})
	store := s3store.New(s3c)
	core, err := upload.New(upload.Deps{Store: st.Uploads, Ender: &cleanup.Ender{Store: st.Uploads.Ends(), S3: store}, Objects: store},
		upload.Config{Bucket: "objs", ChunkSize: 5 << 20})
	if err != nil {
		t.Fatal(err)
	}
	acme := upload.WithTenant(ctx, "acme")
	keys := func(ctx context.Context, prefix string, page int) []string {
		t.Helper()
		var out []string
		token := ""
		for {
			objs, next, err := core.ListObjects(ctx, prefix, token, page)
			if err != nil {
				t.Fatalf("list %q: %v", prefix, err)
			}
			for _, o := range objs {
				out = append(out, o.Key)
			}
			if next == "" {
				return out
			}
			token = next
		}
	}
	for _, tc := range []struct {
		ctx    context.Context
		prefix string
		page   int
		want   string
	}{
		{acme, "", 1, "acme/a acme/b/c acme/b/d"},
		{acme, "ac", 0, "acme/a acme/b/c acme/b/d"},
		{acme, "acme/b/", 2, "acme/b/c acme/b/d"},
		{acme, "globex/", 0, ""},
		{upload.WithTenant(ctx, "globex"), "", 0, "globex/x"},
		{ctx, "", 0, "acme/a acme/b/c acme/b/d globex/x"}, // no authentication: the whole bucket
	} {
		if got := strings.Join(keys(tc.ctx, tc.prefix, tc.page), " "); got != tc.want {
			t.Errorf("%s lists %q (page %d): %q, want %q", upload.TenantFrom(tc.ctx), tc.prefix, tc.page, got, tc.want)
		}
	}
	if _, _, err := core.ListObjects(acme, "", "not a token!", 0); fault.KindOf(err) != fault.Invalid {
		t.Errorf("a made-up page token: %v; want Invalid", err)
	}
	if _, _, err := core.ListObjects(acme, "", "", 1001); fault.KindOf(err) != fault.Invalid {
		t.Errorf("page size 1001: %v; want Invalid", err)
	}
	// Dot segments never reach S3, where stores differ on them (a normalizer would take
	// acme/../globex/x for globex's key).
	for _, tc := range []struct {
		ctx  context.Context
		key  string
		want fault.Kind
	}{
		{acme, "acme/../globex/x", fault.Invalid},
		{acme, "acme/./a", fault.Invalid},
		{acme, "acme/b/..", fault.Invalid},
		{acme, "../globex/x", fault.NotFound}, // not under acme's prefix at all
		{ctx, "acme/../globex/x", fault.Invalid},
		{ctx, "./globex/x", fault.Invalid},
	} {
		if _, err := core.StatObject(tc.ctx, tc.key); fault.KindOf(err) != tc.want {
			t.Errorf("%q stats %q: %v; want %v", upload.TenantFrom(tc.ctx), tc.key, err, tc.want)
		}
		if err := core.DeleteObject(tc.ctx, tc.key, ""); fault.KindOf(err) != tc.want {
			t.Errorf("%q deletes %q: %v; want %v", upload.TenantFrom(tc.ctx), tc.key, err, tc.want)
		}
	}
	for _, prefix := range []string{"acme/../", "acme/./b", "acme/b/../g", "acme/b/.."} {
		if _, _, err := core.ListObjects(acme, prefix, "", 0); fault.KindOf(err) != fault.Invalid || !strings.Contains(err.Error(), "has a '.' or '..' segment") {
			t.Errorf("acme lists %q: %v; want Invalid", prefix, err)
		}
	}

	// A key written to the bucket by other means than chunkup, which chunkup would not
	// make for an upload, is still the tenant's to stat and delete.
	const odd = "acme/folder/"
	if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("objs"), Key: aws.String(odd), Body: strings.NewReader("")}); err != nil {
		t.Fatal(err)
	}
	if _, err := core.StatObject(acme, odd); err != nil {
		t.Errorf("stat %q: %v", odd, err)
	}
	if err := core.DeleteObject(acme, odd, ""); err != nil {
		t.Errorf("delete %q: %v", odd, err)
	}

	obj, err := core.StatObject(acme, "acme/a")
	if err != nil || obj.Size != int64(len("acme/a")) || obj.ETag == "" || obj.LastModified.IsZero() {
		t.Fatalf("stat acme/a: %+v, %v", obj, err)
	}
	for _, key := range []string{"globex/x", "acme/nothing"} {
		if _, err := core.StatObject(acme, key); fault.KindOf(err) != fault.NotFound {
			t.Errorf("acme stats %s: %v; want NotFound", key, err)
		}
		if err := core.DeleteObject(acme, key, ""); fault.KindOf(err) != fault.NotFound {
			t.Errorf("acme deletes %s: %v; want NotFound", key, err)
		}
	}
	if err := core.DeleteObject(acme, "acme/a", `"0123"`); fault.KindOf(err) != fault.Conflict {
		t.Errorf("delete with another ETag: %v; want Conflict", err)
	}
	if err := core.DeleteObject(acme, "acme/a", obj.ETag); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(keys(acme, "", 0), " "); got != "acme/b/c acme/b/d" {
		t.Errorf("after deleting acme/a: %q", got)
	}
	if got := strings.Join(keys(ctx, "globex/", 0), " "); got != "globex/x" {
		t.Errorf("globex's object after acme's deletes: %q", got)
	}
}
