package e2e

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/internal/ids"
)

// TestBadInput sends each kind of bad request and checks its gRPC code, that the
// message says something useful, and that no upload's state changed.
func TestBadInput(t *testing.T) {
	e := newEnv(t)
	full := e.start(t, e.config())
	data := randomBytes(2*chunk+10, 3)

	// A completed upload, finished while workers ran.
	done, err := e.client(t, full).Upload(ctx(t), reader([]byte("x")))
	if err != nil {
		t.Fatal(err)
	}
	full.Stop()
	// From here on no worker runs, so the other uploads' state holds still.
	api := e.start(t, e.config("api"))
	c := e.client(t, api)
	create := func(req *chunkupv1.CreateUploadRequest) *chunkupv1.Upload {
		r, err := c.API().CreateUpload(ctx(t), req)
		if err != nil {
			t.Fatal(err)
		}
		return r.Upload
	}
	sized := create(&chunkupv1.CreateUploadRequest{ExpectedSize: proto.Int64(int64(len(data)))})
	open := create(&chunkupv1.CreateUploadRequest{})
	send := func(reqs ...*chunkupv1.UploadChunkRequest) error {
		stream, err := c.API().UploadChunk(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range reqs {
			if err := stream.Send(r); err != nil {
				break // the server ended the stream; Recv says why
			}
			if _, err := stream.Recv(); err != nil {
				return err
			}
		}
		_ = stream.CloseSend()
		_, err = stream.Recv()
		if err != nil && status.Code(err) == codes.Unknown {
			return nil // io.EOF: the stream ended cleanly
		}
		return err
	}
	chunkReq := func(up *chunkupv1.Upload, n uint32, b []byte, last bool) *chunkupv1.UploadChunkRequest {
		return &chunkupv1.UploadChunkRequest{UploadId: up.UploadId, ChunkNumber: n, Data: b, IsLast: last}
	}
	if err := send(chunkReq(sized, 1, data[:chunk], false)); err != nil {
		t.Fatal(err)
	}
	if err := send(chunkReq(open, 1, data[:chunk], false), chunkReq(open, 2, data[:100], true)); err != nil {
		t.Fatal(err)
	}
	badCRC := crc.Checksum(data[chunk:2*chunk]) + 1

	for _, tc := range []struct {
		name string
		call func() error
		code codes.Code
		want string // part of the message; with a leading ^, how it starts
	}{
		{"unknown upload id", func() error {
			return send(&chunkupv1.UploadChunkRequest{UploadId: ids.New(), ChunkNumber: 1, Data: []byte("a"), IsLast: true})
		}, codes.NotFound, "not found"},
		{"malformed upload id", func() error {
			return send(&chunkupv1.UploadChunkRequest{UploadId: "../etc", ChunkNumber: 1})
		}, codes.InvalidArgument, `^upload_id "../etc" is not a chunkup upload id`},
		{"malformed upload id, GetUpload", func() error {
			_, err := c.API().GetUpload(ctx(t), &chunkupv1.GetUploadRequest{UploadId: "nope"})
			return err
		}, codes.InvalidArgument, `^upload_id "nope" is not a chunkup upload id`}, // named once, not as an upload
		{"missing upload id", func() error {
			return send(&chunkupv1.UploadChunkRequest{ChunkNumber: 1})
		}, codes.InvalidArgument, "upload_id is required: create an upload first, or send a create request in the first message"},
		{"missing upload id, GetUpload", func() error {
			_, err := c.API().GetUpload(ctx(t), &chunkupv1.GetUploadRequest{})
			return err
		}, codes.InvalidArgument, "upload_id is required: name the upload"},
		{"missing upload id, AbortUpload", func() error {
			_, err := c.API().AbortUpload(ctx(t), &chunkupv1.AbortUploadRequest{})
			return err
		}, codes.InvalidArgument, "upload_id is required: name the upload"},
		{"chunk number zero", func() error { return send(chunkReq(sized, 0, data[:chunk], false)) },
			codes.InvalidArgument, "at least 1"},
		{"non-last chunk of another size", func() error { return send(chunkReq(sized, 2, data[:chunk-1], false)) },
			codes.InvalidArgument, "chunk_size"},
		{"last chunk of the wrong size", func() error { return send(chunkReq(sized, 3, data[:9], false)) },
			codes.InvalidArgument, "must have 10 bytes"},
		{"chunk beyond the expected count", func() error { return send(chunkReq(sized, 4, data[:10], false)) },
			codes.OutOfRange, "beyond"},
		{"chunk beyond the last chunk", func() error { return send(chunkReq(open, 3, data[:chunk], false)) },
			codes.OutOfRange, "beyond"},
		{"second is_last with another number", func() error { return send(chunkReq(open, 1, data[:chunk], true)) },
			codes.FailedPrecondition, "chunk 2 already is"},
		// Other bytes than the completed upload holds (the same bytes are a repeat,
		// acknowledged again: TestRepeatedOneMessageUpload).
		{"other data after completion", func() error { return send(chunkReq(done, 1, []byte("y"), true)) },
			codes.FailedPrecondition, "COMPLETED"},
		{"checksum mismatch", func() error {
			r := chunkReq(sized, 2, data[chunk:2*chunk], false)
			r.Crc32C = &badCRC
			return send(r)
		}, codes.DataLoss, "send it again"},
		// A create and the chunk it carries are one message, refused as a whole.
		{"create with chunk number zero", func() error {
			return send(&chunkupv1.UploadChunkRequest{Create: &chunkupv1.CreateUploadRequest{ExpectedSize: proto.Int64(12)}, Data: []byte("hello world\n")})
		}, codes.InvalidArgument, "nothing was created"},
		{"create with a chunk of another checksum", func() error {
			wrong := crc.Checksum([]byte("a")) + 1
			return send(&chunkupv1.UploadChunkRequest{Create: &chunkupv1.CreateUploadRequest{ExpectedSize: proto.Int64(1)},
				ChunkNumber: 1, Data: []byte("a"), IsLast: true, Crc32C: &wrong})
		}, codes.DataLoss, "nothing was created"},
		{"create with a chunk longer than its size", func() error {
			return send(&chunkupv1.UploadChunkRequest{Create: &chunkupv1.CreateUploadRequest{ExpectedSize: proto.Int64(1)},
				ChunkNumber: 1, Data: []byte("ab"), IsLast: true})
		}, codes.InvalidArgument, "nothing was created"},
		{"create after the first message", func() error {
			first := &chunkupv1.UploadChunkRequest{Create: &chunkupv1.CreateUploadRequest{}}
			return send(first, &chunkupv1.UploadChunkRequest{Create: &chunkupv1.CreateUploadRequest{}})
		}, codes.InvalidArgument, "first message"},
		{"negative expected size", func() error {
			_, err := c.API().CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{ExpectedSize: proto.Int64(-1)})
			return err
		}, codes.InvalidArgument, "unset when the size is unknown"},
		{"size beyond the largest upload", func() error {
			_, err := c.API().CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{ExpectedSize: proto.Int64(10000*64*MiB + 1)})
			return err
		}, codes.InvalidArgument, "maximum chunk size"},
		{"key escaping with ..", func() error {
			_, err := c.API().CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{Key: "a/../../etc/passwd"})
			return err
		}, codes.InvalidArgument, "'..'"},
		{"abort a completed upload", func() error {
			_, err := c.API().AbortUpload(ctx(t), &chunkupv1.AbortUploadRequest{UploadId: done.UploadId})
			return err
		}, codes.FailedPrecondition, "cannot be aborted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := []*chunkupv1.Upload{getUpload(t, c, sized.UploadId), getUpload(t, c, open.UploadId), getUpload(t, c, done.UploadId)}
			uploadsBefore := countUploads(t, c)
			err := tc.call()
			if status.Code(err) != tc.code {
				t.Fatalf("got %v, want code %v", err, tc.code)
			}
			msg := status.Convert(err).Message()
			if start, ok := strings.CutPrefix(tc.want, "^"); ok && !strings.HasPrefix(msg, start) {
				t.Errorf("message %q does not start with %q", msg, start)
			} else if !ok && !contains(msg, tc.want) {
				t.Errorf("message %q does not say %q", msg, tc.want)
			}
			after := []*chunkupv1.Upload{getUpload(t, c, sized.UploadId), getUpload(t, c, open.UploadId), getUpload(t, c, done.UploadId)}
			for i := range before {
				if !proto.Equal(before[i], after[i]) {
					t.Errorf("state changed:\nbefore %v\nafter  %v", before[i], after[i])
				}
			}
			// "create after the first message" creates one upload with its first message,
			// which is valid; the refusal is of the second.
			if n := countUploads(t, c); n != uploadsBefore && tc.name != "create after the first message" {
				t.Errorf("%d uploads before, %d after: a refused request created one", uploadsBefore, n)
			}
		})
	}
}

// countUploads is the number of the caller's uploads.
func countUploads(t *testing.T, c *client.Client) int {
	t.Helper()
	n := 0
	for token := ""; ; {
		r, err := c.API().ListUploads(ctx(t), &chunkupv1.ListUploadsRequest{PageSize: 500, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		n += len(r.Uploads)
		if token = r.NextPageToken; token == "" {
			return n
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
