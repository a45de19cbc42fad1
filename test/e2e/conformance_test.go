package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/server"
)

// TestConformance checks, one case each, the behaviours that proto/chunkup/v1/upload.proto
// and docs/grpc-api.md promise, as a client written from the proto alone sees them: through
// the raw generated stubs, never the SDK. TestOnCluster runs it on a Redis Cluster too.
func TestConformance(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.Auth = server.AuthConfig{JWTSecret: jwtSecret}
	a := e.start(t, cfg)
	c := &conformance{e: e,
		api:   e.client(t, a, client.WithBearerToken(token(t, "acme"))).API(),
		other: e.client(t, a, client.WithBearerToken(token(t, "globex"))).API()}
	for _, tc := range []struct {
		promise string
		check   func(t *testing.T, c *conformance)
	}{
		{"CreateUpload returns an ACTIVE upload with its chunk size and number of chunks", func(t *testing.T, c *conformance) {
			up := c.create(t, &chunkupv1.CreateUploadRequest{Name: "dir/a.bin", ExpectedSize: proto.Int64(20 * MiB)})
			if up.State != chunkupv1.UploadState_UPLOAD_STATE_ACTIVE || up.ChunkSize != chunk || up.TotalChunks != 3 ||
				up.ExpectedSize != 20*MiB || up.Key != "acme/uploads/"+up.UploadId+"/a.bin" || up.Tenant != "acme" {
				t.Fatalf("created %v", up)
			}
		}},
		{"an unknown size is expected_size -1 and total_chunks 0", func(t *testing.T, c *conformance) {
			up := c.create(t, &chunkupv1.CreateUploadRequest{})
			if up.ExpectedSize != -1 || up.TotalChunks != 0 {
				t.Fatalf("created %v", up)
			}
		}},
		{"the chunk size grows to fit 10,000 chunks, rounded up to a MiB", func(t *testing.T, c *conformance) {
			up := c.create(t, &chunkupv1.CreateUploadRequest{ExpectedSize: proto.Int64(10_000*chunk + 1)})
			if up.ChunkSize != chunk+MiB {
				t.Fatalf("chunk_size %d, want %d", up.ChunkSize, chunk+MiB)
			}
		}},
		{"a proposed chunk size S3 allows is taken", func(t *testing.T, c *conformance) {
			if up := c.create(t, &chunkupv1.CreateUploadRequest{ChunkSize: 7 * MiB}); up.ChunkSize != 7*MiB {
				t.Fatalf("chunk_size %d, want the proposed 7 MiB", up.ChunkSize)
			}
			_, err := c.api.CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{ChunkSize: MiB})
			expectStatus(t, "a 1 MiB chunk size", err, codes.InvalidArgument, "5242880")
		}},
		{"the same create under one client_node_id is one upload; another is ALREADY_EXISTS", func(t *testing.T, c *conformance) {
			req := &chunkupv1.CreateUploadRequest{ClientNodeId: "conf-" + c.e.redisURL(), Name: "x"}
			a, b := c.create(t, req), c.create(t, req)
			if a.UploadId != b.UploadId {
				t.Fatalf("two uploads %s and %s for one client_node_id", a.UploadId, b.UploadId)
			}
			_, err := c.api.CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{ClientNodeId: req.ClientNodeId, Name: "x", ContentType: "text/plain"})
			expectStatus(t, "another create", err, codes.AlreadyExists, "another content_type")
		}},
		{"keys are refused with dot segments or Unicode format characters", func(t *testing.T, c *conformance) {
			for _, key := range []string{"a/../b", "a//b", "invoice\u202efdp.exe"} {
				_, err := c.api.CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{Key: key})
				expectStatus(t, "key "+key, err, codes.InvalidArgument, "key")
			}
		}},
		{"chunks are numbered from 1, and every chunk but the last has chunk_size bytes", func(t *testing.T, c *conformance) {
			up := c.create(t, &chunkupv1.CreateUploadRequest{ExpectedSize: proto.Int64(2 * chunk)})
			_, err := c.send(t, &chunkupv1.UploadChunkRequest{UploadId: up.UploadId, ChunkNumber: 0, Data: []byte("x")})
			expectStatus(t, "chunk 0", err, codes.InvalidArgument, "at least 1")
			_, err = c.send(t, &chunkupv1.UploadChunkRequest{UploadId: up.UploadId, ChunkNumber: 1, Data: make([]byte, chunk-1)})
			expectStatus(t, "a short chunk 1", err, codes.InvalidArgument, "chunk_size")
			if got := c.get(t, up.UploadId); len(got.ReceivedChunks) != 0 {
				t.Fatalf("refused chunks were staged: %v", got.ReceivedChunks)
			}
		}},
		{"each chunk is acknowledged with its number and CRC32C", func(t *testing.T, c *conformance) {
			up := c.create(t, &chunkupv1.CreateUploadRequest{})
			data := randomBytes(chunk, 801)
			acks, err := c.send(t, &chunkupv1.UploadChunkRequest{UploadId: up.UploadId, ChunkNumber: 1, Data: data})
			if err != nil || len(acks) != 1 || acks[0].ChunkNumber != 1 || acks[0].Crc32C != crc.Checksum(data) || acks[0].Duplicate {
				t.Fatalf("acks %v, %v", acks, err)
			}
		}},
		{"a chunk whose CRC32C does not match is DATA_LOSS and stages nothing", func(t *testing.T, c *conformance) {
			up := c.create(t, &chunkupv1.CreateUploadRequest{})
			data := randomBytes(100, 802)
			_, err := c.send(t, &chunkupv1.UploadChunkRequest{UploadId: up.UploadId, ChunkNumber: 1, Data: data,
				Crc32C: proto.Uint32(crc.Checksum(data) ^ 1), IsLast: true})
			expectStatus(t, "a bad CRC32C", err, codes.DataLoss, "send it again")
			if got := c.get(t, up.UploadId); len(got.ReceivedChunks) != 0 {
				t.Fatalf("a corrupt chunk was staged: %v", got.ReceivedChunks)
			}
		}},
		{"a repeated chunk is acknowledged again as a duplicate and not staged twice", func(t *testing.T, c *conformance) {
			up := c.create(t, &chunkupv1.CreateUploadRequest{})
			msg := &chunkupv1.UploadChunkRequest{UploadId: up.UploadId, ChunkNumber: 1, Data: randomBytes(chunk, 803)}
			acks, err := c.send(t, msg, msg)
			if err != nil || len(acks) != 2 || acks[0].Duplicate || !acks[1].Duplicate {
				t.Fatalf("acks %v, %v", acks, err)
			}
			if got := c.get(t, up.UploadId); got.ReceivedBytes != chunk || len(got.ReceivedChunks) != 1 {
				t.Fatalf("after a repeat: %d bytes in %v", got.ReceivedBytes, got.ReceivedChunks)
			}
		}},
		{"chunks out of order on several streams make an exact object", func(t *testing.T, c *conformance) {
			data := randomBytes(3*chunk+5, 804)
			up := c.create(t, &chunkupv1.CreateUploadRequest{ExpectedSize: proto.Int64(int64(len(data)))})
			for _, n := range []uint32{4, 2} {
				if _, err := c.send(t, c.chunkOf(up, data, n)); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := c.send(t, c.chunkOf(up, data, 3), c.chunkOf(up, data, 1)); err != nil {
				t.Fatal(err)
			}
			c.exact(t, up.UploadId, data)
		}},
		{"is_last fixes the number of chunks of an upload of unknown size", func(t *testing.T, c *conformance) {
			data := randomBytes(chunk+7, 805)
			up := c.create(t, &chunkupv1.CreateUploadRequest{})
			msgs := []*chunkupv1.UploadChunkRequest{c.chunkOf(up, data, 1), c.chunkOf(up, data, 2)}
			msgs[1].IsLast = true
			if _, err := c.send(t, msgs...); err != nil {
				t.Fatal(err)
			}
			if got := c.exact(t, up.UploadId, data); got.TotalChunks != 2 {
				t.Fatalf("total_chunks %d, want 2", got.TotalChunks)
			}
		}},
		{"a create on the stream: first message only, later messages may leave upload_id out", func(t *testing.T, c *conformance) {
			data := randomBytes(chunk+9, 806)
			acks, err := c.send(t,
				&chunkupv1.UploadChunkRequest{Create: &chunkupv1.CreateUploadRequest{ExpectedSize: proto.Int64(int64(len(data)))}},
				&chunkupv1.UploadChunkRequest{ChunkNumber: 1, Data: data[:chunk]},
				&chunkupv1.UploadChunkRequest{ChunkNumber: 2, Data: data[chunk:]})
			if err != nil || len(acks) != 3 || acks[0].ChunkNumber != 0 || acks[0].Upload == nil {
				t.Fatalf("acks %v, %v", acks, err)
			}
			c.exact(t, acks[0].UploadId, data)
			other := c.create(t, &chunkupv1.CreateUploadRequest{})
			_, err = c.send(t, &chunkupv1.UploadChunkRequest{Create: &chunkupv1.CreateUploadRequest{}},
				&chunkupv1.UploadChunkRequest{UploadId: other.UploadId, ChunkNumber: 1, Data: []byte("x"), IsLast: true})
			expectStatus(t, "another upload on a create stream", err, codes.InvalidArgument, "stream of their own")
			_, err = c.send(t, &chunkupv1.UploadChunkRequest{UploadId: other.UploadId, ChunkNumber: 1, Data: []byte("x"), IsLast: true},
				&chunkupv1.UploadChunkRequest{Create: &chunkupv1.CreateUploadRequest{}})
			expectStatus(t, "a create after the first message", err, codes.InvalidArgument, "first message")
		}},
		{"GetUpload lists each received chunk's size and CRC32C, enough to resume", func(t *testing.T, c *conformance) {
			data := randomBytes(2*chunk+3, 807)
			up := c.create(t, &chunkupv1.CreateUploadRequest{ExpectedSize: proto.Int64(int64(len(data)))})
			if _, err := c.send(t, c.chunkOf(up, data, 2)); err != nil {
				t.Fatal(err)
			}
			got := c.get(t, up.UploadId)
			if len(got.Chunks) != 1 || got.Chunks[0].ChunkNumber != 2 || got.Chunks[0].Size != chunk ||
				got.Chunks[0].Crc32C != crc.Checksum(data[chunk:2*chunk]) {
				t.Fatalf("chunks %v", got.Chunks)
			}
			// A resuming client sends what received_chunks lacks.
			if _, err := c.send(t, c.chunkOf(up, data, 1), c.chunkOf(up, data, 3)); err != nil {
				t.Fatal(err)
			}
			c.exact(t, up.UploadId, data)
		}},
		{"other bytes for a chunk already stored in S3 are FAILED_PRECONDITION", func(t *testing.T, c *conformance) {
			data := randomBytes(2*chunk, 808)
			up := c.create(t, &chunkupv1.CreateUploadRequest{ExpectedSize: proto.Int64(int64(len(data)))})
			if _, err := c.send(t, c.chunkOf(up, data, 1)); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "chunk 1 stored", func() bool { g := c.get(t, up.UploadId); return len(g.Chunks) == 1 && g.Chunks[0].Stored })
			_, err := c.send(t, &chunkupv1.UploadChunkRequest{UploadId: up.UploadId, ChunkNumber: 1, Data: randomBytes(chunk, 809)})
			expectStatus(t, "other bytes for a stored chunk", err, codes.FailedPrecondition, "different checksum")
		}},
		{"the same bytes again for a chunk already stored in S3 are a duplicate, stored", func(t *testing.T, c *conformance) {
			data := randomBytes(2*chunk, 812)
			up := c.create(t, &chunkupv1.CreateUploadRequest{ExpectedSize: proto.Int64(int64(len(data)))})
			if _, err := c.send(t, c.chunkOf(up, data, 1)); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "chunk 1 stored", func() bool { g := c.get(t, up.UploadId); return len(g.Chunks) == 1 && g.Chunks[0].Stored })
			acks, err := c.send(t, c.chunkOf(up, data, 1))
			if err != nil {
				t.Fatal(err)
			}
			if len(acks) != 1 || !acks[0].Duplicate || !acks[0].Stored {
				t.Fatalf("acknowledgements of a repeat of a stored chunk: %v, want one, duplicate and stored", acks)
			}
		}},
		{"a one-chunk upload is one PutObject, an empty one too", func(t *testing.T, c *conformance) {
			for _, data := range [][]byte{randomBytes(1000, 810), {}} {
				up := c.create(t, &chunkupv1.CreateUploadRequest{ExpectedSize: proto.Int64(int64(len(data)))})
				if _, err := c.send(t, &chunkupv1.UploadChunkRequest{UploadId: up.UploadId, ChunkNumber: 1, Data: data}); err != nil {
					t.Fatal(err)
				}
				if got := c.exact(t, up.UploadId, data); strings.Contains(got.Etag, "-") {
					t.Fatalf("etag %s of a one-chunk upload is a multipart one", got.Etag)
				}
			}
		}},
		{"a completed upload has the object's size, ETag and CRC32C", func(t *testing.T, c *conformance) {
			data := randomBytes(chunk+11, 811)
			up := c.create(t, &chunkupv1.CreateUploadRequest{ExpectedSize: proto.Int64(int64(len(data)))})
			if _, err := c.send(t, c.chunkOf(up, data, 1), c.chunkOf(up, data, 2)); err != nil {
				t.Fatal(err)
			}
			got := c.exact(t, up.UploadId, data)
			if got.Crc32C != crc.Checksum(data) || !strings.HasSuffix(got.Etag, `-2"`) || got.CompleteTime == nil {
				t.Fatalf("completed %v", got)
			}
		}},
		{"AbortUpload records the reason, is a no-op twice, and refuses a completed upload", func(t *testing.T, c *conformance) {
			up := c.create(t, &chunkupv1.CreateUploadRequest{})
			for range 2 {
				r, err := c.api.AbortUpload(ctx(t), &chunkupv1.AbortUploadRequest{UploadId: up.UploadId, Reason: "changed my mind"})
				if err != nil || r.Upload.State != chunkupv1.UploadState_UPLOAD_STATE_ABORTED || r.Upload.Error != "changed my mind" {
					t.Fatalf("abort: %v %v", r, err)
				}
			}
			done := c.create(t, &chunkupv1.CreateUploadRequest{ExpectedSize: proto.Int64(1)})
			if _, err := c.send(t, &chunkupv1.UploadChunkRequest{UploadId: done.UploadId, ChunkNumber: 1, Data: []byte("z")}); err != nil {
				t.Fatal(err)
			}
			c.exact(t, done.UploadId, []byte("z"))
			_, err := c.api.AbortUpload(ctx(t), &chunkupv1.AbortUploadRequest{UploadId: done.UploadId})
			expectStatus(t, "abort of a completed upload", err, codes.FailedPrecondition, "cannot be aborted")
		}},
		{"WatchUpload sends a snapshot, then progress, and ends with the upload", func(t *testing.T, c *conformance) {
			data := randomBytes(chunk+13, 812)
			up := c.create(t, &chunkupv1.CreateUploadRequest{ExpectedSize: proto.Int64(int64(len(data)))})
			stream, err := c.api.WatchUpload(ctx(t), &chunkupv1.WatchUploadRequest{UploadId: up.UploadId})
			if err != nil {
				t.Fatal(err)
			}
			first, err := stream.Recv()
			if err != nil || first.Progress.State != chunkupv1.UploadState_UPLOAD_STATE_ACTIVE || first.Progress.Percent != 0 {
				t.Fatalf("snapshot %v, %v", first, err)
			}
			if _, err := c.send(t, c.chunkOf(up, data, 1), c.chunkOf(up, data, 2)); err != nil {
				t.Fatal(err)
			}
			var last *chunkupv1.UploadProgress
			for {
				r, err := stream.Recv()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				last = r.Progress
			}
			if last == nil || last.State != chunkupv1.UploadState_UPLOAD_STATE_COMPLETED || last.Percent != 100 || last.Size != int64(len(data)) {
				t.Fatalf("last report %v", last)
			}
		}},
		{"ListUploads lists only the caller's uploads in progress", func(t *testing.T, c *conformance) {
			mine := c.create(t, &chunkupv1.CreateUploadRequest{})
			theirs, err := c.other.CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{})
			if err != nil {
				t.Fatal(err)
			}
			r, err := c.api.ListUploads(ctx(t), &chunkupv1.ListUploadsRequest{PageSize: 500})
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, u := range r.Uploads {
				found = found || u.UploadId == mine.UploadId
				if u.UploadId == theirs.Upload.UploadId || u.Tenant != "acme" || u.State == chunkupv1.UploadState_UPLOAD_STATE_COMPLETED {
					t.Fatalf("listed %v", u)
				}
			}
			if !found {
				t.Fatalf("the caller's active upload %s is not listed", mine.UploadId)
			}
		}},
		{"another tenant's upload is NOT_FOUND", func(t *testing.T, c *conformance) {
			up := c.create(t, &chunkupv1.CreateUploadRequest{})
			_, err := c.other.GetUpload(ctx(t), &chunkupv1.GetUploadRequest{UploadId: up.UploadId})
			expectStatus(t, "get of another tenant's upload", err, codes.NotFound, "not found")
		}},
		{"x-correlation-id names the upload in its correlation_id", func(t *testing.T, c *conformance) {
			mctx := metadata.AppendToOutgoingContext(ctx(t), server.CorrelationIDHeader, "order-4711")
			r, err := c.api.CreateUpload(mctx, &chunkupv1.CreateUploadRequest{})
			if err != nil || r.Upload.CorrelationId != "order-4711" {
				t.Fatalf("created %v, %v", r, err)
			}
		}},
		{"messages quote at most about 100 bytes of the caller's input", func(t *testing.T, c *conformance) {
			huge := strings.Repeat("x", 1<<20)
			_, err := c.api.GetUpload(ctx(t), &chunkupv1.GetUploadRequest{UploadId: huge})
			expectStatus(t, "a 1 MiB upload id", err, codes.InvalidArgument, "bytes)")
			if n := len(status.Convert(err).Message()); n > 400 {
				t.Fatalf("the message has %d bytes", n)
			}
		}},
	} {
		t.Run(tc.promise, func(t *testing.T) { tc.check(t, c) })
	}
}

// conformance is the raw API of one tenant (and of another, for isolation).
type conformance struct {
	e          *env
	api, other chunkupv1.UploadServiceClient
}

func (c *conformance) create(t *testing.T, req *chunkupv1.CreateUploadRequest) *chunkupv1.Upload {
	t.Helper()
	r, err := c.api.CreateUpload(ctx(t), req)
	if err != nil {
		t.Fatalf("create %v: %v", req, err)
	}
	return r.Upload
}

func (c *conformance) get(t *testing.T, id string) *chunkupv1.Upload {
	t.Helper()
	r, err := c.api.GetUpload(ctx(t), &chunkupv1.GetUploadRequest{UploadId: id})
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return r.Upload
}

// send sends msgs on one stream, each after the previous one's acknowledgement, and
// returns the acknowledgements and the first error (the stream's end otherwise).
func (c *conformance) send(t *testing.T, msgs ...*chunkupv1.UploadChunkRequest) ([]*chunkupv1.UploadChunkResponse, error) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx(t), time.Minute)
	defer cancel()
	stream, err := c.api.UploadChunk(sctx)
	if err != nil {
		return nil, err
	}
	var acks []*chunkupv1.UploadChunkResponse
	for _, m := range msgs {
		if err := stream.Send(m); err != nil {
			break // the server ended the stream: Recv says why
		}
		for want := 1 + boolInt(m.Create != nil && (m.ChunkNumber > 0 || len(m.Data) > 0)); want > 0; want-- {
			ack, err := stream.Recv()
			if err != nil {
				return acks, err
			}
			acks = append(acks, ack)
		}
	}
	_ = stream.CloseSend()
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		return acks, err
	}
	return acks, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// chunkOf is chunk n of data for up.
func (c *conformance) chunkOf(up *chunkupv1.Upload, data []byte, n uint32) *chunkupv1.UploadChunkRequest {
	lo := int64(n-1) * up.ChunkSize
	hi := min(lo+up.ChunkSize, int64(len(data)))
	return &chunkupv1.UploadChunkRequest{UploadId: up.UploadId, ChunkNumber: n, Data: data[lo:hi]}
}

// exact waits for upload id to complete and checks its object is data.
func (c *conformance) exact(t *testing.T, id string, data []byte) *chunkupv1.Upload {
	t.Helper()
	var got *chunkupv1.Upload
	waitFor(t, fmt.Sprintf("upload %s to complete", id), func() bool {
		got = c.get(t, id)
		return got.State != chunkupv1.UploadState_UPLOAD_STATE_ACTIVE && got.State != chunkupv1.UploadState_UPLOAD_STATE_COMPLETING
	})
	c.e.requireExact(t, got, data)
	return got
}
