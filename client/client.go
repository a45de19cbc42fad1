// Package client is the Go SDK for chunkup. It creates uploads, cuts a reader into the
// server's chunk size, streams the chunks with a bounded window of unacknowledged ones
// (over one stream or several in parallel) with a CRC32C each, retries transient
// failures with exponential backoff and jitter, resumes from the server's record after a
// broken stream or a restarted server without re-sending acknowledged chunks, and
// returns the completed upload. Memory stays near parallel × window × chunk size,
// whatever the size of the input.
package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
)

// Client talks to a chunkup server.
type Client struct {
	api  chunkupv1.UploadServiceClient
	conn *grpc.ClientConn // owned, when made by Dial
	opts options
}

type options struct {
	window    int
	parallel  int
	dialOpts  []grpc.DialOption
	poll      time.Duration
	attempts  int
	retryBase time.Duration
	retryMax  time.Duration
}

// Option configures a Client.
type Option func(*options)

// WithWindow sets how many chunks a stream may send before their acknowledgements
// arrive (default 4). Memory use is about parallel × window × chunk size.
func WithWindow(n int) Option { return func(o *options) { o.window = max(1, n) } }

// WithParallel sets how many streams one upload uses (default 1). Several streams help
// on links with a high bandwidth-delay product.
func WithParallel(n int) Option { return func(o *options) { o.parallel = max(1, n) } }

// WithRetry sets how failures that may pass (server unavailable, stream broken,
// checksum mismatch on the way) are retried: up to attempts tries in a row without
// progress, waiting a random time up to base·2ⁿ (at most max) in between. Defaults: 10,
// 100 ms, 5 s.
func WithRetry(attempts int, base, max time.Duration) Option {
	return func(o *options) { o.attempts, o.retryBase, o.retryMax = attempts, base, max }
}

// WithDialOptions adds gRPC dial options (e.g. TLS credentials) for Dial.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOpts = append(o.dialOpts, opts...) }
}

// WithPollInterval sets how often Wait polls the upload's state (default 100 ms).
func WithPollInterval(d time.Duration) Option { return func(o *options) { o.poll = d } }

func newOptions(opts []Option) options {
	o := options{window: 4, parallel: 1, poll: 100 * time.Millisecond, attempts: 10,
		retryBase: 100 * time.Millisecond, retryMax: 5 * time.Second}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Dial connects to the server at target (host:port). Without WithDialOptions carrying
// credentials it uses plaintext. It does not wait for the server: the first call does.
func Dial(target string, opts ...Option) (*Client, error) {
	o := newOptions(opts)
	dial := append(append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())},
		DialDefaults()...), o.dialOpts...)
	conn, err := grpc.NewClient(target, dial...)
	if err != nil {
		return nil, fmt.Errorf("chunkup: dial %s: %w", target, err)
	}
	c := New(conn, opts...)
	c.conn = conn
	return c, nil
}

// New returns a Client on an existing connection. A connection dialled for it should
// carry DialDefaults, as Dial's does.
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

// Get returns an upload's current state.
func (c *Client) Get(ctx context.Context, id string) (*chunkupv1.Upload, error) {
	r, err := c.api.GetUpload(ctx, &chunkupv1.GetUploadRequest{UploadId: id})
	if err != nil {
		return nil, fmt.Errorf("chunkup: get upload: %w", err)
	}
	return r.Upload, nil
}

// List returns the caller's uploads in progress (ACTIVE or COMPLETING), oldest first,
// reading every page of ListUploads.
func (c *Client) List(ctx context.Context) ([]*chunkupv1.Upload, error) {
	var out []*chunkupv1.Upload
	token := ""
	for {
		r, err := c.api.ListUploads(ctx, &chunkupv1.ListUploadsRequest{PageSize: 500, PageToken: token})
		if err != nil {
			return nil, fmt.Errorf("chunkup: list uploads: %w", err)
		}
		out = append(out, r.Uploads...)
		if token = r.NextPageToken; token == "" {
			return out, nil
		}
	}
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

// Wait polls the upload until it is COMPLETED, or returns an *EndedError when it ends
// otherwise.
func (c *Client) Wait(ctx context.Context, id string) (*chunkupv1.Upload, error) {
	t := time.NewTicker(c.opts.poll)
	defer t.Stop()
	for {
		up, err := c.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		if done, err := ended(up); done {
			return up, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// EndedError means an upload ended without completing.
type EndedError struct{ Upload *chunkupv1.Upload }

func (e *EndedError) Error() string {
	return fmt.Sprintf("chunkup: upload %s is %s: %s", e.Upload.UploadId, e.Upload.State, e.Upload.Error)
}

func ended(up *chunkupv1.Upload) (bool, error) {
	switch up.State {
	case chunkupv1.UploadState_UPLOAD_STATE_COMPLETED:
		return true, nil
	case chunkupv1.UploadState_UPLOAD_STATE_FAILED, chunkupv1.UploadState_UPLOAD_STATE_ABORTED,
		chunkupv1.UploadState_UPLOAD_STATE_EXPIRED:
		return true, &EndedError{Upload: up}
	}
	return false, nil
}
