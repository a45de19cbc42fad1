package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/crc"
)

// endLateServer acknowledges a one-message upload as completed at once, then keeps its
// stream open for linger before the handler returns (a server under load releasing the
// stream's slot late).
type endLateServer struct {
	chunkupv1.UnimplementedUploadServiceServer
	linger   time.Duration
	returned atomic.Bool
}

func (s *endLateServer) UploadChunk(stream chunkupv1.UploadService_UploadChunkServer) error {
	defer s.returned.Store(true)
	req, err := stream.Recv()
	if err != nil {
		return err
	}
	up := &chunkupv1.Upload{UploadId: "u1", State: chunkupv1.UploadState_UPLOAD_STATE_ACTIVE, ChunkSize: req.Create.ChunkSize, ExpectedSize: req.Create.GetExpectedSize()}
	if err := stream.Send(&chunkupv1.UploadChunkResponse{Upload: up}); err != nil {
		return err
	}
	if err := completeOneChunk(stream, req); err != nil {
		return err
	}
	time.Sleep(s.linger)
	return nil
}

// completeOneChunk acknowledges req's chunk as upload u1's only one, completed, and
// reads the stream until the client closes its side.
func completeOneChunk(stream chunkupv1.UploadService_UploadChunkServer, req *chunkupv1.UploadChunkRequest) error {
	done := &chunkupv1.Upload{UploadId: "u1", State: chunkupv1.UploadState_UPLOAD_STATE_COMPLETED, Size: int64(len(req.Data)), Crc32C: crc.Checksum(req.Data)}
	if err := stream.Send(&chunkupv1.UploadChunkResponse{UploadId: "u1", ChunkNumber: 1, Completed: done}); err != nil {
		return err
	}
	for {
		if _, err := stream.Recv(); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// TestSmallUploadWaitsForItsStreamToEnd: Upload of a small input returns only once its
// stream has ended on the server, so that a program keeping as many uploads in flight
// as its tenant may open streams never has the next one refused for a stream the server
// still counts.
func TestSmallUploadWaitsForItsStreamToEnd(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	stub := &endLateServer{linger: 50 * time.Millisecond} // within the client's wait (250 ms)
	chunkupv1.RegisterUploadServiceServer(srv, stub)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	c := dial(t, lis.Addr().String())

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	data := []byte("a small file")
	up, err := c.Upload(ctx, bytes.NewReader(data), client.WithSize(int64(len(data))))
	if err != nil {
		t.Fatal(err)
	}
	if up.State != chunkupv1.UploadState_UPLOAD_STATE_COMPLETED {
		t.Fatalf("upload is %v", up.State)
	}
	if !stub.returned.Load() {
		t.Fatal("Upload returned while its stream was still open on the server")
	}
}
