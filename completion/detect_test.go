package completion_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/chunkup/chunkup/completion"
	"github.com/chunkup/chunkup/internal/testdocs"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/s3store"
	"github.com/chunkup/chunkup/staging"
)

const detectBucket = "detect-test"

// TestDetectsTypeOfUntypedUploads: an upload whose declared content type is empty or
// generic gets its type from the completed object's first bytes, and is handed off by
// it (a PNG becomes a document); a specific declared type is kept as it is, without
// reading the object.
func TestDetectsTypeOfUntypedUploads(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	s3c, store := stores(t, detectBucket)
	h := &recordingHandoff{}
	c, err := completion.New(store.Completions(), s3store.New(s3c), noEnder{t}, nil, completion.Config{Handoff: h})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, declared string
		object         []byte // nil: no object in S3 (it must not be read)
		detected       string
		handedOff      bool
	}{
		{"no type, PNG bytes", "", testdocs.PNG("X"), "image/png", true},
		{"generic type, PDF bytes", "application/octet-stream", testdocs.PDF("X"), "application/pdf", false},
		{"generic type, unknown bytes", "binary/octet-stream", []byte{0, 1, 2, 3, 4, 5}, "", false},
		{"no type, empty object", "", []byte{}, "", false},
		{"specific type kept", "image/jpeg", nil, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "docs/" + strings.ReplaceAll(tc.name, " ", "-")
			if tc.object != nil {
				if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(detectBucket), Key: aws.String(key),
					Body: bytes.NewReader(tc.object)}); err != nil {
					t.Fatal(err)
				}
			}
			id := readyUploadAt(t, ctx, store, detectBucket, key, tc.declared)
			calls := len(h.calls)
			if err := c.Complete(ctx, id); err != nil {
				t.Fatal(err)
			}
			u, err := store.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if u.Status != staging.StatusCompleted || u.DetectedContentType != tc.detected || u.ContentType != tc.declared {
				t.Fatalf("upload %s: declared %q detected %q, want %q and %q", u.Status, u.ContentType, u.DetectedContentType, tc.declared, tc.detected)
			}
			if got := len(h.calls) > calls; got != tc.handedOff {
				t.Fatalf("handed off: %v, want %v (effective type %q)", got, tc.handedOff, u.EffectiveContentType())
			}
		})
	}
}
