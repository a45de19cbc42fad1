package client_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
)

// olderServer answers as a server from before direct_if_offered: it does not know the
// field (so it makes no direct upload) and refuses direct_checksums without direct, as
// such a server did; it takes the upload's one chunk and completes it.
type olderServer struct {
	chunkupv1.UnimplementedUploadServiceServer
	mu      sync.Mutex
	creates []*chunkupv1.CreateUploadRequest
}

func (s *olderServer) CreateUpload(_ context.Context, req *chunkupv1.CreateUploadRequest) (*chunkupv1.CreateUploadResponse, error) {
	s.mu.Lock()
	s.creates = append(s.creates, req)
	s.mu.Unlock()
	if req.DirectChecksums && !req.Direct {
		return nil, status.Error(codes.InvalidArgument, "direct_checksums is for direct uploads: set direct too, or leave it unset")
	}
	return &chunkupv1.CreateUploadResponse{Upload: &chunkupv1.Upload{UploadId: "u1", State: chunkupv1.UploadState_UPLOAD_STATE_ACTIVE,
		ChunkSize: 8 << 20, ExpectedSize: req.GetExpectedSize()}}, nil
}

func (s *olderServer) UploadChunk(stream chunkupv1.UploadService_UploadChunkServer) error {
	req, err := stream.Recv()
	if err != nil {
		return err
	}
	return completeOneChunk(stream, req)
}

// TestDirectIfOfferedWithAnOlderServer: UploadFile taking a direct upload when offered
// still uploads through a server from before offers, which refuses the create that asks
// for one: the SDK creates again without asking.
func TestDirectIfOfferedWithAnOlderServer(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(16 << 20))
	old := &olderServer{}
	chunkupv1.RegisterUploadServiceServer(srv, old)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	c := dial(t, lis.Addr().String())

	path := filepath.Join(t.TempDir(), "six.bin")
	if err := os.WriteFile(path, make([]byte, 6<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	up, err := c.UploadFile(ctx, path, client.WithDirectIfOffered())
	if err != nil {
		t.Fatal(err)
	}
	if up.State != chunkupv1.UploadState_UPLOAD_STATE_COMPLETED || up.Size != 6<<20 {
		t.Fatalf("upload %v", up)
	}
	if len(old.creates) != 2 || !old.creates[0].DirectIfOffered || old.creates[1].DirectIfOffered || old.creates[1].DirectChecksums {
		t.Fatalf("creates %v: want one asking for a direct upload if offered, then one without", old.creates)
	}
}
