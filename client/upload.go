package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/internal/retry"
)

// Progress is how far an upload has come.
type Progress struct {
	UploadID string
	// BytesSent counts bytes written to streams (resent chunks count again).
	BytesSent int64
	// BytesAcked counts bytes the server acknowledged as durably staged, including
	// chunks it had before a resume.
	BytesAcked int64
	// ChunksUploaded counts chunks already stored in S3, and TotalChunks all of them
	// (0 while unknown).
	ChunksUploaded, TotalChunks uint32
	// Size is the input's size, or -1 while unknown.
	Size int64
}

// UploadOption describes one upload.
type UploadOption func(*uploadConfig)

type uploadConfig struct {
	create        chunkupv1.CreateUploadRequest
	resume        string
	progress      func(Progress)
	onStart       func(*chunkupv1.Upload)
	correlationID string
	// directIfOffered: WithDirectIfOffered.
	directIfOffered bool
}

// CorrelationIDHeader is the request metadata key carrying a correlation id.
const CorrelationIDHeader = "x-correlation-id"

// WithCorrelationID sends id as the x-correlation-id of every call the upload makes.
// The server stores it on the upload (Upload.correlation_id) and puts it in its logs,
// its trace spans and the upload's Kafka events' headers; without it the server makes
// one up. An id must be at most 128 printable characters, or the server replaces it.
func WithCorrelationID(id string) UploadOption {
	return func(u *uploadConfig) { u.correlationID = id }
}

// WithName sets the file name (used in the default object key).
func WithName(name string) UploadOption { return func(u *uploadConfig) { u.create.Name = name } }

// WithKey sets the object key.
func WithKey(key string) UploadOption { return func(u *uploadConfig) { u.create.Key = key } }

// WithContentType sets the object's content type.
func WithContentType(ct string) UploadOption {
	return func(u *uploadConfig) { u.create.ContentType = ct }
}

// WithSize declares the total size, which lets the server choose a chunk size for very
// large inputs. Without it the size is unknown until the reader ends.
func WithSize(n int64) UploadOption {
	return func(u *uploadConfig) { u.create.ExpectedSize = proto.Int64(n) }
}

// WithMetadata adds custom metadata.
func WithMetadata(md map[string]string) UploadOption {
	return func(u *uploadConfig) { u.create.Metadata = md }
}

// WithIfAbsent refuses to replace an object at the key: the upload fails with
// codes.AlreadyExists when one is there at the start, and ends FAILED (naming the key)
// if one appears there before it completes; the other object is left as it was.
func WithIfAbsent() UploadOption { return func(u *uploadConfig) { u.create.IfAbsent = true } }

// WithClientNodeID makes the create idempotent under id. Without it Upload picks a
// random one, so that its own retries of the create never make two uploads.
func WithClientNodeID(id string) UploadOption {
	return func(u *uploadConfig) { u.create.ClientNodeId = id }
}

// WithResume continues upload id instead of creating one: the reader must yield the same
// bytes from the start; chunks the server already has are read past, not sent.
func WithResume(id string) UploadOption { return func(u *uploadConfig) { u.resume = id } }

// WithProgress calls fn whenever the upload makes progress. fn must be quick; it is
// called from the upload's goroutines, one call at a time.
func WithProgress(fn func(Progress)) UploadOption {
	return func(u *uploadConfig) { u.progress = fn }
}

// WithOnStart calls fn with the upload once it exists (created, or found for
// WithResume) and before any chunk is sent: a caller can keep its id to resume it should
// the process die. fn gets a copy; it is called once, from the goroutine that called
// Upload.
func WithOnStart(fn func(*chunkupv1.Upload)) UploadOption {
	return func(u *uploadConfig) { u.onStart = fn }
}

// start creates the upload cfg describes (idempotent under its client_node_id, one made
// up when it has none), or reads the one it resumes, retrying what may pass.
func (c *Client) start(ctx context.Context, cfg *uploadConfig) (*chunkupv1.Upload, error) {
	var up *chunkupv1.Upload
	err := c.retrying(ctx, func() (err error) {
		if cfg.resume != "" {
			up, err = c.Get(ctx, cfg.resume)
			return err
		}
		if cfg.create.ClientNodeId == "" {
			cfg.create.ClientNodeId = "sdk-" + ids.New()
		}
		r, err := c.api.CreateUpload(ctx, &cfg.create)
		if err != nil {
			return fmt.Errorf("chunkup: create upload: %w", err)
		}
		up = r.Upload
		return nil
	})
	return up, err
}

// UploadFile uploads the file at path (its name and size declared) and waits for it to
// complete.
func (c *Client) UploadFile(ctx context.Context, path string, opts ...UploadOption) (*chunkupv1.Upload, error) {
	f, fi, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	opts = append([]UploadOption{WithName(fi.Name()), WithSize(fi.Size())}, opts...)
	return c.upload(ctx, f, f, opts...)
}

// WithDirectIfOffered makes UploadFile take a direct upload (see UploadDirect) when the
// server offers one for the file's size (its operator's --direct-above): the bytes then
// go straight to S3 and not through the server. A file the server makes no offer for,
// or one that fits in one message, is uploaded through the server as without it. An
// upload it resumes goes on the way it began. Upload, whose input is no file, ignores it.
func WithDirectIfOffered() UploadOption {
	return func(u *uploadConfig) { u.directIfOffered = true }
}

// UploadFileDirect uploads the file at path (its name declared) as a direct upload (see
// UploadDirect) and waits for it to complete.
func (c *Client) UploadFileDirect(ctx context.Context, path string, opts ...UploadOption) (*chunkupv1.Upload, error) {
	f, fi, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return c.UploadDirect(ctx, f, fi.Size(), append([]UploadOption{WithName(fi.Name())}, opts...)...)
}

// openRegular opens the regular file at path.
func openRegular(path string) (*os.File, os.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("chunkup: %s is not a regular file", path)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// Upload creates an upload (or resumes one, WithResume), streams r to it, and waits
// until it is completed. It returns the final upload; an upload that ends otherwise is
// an *EndedError.
func (c *Client) Upload(ctx context.Context, r io.Reader, opts ...UploadOption) (*chunkupv1.Upload, error) {
	return c.upload(ctx, r, nil, opts...)
}

// upload is Upload; with file (r, with a declared size) it takes a direct upload when
// WithDirectIfOffered asks and the server offers one.
func (c *Client) upload(ctx context.Context, r io.Reader, file io.ReaderAt, opts ...UploadOption) (*chunkupv1.Upload, error) {
	var cfg uploadConfig
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.correlationID != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, CorrelationIDHeader, cfg.correlationID)
	}
	if cfg.resume == "" && cfg.create.ExpectedSize != nil && *cfg.create.ExpectedSize <= oneMessageMax {
		return c.uploadOneMessage(ctx, r, &cfg)
	}
	offered := file != nil && cfg.directIfOffered && cfg.create.ExpectedSize != nil
	if offered {
		cfg.create.DirectIfOffered, cfg.create.DirectChecksums = true, true
	}
	fresh := cfg.resume == "" && cfg.create.ClientNodeId == ""
	up, err := c.start(ctx, &cfg)
	if offered && status.Code(err) == codes.InvalidArgument && strings.Contains(err.Error(), "direct_checksums") {
		// A server from before direct_if_offered does not read it, and refuses
		// direct_checksums without direct: it offers nothing, so the upload goes
		// through it.
		cfg.create.DirectIfOffered, cfg.create.DirectChecksums = false, false
		up, err = c.start(ctx, &cfg)
	}
	if err != nil {
		return nil, err
	}
	if offered && up.Direct {
		return c.goOnDirect(ctx, &cfg, up, file, *cfg.create.ExpectedSize, fresh)
	}
	if cfg.create.ExpectedSize != nil && up.ExpectedSize >= 0 && *cfg.create.ExpectedSize != up.ExpectedSize {
		return nil, &MismatchError{UploadID: up.UploadId, Reason: fmt.Sprintf("the input has %d bytes, the upload %d", *cfg.create.ExpectedSize, up.ExpectedSize)}
	}
	if cfg.onStart != nil {
		cfg.onStart(proto.CloneOf(up))
	}
	if up.State == chunkupv1.UploadState_UPLOAD_STATE_COMPLETED {
		// Resumed (or created again under the same client_node_id) after it completed:
		// it is the input's upload only if the object holds the input's bytes.
		return up, verifyCompleted(up, r)
	}
	if done, err := ended(up); done {
		return up, err
	}
	u := newUploader(c, up, cfg.progress)
	if cfg.progress != nil {
		// Follow the parts going to S3 while sending, for the progress report.
		fctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); u.follow(fctx) }()
		defer func() { stop(); <-done }()
	}
	if err := u.send(ctx, r); err != nil {
		return nil, err
	}
	if done := u.completedUpload(); done != nil {
		// The server stored the last chunk and finalized the object before it
		// acknowledged it: nothing to wait for.
		up = done
	} else if up, err = u.wait(ctx); err != nil {
		return up, err
	}
	if up.Size != u.inputSize || up.Crc32C != u.inputCRC {
		return up, &MismatchError{UploadID: up.UploadId, Reason: fmt.Sprintf(
			"the object has %d bytes with CRC32C %08x, the input %d bytes with CRC32C %08x", up.Size, up.Crc32C, u.inputSize, u.inputCRC)}
	}
	return up, nil
}

// MismatchError means the input is not the one the upload holds: a resume with another
// file, or an object whose checksum differs from the input's. Nothing of the input was
// mixed into the upload; start a new upload for a different input.
type MismatchError struct {
	UploadID string
	Reason   string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("chunkup: the input is not the one in upload %s: %s", e.UploadID, e.Reason)
}

// verifyCompleted checks that a completed upload's object is r: same size, same CRC32C.
func verifyCompleted(up *chunkupv1.Upload, r io.Reader) error {
	h := crc.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return fmt.Errorf("chunkup: read the input: %w", err)
	}
	if n != up.Size || h.Sum32() != up.Crc32C {
		return &MismatchError{UploadID: up.UploadId, Reason: fmt.Sprintf(
			"it is COMPLETED with %d bytes and CRC32C %08x; the input has %d bytes with CRC32C %08x", up.Size, up.Crc32C, n, h.Sum32())}
	}
	return nil
}

// Send streams r as the chunks of up (from chunk 1, skipping chunks up lists as
// received) and returns once every chunk is acknowledged. Upload calls it; it is exported
// for callers that manage creation and completion themselves.
func (c *Client) Send(ctx context.Context, up *chunkupv1.Upload, r io.Reader) error {
	return newUploader(c, up, nil).send(ctx, r)
}

// Transient reports whether err, an error the SDK returned after its retries, may pass
// by itself: trying again later (resuming the upload) may get past it.
func Transient(err error) bool { return transient(err) }

// transient reports whether an RPC error may pass by itself.
func transient(err error) bool {
	if err == nil {
		return false
	}
	if te := (*retry.TransientError)(nil); errors.As(err, &te) {
		return true // an HTTP request of a direct upload that may pass next time
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.ResourceExhausted, codes.Aborted, codes.DataLoss, codes.DeadlineExceeded:
		return true
	}
	return false
}

// retrying runs fn until it succeeds, fails permanently, or fails transiently
// attempts times in a row.
func (c *Client) retrying(ctx context.Context, fn func() error) error {
	for n := 1; ; n++ {
		err := fn()
		if err == nil || !transient(err) || n >= c.opts.attempts || ctx.Err() != nil {
			return err
		}
		if err := sleep(ctx, pause(err, retry.Backoff(c.opts.retryBase, c.opts.retryMax, n))); err != nil {
			return err
		}
	}
}

// pause is how long to wait before retrying after err: backoff, or longer when the
// server advised a delay (google.rpc.RetryInfo, sent with RESOURCE_EXHAUSTED).
func pause(err error, backoff time.Duration) time.Duration {
	st, ok := status.FromError(err)
	if !ok {
		return backoff
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.RetryDelay != nil {
			return max(backoff, ri.RetryDelay.AsDuration())
		}
	}
	return backoff
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

type chunk struct {
	n    uint32
	data []byte
	crc  uint32
	last bool
}

// uploader sends one upload's chunks.
type uploader struct {
	c  *Client
	up *chunkupv1.Upload
	// inputSize and inputCRC are the whole input's, once send has returned.
	inputSize int64
	inputCRC  uint32

	mu       sync.Mutex
	progress Progress
	report   func(Progress)
	// completed is the COMPLETED upload an acknowledgement carried, if one did.
	completed *chunkupv1.Upload
	// storedAcks counts the chunks acknowledged as stored in S3 (written through), which
	// the progress counts as uploaded without waiting for the watch to say so.
	storedAcks uint32
	// free holds chunk buffers to read into again once their chunk is acknowledged, so
	// an upload allocates about as many buffers as chunks it keeps in flight.
	free chan []byte
}

func newUploader(c *Client, up *chunkupv1.Upload, report func(Progress)) *uploader {
	u := &uploader{c: c, up: up, report: report, free: make(chan []byte, c.opts.parallel*c.opts.window+2)}
	u.progress = Progress{UploadID: up.UploadId, Size: up.ExpectedSize, TotalChunks: up.TotalChunks,
		ChunksUploaded: up.UploadedChunks}
	return u
}

// buffer returns a buffer of n bytes (at most a chunk), reused when one is free.
func (u *uploader) buffer(n int) []byte {
	select {
	case b := <-u.free:
		if cap(b) >= n {
			return b[:n]
		}
	default:
	}
	return make([]byte, n, max(n, int(u.up.ChunkSize)))
}

// recycle takes back the buffer of a chunk nobody needs any more (acknowledged, or
// skipped). gRPC has copied a chunk's bytes into its own message by the time Send
// returns, and nothing else keeps them.
func (u *uploader) recycle(c *chunk) {
	select {
	case u.free <- c.data[:0]:
	default:
	}
}

func (u *uploader) completedUpload() *chunkupv1.Upload {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.completed
}

func (u *uploader) update(fn func(*Progress)) {
	u.mu.Lock()
	defer u.mu.Unlock()
	fn(&u.progress)
	if u.report != nil {
		u.report(u.progress)
	}
}

// send reads r and streams its chunks over parallel streams. A stream that breaks puts
// its unacknowledged chunks back for another stream (or its own next attempt); the
// chunks the server already had are dropped first.
func (u *uploader) send(ctx context.Context, r io.Reader) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	held := make(map[uint32]*chunkupv1.ReceivedChunk, len(u.up.Chunks))
	for _, c := range u.up.Chunks {
		held[c.ChunkNumber] = c
	}
	s := newScheduler(u.c.opts.parallel * u.c.opts.window)
	fed := make(chan struct{})
	// The caller gets its reader back when send returns: wait for the reading goroutine
	// (cancelled first, so a failed upload does not wait for the input to end).
	defer func() { cancel(nil); <-fed }()
	go func() {
		defer close(fed)
		err := u.feed(ctx, s, newChunker(r, u.up.ChunkSize, u.up.ExpectedSize, u.buffer), held)
		if err != nil {
			cancel(err)
		}
		s.close(err)
	}()
	var wg sync.WaitGroup
	errs := make(chan error, u.c.opts.parallel)
	for range u.c.opts.parallel {
		wg.Go(func() {
			if err := u.streamLoop(ctx, s); err != nil {
				errs <- err
				cancel(err)
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return nil
}

// feed reads the input's chunks into s. A chunk the server holds already is compared
// with it: the same bytes (size and CRC32C) are not sent again; other bytes are sent
// again (they replace the staged ones) unless the server has stored the chunk in S3,
// which means the input is not the upload's. It also sums up the whole input's size and
// CRC32C, which the completed object must have.
func (u *uploader) feed(ctx context.Context, s *scheduler, ch *chunker, held map[uint32]*chunkupv1.ReceivedChunk) error {
	total := u.up.TotalChunks
	for n := uint32(1); ; n++ {
		if total > 0 && n > total {
			return &MismatchError{UploadID: u.up.UploadId, Reason: fmt.Sprintf("the input is longer than the upload's %d chunks", total)}
		}
		data, last, err := ch.next()
		if err != nil {
			return fmt.Errorf("chunkup: read chunk %d: %w", n, err)
		}
		sum := crc.Checksum(data)
		u.inputCRC = crc.Combine(u.inputCRC, sum, int64(len(data)))
		u.inputSize += int64(len(data))
		if last && total > 0 && n < total {
			return &MismatchError{UploadID: u.up.UploadId, Reason: fmt.Sprintf("the input ends at chunk %d; the upload has %d chunks", n, total)}
		}
		if h := held[n]; h != nil {
			same := h.Size == int64(len(data)) && h.Crc32C == sum
			switch {
			case same:
				u.update(func(p *Progress) { p.BytesAcked += int64(len(data)) })
				u.recycle(&chunk{data: data})
				if last {
					return nil
				}
				continue
			case h.Stored:
				return &MismatchError{UploadID: u.up.UploadId, Reason: fmt.Sprintf(
					"chunk %d is stored with %d bytes and CRC32C %08x; the input's chunk %d has %d bytes and CRC32C %08x",
					n, h.Size, h.Crc32C, n, len(data), sum)}
			}
			// Different bytes not yet in S3: send them, they replace the staged ones.
		}
		if err := s.add(ctx, &chunk{n: n, data: data, crc: sum, last: last}); err != nil {
			return err
		}
		if last {
			return nil
		}
	}
}

// streamLoop runs streams until every chunk is acknowledged, reopening after transient
// failures with backoff. Failures count only while no chunk gets acknowledged.
func (u *uploader) streamLoop(ctx context.Context, s *scheduler) error {
	fails := 0
	for {
		acked, err := u.stream(ctx, s)
		if err == nil {
			return nil
		}
		if acked > 0 {
			fails = 0
		}
		fails++
		if !transient(err) || fails >= u.c.opts.attempts || ctx.Err() != nil {
			if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
				return cause
			}
			return fmt.Errorf("chunkup: upload %s: %w", u.up.UploadId, err)
		}
		if err := sleep(ctx, pause(err, retry.Backoff(u.c.opts.retryBase, u.c.opts.retryMax, fails))); err != nil {
			return context.Cause(ctx)
		}
	}
}

// stream sends chunks over one stream until the scheduler has no more, or the stream
// fails; it returns how many chunks it got acknowledged.
func (u *uploader) stream(ctx context.Context, s *scheduler) (int, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := u.c.api.UploadChunk(sctx)
	if err != nil {
		return 0, err
	}
	var (
		mu       sync.Mutex
		inflight = map[uint32]*chunk{}
		acked    int
	)
	slots := make(chan struct{}, u.c.opts.window)
	recvErr := make(chan error, 1)
	go func() {
		for {
			ack, err := stream.Recv()
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				recvErr <- err
				cancel()
				return
			}
			mu.Lock()
			c, ok := inflight[ack.ChunkNumber]
			delete(inflight, ack.ChunkNumber)
			if ok {
				acked++
			}
			mu.Unlock()
			if !ok {
				continue
			}
			<-slots
			s.ack()
			size := int64(len(c.data))
			u.recycle(c)
			u.update(func(p *Progress) {
				p.BytesAcked += size
				if c.last && p.TotalChunks == 0 {
					p.TotalChunks = c.n
				}
				if ack.Stored && !ack.Duplicate {
					u.storedAcks++
					p.ChunksUploaded = max(p.ChunksUploaded, u.up.UploadedChunks+u.storedAcks)
				}
			})
			if ack.Completed != nil {
				u.mu.Lock()
				u.completed = ack.Completed
				u.mu.Unlock()
			}
		}
	}()

	// requeue gives the stream's unacknowledged chunks back, minus those the server
	// staged although their acknowledgement was lost.
	requeue := func() {
		mu.Lock()
		left := make([]*chunk, 0, len(inflight))
		for _, c := range inflight {
			left = append(left, c)
		}
		clear(inflight)
		mu.Unlock()
		if len(left) == 0 {
			return
		}
		gctx, gcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer gcancel()
		if up, err := u.c.Get(gctx, u.up.UploadId); err == nil {
			have := map[uint32]*chunkupv1.ReceivedChunk{}
			for _, c := range up.Chunks {
				have[c.ChunkNumber] = c
			}
			kept := left[:0]
			for _, c := range left {
				// Only the same bytes count: the server may still hold other bytes the
				// chunk was sent to replace.
				if h := have[c.n]; h != nil && h.Crc32C == c.crc && h.Size == int64(len(c.data)) {
					s.ack()
					size := int64(len(c.data))
					u.recycle(c)
					u.update(func(p *Progress) { p.BytesAcked += size })
				} else {
					kept = append(kept, c)
				}
			}
			left = kept
		}
		s.requeue(left)
	}

	for {
		select {
		case slots <- struct{}{}:
		case <-sctx.Done():
			err := <-recvErr
			requeue()
			return acked, orCanceled(err, ctx)
		}
		c, err := s.take(sctx)
		if errors.Is(err, errFinished) {
			<-slots
			if err := stream.CloseSend(); err != nil {
				return acked, err
			}
			err := <-recvErr
			requeue()
			return acked, err
		}
		if err != nil {
			err := <-recvErr
			requeue()
			return acked, orCanceled(err, ctx)
		}
		mu.Lock()
		inflight[c.n] = c
		mu.Unlock()
		size := int64(len(c.data)) // its buffer is another chunk's once it is acknowledged
		if err := stream.Send(&chunkupv1.UploadChunkRequest{
			UploadId: u.up.UploadId, ChunkNumber: c.n, Data: c.data, Crc32C: &c.crc, IsLast: c.last,
		}); err != nil {
			// The stream is broken; Recv reports why, unless it saw only the cancel
			// that stopped it (then the stream ended, which is worth a retry).
			cancel()
			err := <-recvErr
			requeue()
			return acked, orCanceled(err, ctx)
		}
		u.update(func(p *Progress) { p.BytesSent += size })
	}
}

// orCanceled prefers the stream's own error; a stream ended only by our cancellation
// reports the context's.
func orCanceled(err error, ctx context.Context) error {
	if err != nil && status.Code(err) != codes.Canceled {
		return err
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return status.Error(codes.Unavailable, "stream ended")
}

// follow reports parts stored in S3 until ctx ends; it is best effort and resubscribes
// after a broken watch.
func (u *uploader) follow(ctx context.Context) {
	for n := 1; ctx.Err() == nil; n++ {
		_, _ = u.c.Watch(ctx, u.up.UploadId, u.noteProgress)
		if sleep(ctx, retry.Backoff(u.c.opts.retryBase, u.c.opts.retryMax, n)) != nil {
			return
		}
	}
}

func (u *uploader) noteProgress(p *chunkupv1.UploadProgress) {
	u.update(func(pr *Progress) {
		pr.ChunksUploaded = max(pr.ChunksUploaded, p.UploadedChunks)
		if p.TotalChunks > 0 {
			pr.TotalChunks = p.TotalChunks
		}
	})
}

// wait follows the upload to its end: over WatchUpload (which also reports chunks
// stored in S3), falling back to polling when the stream breaks.
func (u *uploader) wait(ctx context.Context) (*chunkupv1.Upload, error) {
	var up *chunkupv1.Upload
	err := u.c.retrying(ctx, func() error {
		_, err := u.c.Watch(ctx, u.up.UploadId, u.noteProgress)
		if err != nil && status.Code(errors.Unwrap(err)) != codes.Unimplemented {
			return errors.Unwrap(err)
		}
		got, err := u.c.Get(ctx, u.up.UploadId)
		if err != nil {
			return errors.Unwrap(err)
		}
		if done, _ := ended(got); !done {
			return status.Error(codes.Unavailable, "watch ended before the upload did")
		}
		up = got
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("chunkup: wait for upload %s: %w", u.up.UploadId, err)
	}
	_, err = ended(up)
	return up, err
}
