package s3store_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/s3store"
)

// TestIfAbsent writes objects for uploads made with if_absent against the real MinIO,
// with S3's conditional writes and with the look-first fallback: a key that is free is
// written; a key where another object is refuses the write (permanently, naming the
// key) and leaves that object as it was; the upload's own object, written by an
// attempt that succeeded before, is accepted as done.
func TestIfAbsent(t *testing.T) {
	ctx := testenv.Context(t, 2*time.Minute)
	minio := testenv.StartS3(t)
	minio.CreateBucket(t, "bkt")
	s3c := minio.Client(t)
	const mib = 1 << 20
	other := bytes.Repeat([]byte("other writer "), 1000)
	part1, part2 := bytes.Repeat([]byte{1}, 5*mib), bytes.Repeat([]byte{2}, 1000)

	for _, tc := range []struct {
		name string
		opts []s3store.Option
	}{
		{"conditional", nil},
		{"look first", []s3store.Option{s3store.WithoutConditionalWrites()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := s3store.New(s3c, tc.opts...)
			prefix := tc.name + "/"
			put := func(key string) {
				t.Helper()
				if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String(key), Body: bytes.NewReader(other)}); err != nil {
					t.Fatal(err)
				}
			}
			wantOther := func(key string, err error) {
				t.Helper()
				var exists *s3store.ExistsError
				if !errors.As(err, &exists) || exists.Key != key || !s3store.Permanent(err) {
					t.Fatalf("write over %s: %v, want a permanent ExistsError naming the key", key, err)
				}
				if got := minio.Object(t, "bkt", key); !bytes.Equal(got, other) {
					t.Fatalf("%s changed: %d bytes, want the other writer's %d", key, len(got), len(other))
				}
			}
			own := s3store.Owner{UploadID: "UP1", IfAbsent: true}

			// One-chunk uploads: PutObject.
			free := prefix + "free"
			etag, err := st.PutChunk(ctx, "bkt", free, "", own, part2, crc.Checksum(part2))
			if err != nil {
				t.Fatal(err)
			}
			again, err := st.PutChunk(ctx, "bkt", free, "", own, part2, crc.Checksum(part2))
			if err != nil || again != etag {
				t.Fatalf("the upload's own put retried: %q, %v; want %q", again, err, etag)
			}
			taken := prefix + "taken"
			put(taken)
			_, err = st.PutChunk(ctx, "bkt", taken, "", own, part2, crc.Checksum(part2))
			wantOther(taken, err)
			_, err = st.PutChunk(ctx, "bkt", free, "", s3store.Owner{UploadID: "UP2", IfAbsent: true}, part2, crc.Checksum(part2))
			var exists *s3store.ExistsError
			if !errors.As(err, &exists) {
				t.Fatalf("another upload's put over an if_absent object: %v, want ExistsError", err)
			}

			// Multipart uploads: an object that appeared after the multipart upload
			// began stops its completion; the multipart upload stays for its owner to
			// abort.
			for _, appears := range []bool{false, true} {
				key := prefix + "multi"
				if appears {
					key = prefix + "multi-raced"
				}
				mpu, checksummed, err := st.CreateMultipart(ctx, "bkt", key, "", own)
				if err != nil {
					t.Fatal(err)
				}
				var parts []s3store.Part
				var whole uint32
				for i, p := range [][]byte{part1, part2} {
					sum := crc.Checksum(p)
					e, err := st.UploadPart(ctx, "bkt", key, mpu, checksummed, uint32(i+1), p, sum)
					if err != nil {
						t.Fatal(err)
					}
					parts = append(parts, s3store.Part{N: uint32(i + 1), ETag: e, CRC32C: sum})
					whole = crc.Combine(whole, sum, int64(len(p)))
				}
				if appears {
					put(key)
				}
				size := int64(len(part1) + len(part2))
				etag, err := st.Complete(ctx, "bkt", key, mpu, checksummed, parts, size, whole, own)
				if appears {
					wantOther(key, err)
					if err := st.Abort(ctx, "bkt", key, mpu); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				if got := minio.Object(t, "bkt", key); !bytes.Equal(got, append(bytes.Clone(part1), part2...)) {
					t.Fatalf("%s has %d bytes, want the parts' %d", key, len(got), size)
				}
				// A completer that completed it and died before recording it is followed
				// by another, which finds the object its own.
				again, err := st.Complete(ctx, "bkt", key, mpu, checksummed, parts, size, whole, own)
				if err != nil || again != etag {
					t.Fatalf("completion retried: %q, %v; want %q", again, err, etag)
				}
			}
		})
	}
}
