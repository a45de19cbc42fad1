package e2e

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/server"
)

// TestCreateOnStreamThenChunks drives the generated stubs as a client written from the
// proto alone would: the first message creates the upload with a chunk size of its own
// and carries chunk 1; the next messages leave upload_id empty. The object is exact.
func TestCreateOnStreamThenChunks(t *testing.T) {
	e := newEnv(t)
	a := e.start(t, e.config())
	api := e.client(t, a).API()
	const cs = 5 * MiB
	data := randomBytes(2*cs+777, 41)
	stream, err := api.UploadChunk(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	first := &chunkupv1.UploadChunkRequest{
		Create:      &chunkupv1.CreateUploadRequest{Name: "three.bin", ExpectedSize: proto.Int64(int64(len(data))), ChunkSize: cs},
		ChunkNumber: 1, Data: data[:cs], Crc32C: proto.Uint32(crc.Checksum(data[:cs])),
	}
	if err := stream.Send(first); err != nil {
		t.Fatal(err)
	}
	created, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetUpload().GetUploadId()
	if id == "" || created.Upload.ChunkSize != cs || created.Upload.TotalChunks != 3 {
		t.Fatalf("create on stream answered %v; want the new upload with chunk_size %d and 3 chunks", created, cs)
	}
	if ack, err := stream.Recv(); err != nil || ack.ChunkNumber != 1 || ack.UploadId != id {
		t.Fatalf("ack of chunk 1: %v %v", ack, err)
	}
	for n, part := range [][]byte{data[cs : 2*cs], data[2*cs:]} {
		if err := stream.Send(&chunkupv1.UploadChunkRequest{ChunkNumber: uint32(n + 2), Data: part}); err != nil {
			t.Fatal(err)
		}
		ack, err := stream.Recv()
		if err != nil || ack.ChunkNumber != uint32(n+2) || ack.UploadId != id || ack.Crc32C != crc.Checksum(part) {
			t.Fatalf("ack of chunk %d: %v %v", n+2, ack, err)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("stream end: %v, want EOF", err)
	}
	up, err := e.client(t, a).Wait(ctx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	e.requireExact(t, up, data)
}

// TestRepeatedOneMessageUpload: a one-message upload (create and its only chunk) sent
// again with the same client_node_id after the server completed it, as a client that
// lost the first answer does, gets the completed upload and its chunk acknowledged as a
// repeat with the same checksum; the same message with other bytes is refused with
// FAILED_PRECONDITION and the object stays the first one.
func TestRepeatedOneMessageUpload(t *testing.T) {
	e := newEnv(t)
	a := e.start(t, e.config())
	api := e.client(t, a).API()
	data := randomBytes(3000, 43)
	send := func(t *testing.T, data []byte) (created, ack *chunkupv1.UploadChunkResponse, err error) {
		t.Helper()
		stream, err := api.UploadChunk(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&chunkupv1.UploadChunkRequest{
			Create:      &chunkupv1.CreateUploadRequest{Name: "once.bin", ExpectedSize: proto.Int64(int64(len(data))), ClientNodeId: "once-1"},
			ChunkNumber: 1, Data: data, IsLast: true,
		}); err != nil {
			t.Fatal(err)
		}
		if created, err = stream.Recv(); err != nil {
			return nil, nil, err
		}
		ack, err = stream.Recv()
		return created, ack, err
	}
	_, first, err := send(t, data)
	if err != nil || first.GetCompleted().GetState() != chunkupv1.UploadState_UPLOAD_STATE_COMPLETED {
		t.Fatalf("first upload: %v %v; want its chunk acknowledged with the COMPLETED upload", first, err)
	}
	created, again, err := send(t, data)
	if err != nil {
		t.Fatalf("the same upload again: %v; want its chunk acknowledged", err)
	}
	id := first.UploadId
	if created.GetUpload().GetUploadId() != id || created.Upload.State != chunkupv1.UploadState_UPLOAD_STATE_COMPLETED {
		t.Fatalf("create repeated: %v; want upload %s, COMPLETED", created, id)
	}
	if again.UploadId != id || again.ChunkNumber != 1 || !again.Stored || !again.Duplicate || again.Crc32C != crc.Checksum(data) ||
		again.GetCompleted().GetState() != chunkupv1.UploadState_UPLOAD_STATE_COMPLETED {
		t.Fatalf("chunk repeated: %v; want it acknowledged as a stored repeat with the COMPLETED upload", again)
	}
	other := randomBytes(len(data), 44)
	if _, _, err := send(t, other); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("the same message with other bytes: %v; want FAILED_PRECONDITION", err)
	}
	up, err := e.client(t, a).Wait(ctx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	e.requireExact(t, up, data)
	// One completion, one time: the acknowledgement's, the repeat's and GetUpload's.
	for _, got := range []*chunkupv1.Upload{first.Completed, again.Completed} {
		if !proto.Equal(got.CompleteTime, up.CompleteTime) || !proto.Equal(got.UpdateTime, up.UpdateTime) {
			t.Errorf("acknowledged complete_time %v, update_time %v; GetUpload says %v, %v",
				got.CompleteTime.AsTime(), got.UpdateTime.AsTime(), up.CompleteTime.AsTime(), up.UpdateTime.AsTime())
		}
	}
}

// TestStreamAfterCreateCarriesOnlyItsUpload: a stream that created an upload refuses a
// chunk naming another one, and that other upload stays as it was.
func TestStreamAfterCreateCarriesOnlyItsUpload(t *testing.T) {
	e := newEnv(t)
	a := e.start(t, e.config("api"))
	api := e.client(t, a).API()
	other, err := api.CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := api.UploadChunk(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&chunkupv1.UploadChunkRequest{Create: &chunkupv1.CreateUploadRequest{}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	_ = stream.Send(&chunkupv1.UploadChunkRequest{UploadId: other.Upload.UploadId, ChunkNumber: 1, Data: []byte("x"), IsLast: true})
	_, err = stream.Recv()
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "stream of their own") {
		t.Fatalf("chunk of another upload on a create stream: %v, want INVALID_ARGUMENT saying to use a stream of its own", err)
	}
	if got := getUpload(t, e.client(t, a), other.Upload.UploadId); len(got.ReceivedChunks) != 0 {
		t.Fatalf("the other upload received %v", got.ReceivedChunks)
	}
}

// TestProposedChunkSize: a chunk size the client proposes is taken when S3's part rules
// allow it, and refused with the sizes that are allowed otherwise.
func TestProposedChunkSize(t *testing.T) {
	e := newEnv(t)
	a := e.start(t, e.config("api"))
	api := e.client(t, a).API()
	for _, tc := range []struct {
		name     string
		expected *int64
		proposed int64
		code     codes.Code
		want     string // chunk size, or part of the message
	}{
		{"6 MiB", proto.Int64(100 * MiB), 6 * MiB, codes.OK, ""},
		{"exactly 5 MiB, size unknown", nil, 5 * MiB, codes.OK, ""},
		{"under S3's minimum part", proto.Int64(100 * MiB), MiB, codes.InvalidArgument, "use 5242880 to 67108864 bytes"},
		{"over the server's maximum", nil, 65 * MiB, codes.InvalidArgument, "maximum chunk size is 67108864"},
		{"too small for 10,000 parts", proto.Int64(100_000 * MiB), 8 * MiB, codes.InvalidArgument, "use 10485760 to"},
		{"negative", nil, -1, codes.InvalidArgument, "must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := api.CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{ExpectedSize: tc.expected, ChunkSize: tc.proposed})
			if status.Code(err) != tc.code {
				t.Fatalf("create: %v, want %v", err, tc.code)
			}
			if err != nil {
				if !strings.Contains(status.Convert(err).Message(), tc.want) {
					t.Fatalf("message %q does not say %q", status.Convert(err).Message(), tc.want)
				}
				return
			}
			if r.Upload.ChunkSize != tc.proposed {
				t.Fatalf("chunk_size %d, want the proposed %d", r.Upload.ChunkSize, tc.proposed)
			}
		})
	}
}

// TestClientNodeIDConflict: the same create under one client_node_id returns the same
// upload; another create under it is ALREADY_EXISTS and names what differs.
func TestClientNodeIDConflict(t *testing.T) {
	e := newEnv(t)
	a := e.start(t, e.config("api"))
	api := e.client(t, a).API()
	base := &chunkupv1.CreateUploadRequest{ClientNodeId: "node-1", Key: "docs/a.pdf", Name: "a.pdf",
		ContentType: "application/pdf", ExpectedSize: proto.Int64(10), Metadata: map[string]string{"k": "v"}}
	first, err := api.CreateUpload(ctx(t), base)
	if err != nil {
		t.Fatal(err)
	}
	again, err := api.CreateUpload(ctx(t), base)
	if err != nil || again.Upload.UploadId != first.Upload.UploadId {
		t.Fatalf("repeated create: %v %v, want upload %s", again, err, first.Upload.UploadId)
	}
	for _, tc := range []struct {
		field  string
		change func(*chunkupv1.CreateUploadRequest)
	}{
		{"key", func(r *chunkupv1.CreateUploadRequest) { r.Key = "docs/b.pdf" }},
		{"expected_size", func(r *chunkupv1.CreateUploadRequest) { r.ExpectedSize = proto.Int64(11) }},
		{"name", func(r *chunkupv1.CreateUploadRequest) { r.Name = "b.pdf" }},
		{"content_type", func(r *chunkupv1.CreateUploadRequest) { r.ContentType = "image/png" }},
		{"metadata", func(r *chunkupv1.CreateUploadRequest) { r.Metadata = map[string]string{"k": "w"} }},
		{"chunk_size", func(r *chunkupv1.CreateUploadRequest) { r.ChunkSize = 6 * MiB }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			req := proto.Clone(base).(*chunkupv1.CreateUploadRequest)
			tc.change(req)
			_, err := api.CreateUpload(ctx(t), req)
			if status.Code(err) != codes.AlreadyExists || !strings.Contains(status.Convert(err).Message(), "another "+tc.field) {
				t.Fatalf("create with another %s: %v, want ALREADY_EXISTS naming it", tc.field, err)
			}
		})
	}
	// Without a key, the server makes one from the name: the field that differs is the
	// name the client sent, not the key the server made from it.
	t.Run("name, without a key", func(t *testing.T) {
		req := &chunkupv1.CreateUploadRequest{ClientNodeId: "node-2", Name: "x.bin", ExpectedSize: proto.Int64(100)}
		if _, err := api.CreateUpload(ctx(t), req); err != nil {
			t.Fatal(err)
		}
		req.Name = "y.bin"
		_, err := api.CreateUpload(ctx(t), req)
		if status.Code(err) != codes.AlreadyExists || !strings.Contains(status.Convert(err).Message(), "another name") {
			t.Fatalf("create with another name: %v, want ALREADY_EXISTS naming the name", err)
		}
	})
}

// TestResumeCannotMixInputs resumes uploads with inputs other than theirs: the result
// is either refused (a MismatchError, the upload unchanged) or an object exactly equal
// to the new input, never a mix of the two.
func TestResumeCannotMixInputs(t *testing.T) {
	e := newEnv(t)
	size := 2*chunk + 1000
	fileA, fileB := randomBytes(size, 51), randomBytes(size, 52)

	t.Run("staged chunks are replaced", func(t *testing.T) {
		api := e.start(t, e.config("api")) // no worker: chunk 1 stays staged
		c := e.client(t, api)
		up := createAndSend(t, c, fileA, 1)
		api.Stop()
		full := e.start(t, e.config())
		got, err := e.client(t, full).Upload(ctx(t), reader(fileB), client.WithResume(up.UploadId), client.WithSize(int64(size)))
		if err != nil {
			t.Fatalf("resume with another file whose chunks are only staged: %v", err)
		}
		e.requireExact(t, got, fileB)
	})

	full := e.start(t, e.config())
	c := e.client(t, full)
	t.Run("stored chunks refuse", func(t *testing.T) {
		up := createAndSend(t, c, fileA, 1, 2)
		waitFor(t, "chunks stored in S3", func() bool { return getUpload(t, c, up.UploadId).UploadedChunks == 2 })
		_, err := c.Upload(ctx(t), reader(fileB), client.WithResume(up.UploadId), client.WithSize(int64(size)))
		var mm *client.MismatchError
		if !errors.As(err, &mm) || !strings.Contains(err.Error(), "chunk 1 is stored") {
			t.Fatalf("resume with another file over stored chunks: %v, want a MismatchError naming chunk 1", err)
		}
		if got := getUpload(t, c, up.UploadId); got.State != chunkupv1.UploadState_UPLOAD_STATE_ACTIVE || len(got.ReceivedChunks) != 2 {
			t.Fatalf("after the refused resume: %v with chunks %v; want it ACTIVE with the 2 chunks it had", got.State, got.ReceivedChunks)
		}
		done, err := c.Upload(ctx(t), reader(fileA), client.WithResume(up.UploadId), client.WithSize(int64(size)))
		if err != nil {
			t.Fatalf("resume with the right file: %v", err)
		}
		e.requireExact(t, done, fileA)
	})
	t.Run("another size refuses", func(t *testing.T) {
		up := createAndSend(t, c, fileA, 1)
		_, err := c.Upload(ctx(t), reader(fileA[:size-1]), client.WithResume(up.UploadId), client.WithSize(int64(size-1)))
		var mm *client.MismatchError
		if !errors.As(err, &mm) {
			t.Fatalf("resume with a shorter file: %v, want a MismatchError", err)
		}
	})
	t.Run("completed upload refuses another file", func(t *testing.T) {
		up, err := c.Upload(ctx(t), reader(fileA), client.WithSize(int64(size)))
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Upload(ctx(t), reader(fileB), client.WithResume(up.UploadId))
		var mm *client.MismatchError
		if !errors.As(err, &mm) || !strings.Contains(err.Error(), "COMPLETED") {
			t.Fatalf("resume of a completed upload with another file: %v, want a MismatchError", err)
		}
		if _, err := c.Upload(ctx(t), reader(fileA), client.WithResume(up.UploadId)); err != nil {
			t.Fatalf("resume of a completed upload with its own file: %v", err)
		}
	})
}

// createAndSend creates an upload for data and sends only the chunks numbered ns
// through the raw stub.
func createAndSend(t *testing.T, c *client.Client, data []byte, ns ...uint32) *chunkupv1.Upload {
	t.Helper()
	r, err := c.API().CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{ExpectedSize: proto.Int64(int64(len(data)))})
	if err != nil {
		t.Fatal(err)
	}
	up := r.Upload
	stream, err := c.API().UploadChunk(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ns {
		lo := int64(n-1) * up.ChunkSize
		hi := min(lo+up.ChunkSize, int64(len(data)))
		if err := stream.Send(&chunkupv1.UploadChunkRequest{UploadId: up.UploadId, ChunkNumber: n, Data: data[lo:hi]}); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatalf("chunk %d: %v", n, err)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("stream end: %v", err)
	}
	return up
}

// TestListUploads lists a tenant's uploads in progress through the raw stub: page by
// page, oldest first, without another tenant's, without those that ended, and with
// precise errors for a bad page size or token.
func TestListUploads(t *testing.T) {
	e := newEnv(t)
	cfg := e.config("api")
	cfg.Auth = server.AuthConfig{JWTSecret: jwtSecret}
	a := e.start(t, cfg)
	acme := e.client(t, a, client.WithBearerToken(token(t, "acme"))).API()
	globex := e.client(t, a, client.WithBearerToken(token(t, "globex"))).API()
	var want []string
	for i := range 5 {
		r, err := acme.CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{Name: fmt.Sprintf("f%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, r.Upload.UploadId)
	}
	if _, err := globex.CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{Name: "theirs"}); err != nil {
		t.Fatal(err)
	}
	if _, err := acme.AbortUpload(ctx(t), &chunkupv1.AbortUploadRequest{UploadId: want[1]}); err != nil {
		t.Fatal(err)
	}
	want = append(want[:1], want[2:]...) // the aborted one is not in progress

	var got []string
	token := ""
	for pages := 0; ; pages++ {
		r, err := acme.ListUploads(ctx(t), &chunkupv1.ListUploadsRequest{PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Uploads) > 2 {
			t.Fatalf("page of %d uploads, asked for 2", len(r.Uploads))
		}
		for _, u := range r.Uploads {
			if u.Tenant != "acme" || u.State != chunkupv1.UploadState_UPLOAD_STATE_ACTIVE || len(u.Chunks) != 0 {
				t.Fatalf("listed %v", u)
			}
			got = append(got, u.UploadId)
		}
		if token = r.NextPageToken; token == "" {
			break
		}
		if pages > 5 {
			t.Fatal("the listing does not end")
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("listed %v, want %v (oldest first)", got, want)
	}
	for _, tc := range []struct {
		name string
		req  *chunkupv1.ListUploadsRequest
		says string
	}{
		{"page too large", &chunkupv1.ListUploadsRequest{PageSize: 501}, "between 1 and 500"},
		{"negative page", &chunkupv1.ListUploadsRequest{PageSize: -1}, "between 1 and 500"},
		{"forged token", &chunkupv1.ListUploadsRequest{PageToken: "not-a-token"}, "not one this server gave"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := acme.ListUploads(ctx(t), tc.req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.says) {
				t.Fatalf("%v, want INVALID_ARGUMENT saying %q", err, tc.says)
			}
		})
	}
}
