package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/bufpool"
	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/internal/ids"
)

// oneMessageMax is the largest input Upload sends in one message with its create
// request: one chunk of S3's minimum part size, a chunk size every server accepts, so
// the client need not learn the server's choice first.
const oneMessageMax = 5 << 20

// smallBuffers pools the buffers small inputs are read into, by size class as the
// server pools chunks: a program that uploads many small files reuses a few buffers
// instead of allocating (and zeroing) one per file, and a buffer is at most a quarter
// larger than its input, so that 128 uploads of 256 KiB at once do not each take and
// zero 5 MiB (a third of the SDK's CPU in that bench row, docs/performance.md run N).
var smallBuffers = bufpool.New(16, 23)

// uploadOneMessage uploads a small input of declared size in one round trip: the
// create request and the whole input as chunk 1 in the first message of a stream. A
// server that can store it at once answers with the upload COMPLETED
// (UploadChunkResponse.completed); otherwise Upload waits for it as for any upload.
// Retries send the same create (the same client_node_id), which finds the upload the
// first attempt made.
func (c *Client) uploadOneMessage(ctx context.Context, r io.Reader, cfg *uploadConfig) (*chunkupv1.Upload, error) {
	size := *cfg.create.ExpectedSize
	data := smallBuffers.Get(int(size))
	defer smallBuffers.Put(data) // gRPC copies what it sends; nothing keeps data after this call
	if _, err := io.ReadFull(r, data); err != nil {
		return nil, fmt.Errorf("chunkup: read the input: input ended before the declared size: %w", err)
	}
	var probe [1]byte
	if n, _ := io.ReadFull(r, probe[:]); n > 0 {
		return nil, ErrLongerThanDeclared
	}
	sum := crc.Checksum(data)
	if cfg.create.ClientNodeId == "" {
		cfg.create.ClientNodeId = "sdk-" + ids.New()
	}
	create := proto.CloneOf(&cfg.create)
	create.ChunkSize = oneMessageMax
	report := func(fn func(*Progress)) {}
	var progress Progress
	if cfg.progress != nil {
		report = func(fn func(*Progress)) { fn(&progress); cfg.progress(progress) }
	}

	var up, done *chunkupv1.Upload
	started := false
	err := c.retrying(ctx, func() error {
		var err error
		up, done, err = c.oneMessage(ctx, create, data, sum, func(u *chunkupv1.Upload) {
			if !started {
				started = true
				progress = Progress{UploadID: u.UploadId, Size: size, TotalChunks: 1}
				if cfg.onStart != nil {
					cfg.onStart(proto.CloneOf(u))
				}
			}
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	report(func(p *Progress) { p.BytesSent, p.BytesAcked = size, size })
	if up.State == chunkupv1.UploadState_UPLOAD_STATE_COMPLETED {
		return up, verifyCompleted(up, bytes.NewReader(data))
	}
	if isEnded, err := ended(up); isEnded {
		return up, err
	}
	if done == nil {
		// Stored or staged but not finalized here: wait for it as for any upload.
		u := newUploader(c, up, cfg.progress)
		if done, err = u.wait(ctx); err != nil {
			return done, err
		}
	}
	report(func(p *Progress) { p.ChunksUploaded = 1 })
	if done.Size != size || done.Crc32C != sum {
		return done, &MismatchError{UploadID: done.UploadId, Reason: fmt.Sprintf(
			"the object has %d bytes with CRC32C %08x, the input %d bytes with CRC32C %08x", done.Size, done.Crc32C, size, sum)}
	}
	return done, nil
}

// streamEndWait bounds how long oneMessage waits for the end of a stream whose chunk
// is acknowledged.
const streamEndWait = 250 * time.Millisecond

// oneMessage sends create with data as its chunk 1 on a new stream and returns the
// upload the create made (or found: a retry's), and the COMPLETED upload when the
// chunk's acknowledgement carried it. An upload that had ended already (a retry after
// the first attempt completed it) is returned without error.
func (c *Client) oneMessage(ctx context.Context, create *chunkupv1.CreateUploadRequest, data []byte, sum uint32, onStart func(*chunkupv1.Upload)) (up, done *chunkupv1.Upload, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.api.UploadChunk(ctx)
	if err != nil {
		return nil, nil, err
	}
	err = stream.Send(&chunkupv1.UploadChunkRequest{Create: create, ChunkNumber: 1, Data: data, Crc32C: &sum, IsLast: true})
	if err == nil {
		err = stream.CloseSend()
	}
	if err != nil {
		// The stream is broken; Recv says why.
		if _, rerr := stream.Recv(); rerr != nil && !errors.Is(rerr, io.EOF) {
			err = rerr
		}
		return nil, nil, err
	}
	first, err := stream.Recv()
	if err != nil {
		return nil, nil, noEOF(err)
	}
	if up = first.Upload; up == nil {
		return nil, nil, status.Error(codes.Internal, "chunkup: the server did not answer the create request")
	}
	onStart(up)
	if over, _ := ended(up); over {
		return up, nil, nil
	}
	ack, err := stream.Recv()
	if err != nil {
		return up, nil, noEOF(err)
	}
	// Read the stream to its end before going on, for at most streamEndWait. A
	// server that counts the stream against the tenant's open streams until its
	// handler returns (one that staged the chunk, or an older release) would
	// otherwise race a caller that starts its next upload at once at the tenant's
	// cap, and refuse it (RESOURCE_EXHAUSTED) now and then. The chunk is
	// acknowledged already, so the status changes nothing for this upload; the wait
	// is bounded because a server short of receive memory reserves it before it
	// reads the end.
	stop := time.AfterFunc(streamEndWait, cancel)
	defer stop.Stop()
	for {
		if _, err := stream.Recv(); err != nil {
			break
		}
	}
	return up, ack.Completed, nil
}

// noEOF turns a stream that ended early into a transient error.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return status.Error(codes.Unavailable, "chunkup: the stream ended before the acknowledgement")
	}
	return err
}
