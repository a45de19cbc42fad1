package e2e

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/crc"
)

const (
	MiB   = 1 << 20
	chunk = 8 * MiB // the server's default chunk size
)

// TestUploadSizes uploads files around every boundary of the chunking, with the size
// declared and from a reader of unknown length, and checks MinIO holds exactly the
// input: one PutObject for a one-chunk file, a multipart object otherwise.
func TestUploadSizes(t *testing.T) {
	e := newEnv(t)
	a := e.start(t, e.config())
	c := e.client(t, a)
	for _, tc := range []struct {
		name  string
		size  int
		parts int // 0: a single PutObject
	}{
		{"empty", 0, 0},
		{"one byte", 1, 0},
		{"5MiB-1", 5*MiB - 1, 0},
		{"exactly one chunk", chunk, 0},
		{"three chunks and a tail", 3*chunk + 12345, 4},
		{"100MiB", 100 * MiB, 13},
	} {
		for _, declared := range []bool{true, false} {
			if tc.size == 100*MiB && !declared {
				continue // the same path as the declared run, at twice the cost
			}
			t.Run(fmt.Sprintf("%s/declared=%v", tc.name, declared), func(t *testing.T) {
				data := randomBytes(tc.size, uint64(tc.size))
				opts := []client.UploadOption{client.WithName("file.bin"), client.WithContentType("application/octet-stream")}
				if declared {
					opts = append(opts, client.WithSize(int64(tc.size)))
				}
				up, err := c.Upload(ctx(t), reader(data), opts...)
				if err != nil {
					t.Fatal(err)
				}
				e.requireExact(t, up, data)
				if up.Crc32C != crc.Checksum(data) {
					t.Errorf("upload crc32c %08x, want %08x", up.Crc32C, crc.Checksum(data))
				}
				wantSuffix := ""
				if tc.parts > 0 {
					wantSuffix = fmt.Sprintf("-%d\"", tc.parts)
				}
				if multipart := strings.Contains(up.Etag, "-"); multipart != (tc.parts > 0) || !strings.HasSuffix(up.Etag, wantSuffix) {
					t.Errorf("etag %s: want a %d-part multipart etag (0: a single PutObject)", up.Etag, tc.parts)
				}
				if !strings.HasSuffix(up.Key, "/file.bin") || !strings.Contains(up.Key, up.UploadId) {
					t.Errorf("key %q, want uploads/%s/file.bin", up.Key, up.UploadId)
				}
			})
		}
	}
	if n := e.openMultipartUploads(t); n != 0 {
		t.Errorf("%d multipart uploads left open in MinIO", n)
	}
}

// TestOutOfOrderOverConcurrentStreams sends one upload's chunks shuffled, over three
// streams at once, with some chunks repeated; the object is still exact.
func TestOutOfOrderOverConcurrentStreams(t *testing.T) {
	e := newEnv(t)
	a := e.start(t, e.config())
	c := e.client(t, a)
	data := randomBytes(6*chunk+777, 7)
	created, err := c.API().CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{ExpectedSize: proto.Int64(int64(len(data)))})
	if err != nil {
		t.Fatal(err)
	}
	up := created.Upload
	total := int(up.TotalChunks)
	// Every chunk but the last, shuffled, over three streams at once; then two of them
	// again, over two streams at once, once their first copies are acknowledged (a
	// repeat that races its first copy is not a duplicate yet); the last chunk goes
	// after them, so that no repeat can arrive after completion.
	order := rand.Perm(total - 1)
	send := func(stream chunkupv1.UploadService_UploadChunkClient, n int) bool {
		part := data[(n-1)*chunk : min(n*chunk, len(data))]
		if err := stream.Send(&chunkupv1.UploadChunkRequest{UploadId: up.UploadId, ChunkNumber: uint32(n), Data: part}); err != nil {
			t.Error(err)
			return false
		}
		ack, err := stream.Recv()
		if err != nil {
			t.Errorf("chunk %d: %v", n, err)
			return false
		}
		if ack.ChunkNumber != uint32(n) || ack.Crc32C != crc.Checksum(part) {
			t.Errorf("ack %+v for chunk %d", ack, n)
		}
		return !ack.Duplicate
	}
	var mu sync.Mutex
	dups := 0
	over := func(streams int, chunks []int) {
		var wg sync.WaitGroup
		for s := range streams {
			wg.Go(func() {
				stream, err := c.API().UploadChunk(ctx(t))
				if err != nil {
					t.Error(err)
					return
				}
				for i := s; i < len(chunks); i += streams {
					if !send(stream, chunks[i]+1) {
						mu.Lock()
						dups++
						mu.Unlock()
					}
				}
				_ = stream.CloseSend()
			})
		}
		wg.Wait()
	}
	over(3, order)
	over(2, []int{order[0], order[3]})
	last, err := c.API().UploadChunk(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	send(last, total)
	_ = last.CloseSend()
	if dups != 2 {
		t.Errorf("%d acks marked duplicate, want 2", dups)
	}
	final, err := c.Wait(ctx(t), up.UploadId)
	if err != nil {
		t.Fatal(err)
	}
	e.requireExact(t, final, data)
}

// TestLostWakeUp stages chunks while no worker runs, so every pub/sub wake-up is lost;
// workers started afterwards still find and upload them.
func TestLostWakeUp(t *testing.T) {
	e := newEnv(t)
	api := e.start(t, e.config("api"))
	c := e.client(t, api)
	data := randomBytes(2*chunk+5, 11)
	created, err := c.API().CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Send(ctx(t), created.Upload, reader(data)); err != nil {
		t.Fatal(err)
	}
	if up := getUpload(t, c, created.Upload.UploadId); up.UploadedChunks != 0 || len(up.ReceivedChunks) != 3 {
		t.Fatalf("before workers: %d received, %d uploaded; want 3, 0", len(up.ReceivedChunks), up.UploadedChunks)
	}
	e.start(t, e.config("worker", "completer"))
	final, err := c.Wait(ctx(t), created.Upload.UploadId)
	if err != nil {
		t.Fatal(err)
	}
	e.requireExact(t, final, data)
}
