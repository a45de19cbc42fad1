package e2e

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
)

// TestIfAbsent: an upload made with if_absent never replaces another object. Through
// the raw stub and the SDK: a key that is taken is refused at create with
// ALREADY_EXISTS, and nothing is created (the object, the tenant's uploads and the
// client_node_id are as before); a free key is written, and the same create repeated
// gets the upload back; an object that appears at the key while the upload is in
// progress (multipart, and one-chunk) fails the upload with a reason naming the key,
// and stays as its writer wrote it, with no multipart upload left open.
func TestIfAbsent(t *testing.T) {
	e := newEnv(t)
	a := e.start(t, e.config())
	c := e.client(t, a)
	api := c.API()
	const mib = 1 << 20
	other := []byte("written by someone else")
	putOther := func(key string) {
		t.Helper()
		if _, err := e.s3.PutObject(ctx(t), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(other)}); err != nil {
			t.Fatal(err)
		}
	}
	requireOther := func(key string) {
		t.Helper()
		if got := e.object(t, key); !bytes.Equal(got, other) {
			t.Fatalf("%s holds %q, want the other writer's %q", key, got, other)
		}
	}
	wantExists := func(err error, key string) {
		t.Helper()
		if status.Code(err) != codes.AlreadyExists || !strings.Contains(status.Convert(err).Message(), key) {
			t.Fatalf("got %v, want ALREADY_EXISTS naming %s", err, key)
		}
	}

	putOther("taken.bin")
	_, err := api.CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{Key: "taken.bin", IfAbsent: true,
		ExpectedSize: proto.Int64(10), ClientNodeId: "taken-1"})
	wantExists(err, "taken.bin")
	_, err = c.Upload(ctx(t), reader([]byte("new bytes")), client.WithKey("taken.bin"), client.WithIfAbsent())
	wantExists(err, "taken.bin")
	requireOther("taken.bin")
	list, err := api.ListUploads(ctx(t), &chunkupv1.ListUploadsRequest{})
	if err != nil || len(list.Uploads) != 0 {
		t.Fatalf("uploads after refused creates: %v, %v; want none", list, err)
	}
	// The refused create bound no client_node_id: another create may use it.
	if _, err := api.CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{Key: "elsewhere.bin", ClientNodeId: "taken-1"}); err != nil {
		t.Fatalf("create with the refused create's client_node_id: %v", err)
	}

	// A free key is written; the same create again returns the upload.
	data := randomBytes(2*mib, 5)
	up, err := c.Upload(ctx(t), reader(data), client.WithKey("fresh.bin"), client.WithIfAbsent(), client.WithClientNodeID("fresh-1"),
		client.WithSize(int64(len(data))))
	if err != nil {
		t.Fatal(err)
	}
	e.requireExact(t, up, data)
	if !up.IfAbsent {
		t.Error("the upload does not say if_absent")
	}
	again, err := api.CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{Key: "fresh.bin", IfAbsent: true,
		ExpectedSize: proto.Int64(int64(len(data))), ClientNodeId: "fresh-1"})
	if err != nil || again.Upload.UploadId != up.UploadId {
		t.Fatalf("repeated create: %v, %v; want upload %s", again, err, up.UploadId)
	}
	if _, err := c.Upload(ctx(t), reader(data), client.WithKey("fresh.bin"), client.WithIfAbsent()); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("another upload to the key it wrote: %v, want ALREADY_EXISTS", err)
	}

	// Objects that appear while the upload is in progress.
	for _, tc := range []struct {
		name   string
		chunks [][]byte
	}{
		{"multipart", [][]byte{randomBytes(5*mib, 6), randomBytes(mib, 7)}},
		{"one chunk", [][]byte{[]byte("one small chunk")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "raced-" + strings.ReplaceAll(tc.name, " ", "-") + ".bin"
			var size int64
			for _, ch := range tc.chunks {
				size += int64(len(ch))
			}
			cr, err := api.CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{Key: key, IfAbsent: true,
				ExpectedSize: proto.Int64(size), ChunkSize: 5 * mib})
			if err != nil {
				t.Fatal(err)
			}
			id := cr.Upload.UploadId
			stream, err := api.UploadChunk(ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			for i, ch := range tc.chunks {
				if i == len(tc.chunks)-1 {
					putOther(key) // before the last chunk: before anything could complete
				}
				if err := stream.Send(&chunkupv1.UploadChunkRequest{UploadId: id, ChunkNumber: uint32(i + 1), Data: ch}); err != nil {
					t.Fatal(err)
				}
				if _, err := stream.Recv(); err != nil {
					t.Fatalf("chunk %d: %v", i+1, err)
				}
			}
			if err := stream.CloseSend(); err != nil {
				t.Fatal(err)
			}
			if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
				t.Fatalf("end of stream: %v", err)
			}
			var last *chunkupv1.Upload
			waitFor(t, "the upload to fail", func() bool {
				last = getUpload(t, c, id)
				return last.State == chunkupv1.UploadState_UPLOAD_STATE_FAILED
			})
			if !strings.Contains(last.Error, key) || !strings.Contains(last.Error, "if_absent") {
				t.Errorf("reason %q does not name the key and if_absent", last.Error)
			}
			requireOther(key)
			waitFor(t, "no multipart upload left open", func() bool { return e.openMultipartUploads(t) == 0 })
		})
	}
}
