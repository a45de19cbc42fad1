package testenv

import (
	"context"
	"maps"
	"sync"

	"google.golang.org/grpc"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
)

// ChunkCounter counts, per chunk number, the chunks a client sent and those the server
// acknowledged, by intercepting the client's streams; resume tests use it to prove that
// no acknowledged chunk is sent again.
type ChunkCounter struct {
	mu    sync.Mutex
	sent  map[uint32]int
	acked map[uint32]bool
}

// NewChunkCounter returns an empty counter.
func NewChunkCounter() *ChunkCounter {
	return &ChunkCounter{sent: map[uint32]int{}, acked: map[uint32]bool{}}
}

// DialOption installs the counter on a client connection.
func (cc *ChunkCounter) DialOption() grpc.DialOption {
	return grpc.WithStreamInterceptor(cc.intercept)
}

func (cc *ChunkCounter) intercept(ctx context.Context, desc *grpc.StreamDesc, conn *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, conn, method, opts...)
	if err != nil {
		return nil, err
	}
	return &countingStream{ClientStream: s, cc: cc}, nil
}

type countingStream struct {
	grpc.ClientStream
	cc *ChunkCounter
}

func (s *countingStream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	if r, ok := m.(*chunkupv1.UploadChunkRequest); ok && err == nil {
		s.cc.mu.Lock()
		s.cc.sent[r.ChunkNumber]++
		s.cc.mu.Unlock()
	}
	return err
}

func (s *countingStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if r, ok := m.(*chunkupv1.UploadChunkResponse); ok && err == nil {
		s.cc.mu.Lock()
		s.cc.acked[r.ChunkNumber] = true
		s.cc.mu.Unlock()
	}
	return err
}

// Snapshot returns copies of the counts so far.
func (cc *ChunkCounter) Snapshot() (sent map[uint32]int, acked map[uint32]bool) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return maps.Clone(cc.sent), maps.Clone(cc.acked)
}
