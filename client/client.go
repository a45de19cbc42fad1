// Package client is the Go SDK for chunkup: it creates uploads, streams a reader in the
// server's chunk size with a bounded window of unacknowledged chunks and a CRC32C per
// chunk, and waits for the object to be completed.
package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/crc"
)

// Client talks to a chunkup server.
type Client struct {
	api  chunkupv1.UploadServiceClient
	conn *grpc.ClientConn // owned, when made by Dial
	opts options
}

type options struct {
	window   int
	dialOpts []grpc.DialOption
	poll     time.Duration
}

// Option configures a Client.
type Option func(*options)

// WithWindow sets how many chunks may be sent before their acknowledgements arrive
// (default 4). Memory use is about window × chunk size.
func WithWindow(n int) Option { return func(o *options) { o.window = max(1, n) } }

// WithDialOptions adds gRPC dial options (e.g. TLS credentials) for Dial.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOpts = append(o.dialOpts, opts...) }
}

// WithPollInterval sets how often Wait polls the upload's state (default 100 ms).
func WithPollInterval(d time.Duration) Option { return func(o *options) { o.poll = d } }

func newOptions(opts []Option) options {
	o := options{window: 4, poll: 100 * time.Millisecond}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Dial connects to the server at target (host:port). Without WithDialOptions carrying
// credentials it uses plaintext.
func Dial(target string, opts ...Option) (*Client, error) {
	o := newOptions(opts)
	dial := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16 << 20)),
	}, o.dialOpts...)
	conn, err := grpc.NewClient(target, dial...)
	if err != nil {
		return nil, fmt.Errorf("chunkup: dial %s: %w", target, err)
	}
	c := New(conn, opts...)
	c.conn = conn
	return c, nil
}

// New returns a Client on an existing connection.
func New(conn grpc.ClientConnInterface, opts ...Option) *Client {
	return &Client{api: chunkupv1.NewUploadServiceClient(conn), opts: newOptions(opts)}
}

// Close closes the connection made by Dial.
func (c *Client) Close() error {
	if c.conn == nil {
		return nil
	}
	return c.conn.Close()
}

// API is the generated client, for calls the SDK does not wrap.
func (c *Client) API() chunkupv1.UploadServiceClient { return c.api }

// UploadOption describes the upload being created.
type UploadOption func(*chunkupv1.CreateUploadRequest)

// WithName sets the file name (used in the default object key).
func WithName(name string) UploadOption {
	return func(r *chunkupv1.CreateUploadRequest) { r.Name = name }
}

// WithKey sets the object key.
func WithKey(key string) UploadOption { return func(r *chunkupv1.CreateUploadRequest) { r.Key = key } }

// WithContentType sets the object's content type.
func WithContentType(ct string) UploadOption {
	return func(r *chunkupv1.CreateUploadRequest) { r.ContentType = ct }
}

// WithSize declares the total size, which lets the server choose a chunk size for very
// large files. Without it the size is unknown until the reader ends.
func WithSize(n int64) UploadOption {
	return func(r *chunkupv1.CreateUploadRequest) { r.ExpectedSize = proto.Int64(n) }
}

// WithMetadata adds custom metadata.
func WithMetadata(md map[string]string) UploadOption {
	return func(r *chunkupv1.CreateUploadRequest) { r.Metadata = md }
}

// WithClientNodeID makes the create idempotent under id.
func WithClientNodeID(id string) UploadOption {
	return func(r *chunkupv1.CreateUploadRequest) { r.ClientNodeId = id }
}

// UploadFile uploads the file at path (its name and size declared) and waits for it to
// complete.
func (c *Client) UploadFile(ctx context.Context, path string, opts ...UploadOption) (*chunkupv1.Upload, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	opts = append([]UploadOption{WithName(fi.Name()), WithSize(fi.Size())}, opts...)
	return c.Upload(ctx, f, opts...)
}

// Upload creates an upload, streams r to it, and waits until it is completed (or
// fails). It returns the final upload.
func (c *Client) Upload(ctx context.Context, r io.Reader, opts ...UploadOption) (*chunkupv1.Upload, error) {
	req := &chunkupv1.CreateUploadRequest{}
	for _, o := range opts {
		o(req)
	}
	created, err := c.api.CreateUpload(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("chunkup: create upload: %w", err)
	}
	up := created.Upload
	if err := c.Send(ctx, up, r); err != nil {
		return nil, err
	}
	return c.Wait(ctx, up.UploadId)
}

// Send streams r as the chunks of up, in order, keeping at most the window's worth of
// chunks unacknowledged, and returns once every chunk is acknowledged.
func (c *Client) Send(ctx context.Context, up *chunkupv1.Upload, r io.Reader) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.api.UploadChunk(ctx)
	if err != nil {
		return fmt.Errorf("chunkup: open stream: %w", err)
	}
	slots := make(chan struct{}, c.opts.window)
	acks := make(chan error, 1)
	go func() {
		for {
			_, err := stream.Recv()
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				acks <- err
				return
			}
			<-slots
		}
	}()
	chunks := newChunker(r, up.ChunkSize, up.ExpectedSize)
	for n := uint32(1); ; n++ {
		data, last, err := chunks.next()
		if err != nil {
			return fmt.Errorf("chunkup: read chunk %d: %w", n, err)
		}
		select {
		case slots <- struct{}{}:
		case err := <-acks:
			return streamErr(err)
		}
		sum := crc.Checksum(data)
		if err := stream.Send(&chunkupv1.UploadChunkRequest{
			UploadId: up.UploadId, ChunkNumber: n, Data: data, Crc32C: &sum, IsLast: last,
		}); err != nil {
			if errors.Is(err, io.EOF) { // the server ended the stream; Recv has why
				return streamErr(<-acks)
			}
			return fmt.Errorf("chunkup: send chunk %d: %w", n, err)
		}
		if last {
			break
		}
	}
	if err := stream.CloseSend(); err != nil {
		return fmt.Errorf("chunkup: close stream: %w", err)
	}
	return streamErr(<-acks)
}

func streamErr(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("chunkup: upload stream: %w", err)
}

// Wait polls the upload until it is COMPLETED, or returns an error when it ends
// otherwise.
func (c *Client) Wait(ctx context.Context, id string) (*chunkupv1.Upload, error) {
	t := time.NewTicker(c.opts.poll)
	defer t.Stop()
	for {
		got, err := c.api.GetUpload(ctx, &chunkupv1.GetUploadRequest{UploadId: id})
		if err != nil {
			return nil, fmt.Errorf("chunkup: get upload: %w", err)
		}
		switch up := got.Upload; up.State {
		case chunkupv1.UploadState_UPLOAD_STATE_COMPLETED:
			return up, nil
		case chunkupv1.UploadState_UPLOAD_STATE_FAILED, chunkupv1.UploadState_UPLOAD_STATE_ABORTED,
			chunkupv1.UploadState_UPLOAD_STATE_EXPIRED:
			return up, fmt.Errorf("chunkup: upload %s is %s: %s", id, up.State, up.Error)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// chunker cuts a reader into chunks of size bytes and knows which is the last: from the
// declared size, or by reading one chunk ahead when the size is unknown.
type chunker struct {
	r        io.Reader
	size     int64
	left     int64 // bytes still expected, or -1 when unknown
	ahead    []byte
	aheadErr error
	started  bool
}

func newChunker(r io.Reader, size, expected int64) *chunker {
	return &chunker{r: r, size: size, left: expected}
}

func (c *chunker) read() ([]byte, error) {
	buf := make([]byte, c.size)
	n, err := io.ReadFull(c.r, buf)
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		err = io.EOF
	}
	return buf[:n], err
}

func (c *chunker) next() (data []byte, last bool, err error) {
	if c.left >= 0 {
		n := min(c.left, c.size)
		buf := make([]byte, n)
		if _, err := io.ReadFull(c.r, buf); err != nil {
			return nil, false, fmt.Errorf("input ended before the declared size: %w", err)
		}
		c.left -= n
		return buf, c.left == 0, nil
	}
	if !c.started {
		c.started = true
		c.ahead, c.aheadErr = c.read()
	}
	data, err = c.ahead, c.aheadErr
	if err == io.EOF {
		return data, true, nil // short (or empty, for an empty input) final chunk
	}
	if err != nil {
		return nil, false, err
	}
	c.ahead, c.aheadErr = c.read()
	if c.aheadErr == io.EOF && len(c.ahead) == 0 {
		return data, true, nil // the input ended exactly at a chunk boundary
	}
	return data, false, nil
}

// Get returns an upload's current state.
func (c *Client) Get(ctx context.Context, id string) (*chunkupv1.Upload, error) {
	r, err := c.api.GetUpload(ctx, &chunkupv1.GetUploadRequest{UploadId: id})
	if err != nil {
		return nil, fmt.Errorf("chunkup: get upload: %w", err)
	}
	return r.Upload, nil
}

// Abort aborts an upload.
func (c *Client) Abort(ctx context.Context, id, reason string) (*chunkupv1.Upload, error) {
	r, err := c.api.AbortUpload(ctx, &chunkupv1.AbortUploadRequest{UploadId: id, Reason: reason})
	if err != nil {
		return nil, fmt.Errorf("chunkup: abort upload: %w", err)
	}
	return r.Upload, nil
}

// Watch calls fn with each progress report of upload id, from a snapshot until the
// upload ends, and returns the last report.
func (c *Client) Watch(ctx context.Context, id string, fn func(*chunkupv1.UploadProgress)) (*chunkupv1.UploadProgress, error) {
	stream, err := c.api.WatchUpload(ctx, &chunkupv1.WatchUploadRequest{UploadId: id})
	if err != nil {
		return nil, fmt.Errorf("chunkup: watch upload: %w", err)
	}
	var last *chunkupv1.UploadProgress
	for {
		r, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			if last == nil {
				return nil, errors.New("chunkup: watch ended without a report")
			}
			return last, nil
		}
		if err != nil {
			return last, fmt.Errorf("chunkup: watch upload: %w", err)
		}
		last = r.Progress
		if fn != nil {
			fn(last)
		}
	}
}
