// Package completion finalizes uploads: when every part of an upload is in S3, exactly
// one completer (the holder of the upload's completion guard) calls
// CompleteMultipartUpload with the parts in order and marks the upload COMPLETED with
// the object's ETag, size and CRC32C. Completions are indexed durably, so a completer
// that dies mid-way is replaced once its guard's lease runs out.
package completion

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/internal/retry"
	"github.com/chunkup/chunkup/staging"
)

// S3API is the part of the S3 client a completer uses: completing the multipart
// upload, and, once the object is there, aborting any other multipart upload left for
// its key (see AbortStrayMultipart).
type S3API interface {
	CompleteMultipartUpload(ctx context.Context, in *s3.CompleteMultipartUploadInput, opts ...func(*s3.Options)) (*s3.CompleteMultipartUploadOutput, error)
	HeadObject(ctx context.Context, in *s3.HeadObjectInput, opts ...func(*s3.Options)) (*s3.HeadObjectOutput, error)
	ListMultipartUploads(ctx context.Context, in *s3.ListMultipartUploadsInput, opts ...func(*s3.Options)) (*s3.ListMultipartUploadsOutput, error)
	AbortMultipartUpload(ctx context.Context, in *s3.AbortMultipartUploadInput, opts ...func(*s3.Options)) (*s3.AbortMultipartUploadOutput, error)
}

var _ S3API = (*s3.Client)(nil)

// Store is the part of the staging store a completer uses.
type Store interface {
	Now() time.Time
	BeginComplete(ctx context.Context, id, token string, lease time.Duration) (staging.Begin, error)
	Parts(ctx context.Context, id string, total uint32) ([]staging.Part, error)
	FinishComplete(ctx context.Context, id, token, etag string, size int64, crc uint32, ev staging.OutboxEvent, handoff bool) error
	MarkHandedOff(ctx context.Context, id string) (bool, error)
	Get(ctx context.Context, id string) (*staging.Upload, error)
	DueCompletions(ctx context.Context, limit int64) ([]string, error)
	DeferCompletion(ctx context.Context, id string, at time.Time) error
	DoneCompletion(ctx context.Context, id string) error
}

var _ Store = (*staging.Store)(nil)

// Ender fails an upload that cannot be completed (see cleanup.Ender); the completer
// passes its guard token, so it can end only an upload it is still completing.
type Ender interface {
	End(ctx context.Context, id string, status staging.Status, reason string, completer string) error
}

// Handoff takes completed uploads whose content may be processed further (OCR).
type Handoff interface {
	// Wants reports whether uploads of this content type are handed off.
	Wants(contentType string) bool
	// Handoff passes a completed upload on. The completer calls it once per upload, and
	// records that it did; only a crash between the call and that record makes it call
	// again, so it must be idempotent per upload id (e.g. a queue that deduplicates).
	Handoff(ctx context.Context, u *staging.Upload, force bool) error
}

// Config tunes a Completer. Zero values mean the documented defaults.
type Config struct {
	// Lease is how long the completion guard is held; a completer that dies blocks the
	// upload's completion this long. Zero means 60 s.
	Lease time.Duration
	// SweepInterval is how often the completion index is swept for due work. Zero means 1 s.
	SweepInterval time.Duration
	// Concurrency is how many uploads are completed at once. Zero means 2.
	Concurrency int
	// RetryBase and RetryMax bound the backoff after a transient S3 error. Zero means
	// 1 s and 30 s.
	RetryBase, RetryMax time.Duration
	// S3Timeout bounds one CompleteMultipartUpload (and the HeadObject after it); a
	// call that hangs longer is abandoned and retried. Zero means 5 min.
	S3Timeout time.Duration
	// NodeID names this process in events.
	NodeID string
	// Handoff, when set, receives completed uploads it wants.
	Handoff Handoff
	// OnEvent, when set, is called after an event is recorded in an outbox, so an
	// in-process publisher sends it at once.
	OnEvent func()
	Logger  *slog.Logger
	// Metrics, when set, counts completed uploads (see internal/metrics; failed ones
	// are counted where they end, in cleanup.Ender).
	Metrics interface{ UploadCompleted() }
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Lease < 0 || c.SweepInterval < 0 || c.Concurrency < 0 || c.RetryBase < 0 || c.RetryMax < 0 || c.S3Timeout < 0 {
		return errors.New("completion: settings must not be negative")
	}
	if c.Lease > 0 && c.Lease < time.Second {
		return errors.New("completion: lease must be at least 1s")
	}
	return nil
}

// Completer finalizes uploads.
type Completer struct {
	cfg   Config
	store Store
	s3    S3API
	ender Ender
	// token identifies this completer in guards; it is the same for all its attempts,
	// so a retry after a transient error does not wait for its own guard to expire.
	token string
	ready chan string

	mu       sync.Mutex
	inflight map[string]bool
	failures map[string]int
}

// New returns a Completer.
func New(store Store, s3c S3API, ender Ender, cfg Config) (*Completer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Lease == 0 {
		cfg.Lease = time.Minute
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = time.Second
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 2
	}
	if cfg.RetryBase == 0 {
		cfg.RetryBase = time.Second
	}
	if cfg.RetryMax == 0 {
		cfg.RetryMax = 30 * time.Second
	}
	if cfg.S3Timeout == 0 {
		cfg.S3Timeout = 5 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Completer{
		cfg: cfg, store: store, s3: s3c, ender: ender, token: staging.NewToken(),
		ready: make(chan string, 256), inflight: map[string]bool{}, failures: map[string]int{},
	}, nil
}

// Notify asks the completer to complete id soon. It never blocks; an upload whose
// notice is dropped is found by the next sweep.
func (c *Completer) Notify(id string) {
	select {
	case c.ready <- id:
	default:
	}
}

// Run completes uploads as they become ready until ctx ends, then waits for the
// completions in flight.
func (c *Completer) Run(ctx context.Context) error {
	work := make(chan string, c.cfg.Concurrency)
	var wg sync.WaitGroup
	for range c.cfg.Concurrency {
		wg.Go(func() {
			for id := range work {
				// A completion in flight finishes even during shutdown: it is short,
				// and stopping half-way only makes the next completer redo it.
				if err := c.Complete(context.WithoutCancel(ctx), id); err != nil {
					c.cfg.Logger.Warn("complete upload", "upload_id", id, "err", err)
				}
			}
		})
	}
	pace := retry.Pacer{What: "sweeping completions", Interval: c.cfg.SweepInterval, Logger: c.cfg.Logger}
	t := time.NewTimer(c.cfg.SweepInterval)
	defer t.Stop()
	defer wg.Wait()
	defer close(work)
	for {
		select {
		case <-ctx.Done():
			return nil
		case id := <-c.ready:
			send(ctx, work, id)
		case <-t.C:
			ids, err := c.store.DueCompletions(ctx, 100)
			if ctx.Err() != nil {
				return nil
			}
			for _, id := range ids {
				send(ctx, work, id)
			}
			t.Reset(pace.Next(err))
		}
	}
}

func send(ctx context.Context, work chan<- string, id string) {
	select {
	case work <- id:
	case <-ctx.Done():
	}
}

// Complete finalizes upload id if it is ready and no other completer holds it. It is
// safe to call any number of times, from any number of processes.
func (c *Completer) Complete(ctx context.Context, id string) error {
	c.mu.Lock()
	if c.inflight[id] {
		c.mu.Unlock()
		return nil
	}
	c.inflight[id] = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.inflight, id)
		c.mu.Unlock()
	}()

	b, err := c.store.BeginComplete(ctx, id, c.token, c.cfg.Lease)
	if err != nil {
		return err
	}
	switch b.Outcome {
	case staging.Finished:
		if b.HandoffPending {
			if err := c.handoff(ctx, id, false); err != nil {
				return c.retryLater(ctx, id, err)
			}
		}
		return c.store.DoneCompletion(ctx, id)
	case staging.NotActive, staging.NotReady:
		// NotReady: a recorded part or the last chunk will enqueue it again.
		return c.store.DoneCompletion(ctx, id)
	case staging.Guarded:
		return c.store.DeferCompletion(ctx, id, b.Until)
	}

	parts, err := c.store.Parts(ctx, id, b.Total)
	if err != nil {
		return err
	}
	var size int64
	var sum uint32
	for _, p := range parts {
		sum = crc.Combine(sum, p.CRC32C, p.Size)
		size += p.Size
	}
	etag := parts[0].ETag // a one-chunk upload was a single PutObject
	if b.MultipartID != "" {
		etag, err = c.completeMultipart(ctx, b, parts, size)
		if err != nil {
			return c.failed(ctx, id, err)
		}
	}
	// The object is final: no other multipart upload for its key can be of use. Done
	// before the completion is recorded, so that a completer dying here leaves the job
	// to its successor (which meets NoSuchUpload, finds the object, and gets here).
	c.abortStrays(ctx, id, b)
	c.mu.Lock()
	delete(c.failures, id)
	c.mu.Unlock()
	u, err := c.store.Get(ctx, id)
	if err != nil {
		return err
	}
	ev, err := CompletedEvent(u, c.cfg.NodeID, etag, size, sum, c.store.Now())
	if err != nil {
		return err
	}
	wants := c.cfg.Handoff != nil && c.cfg.Handoff.Wants(u.ContentType)
	if err := c.store.FinishComplete(ctx, id, c.token, etag, size, sum, ev, wants); errors.Is(err, staging.ErrAlreadyCompleted) {
		c.cfg.Logger.Info("upload completed by another completer first; nothing more to record", "upload_id", id)
		return c.store.DoneCompletion(ctx, id)
	} else if err != nil {
		return err
	}
	if c.cfg.OnEvent != nil {
		c.cfg.OnEvent()
	}
	if c.cfg.Metrics != nil {
		c.cfg.Metrics.UploadCompleted()
	}
	c.cfg.Logger.Info("upload completed", "upload_id", id, "bucket", b.Bucket, "key", b.Key, "size", size,
		"etag", etag, "correlation_id", u.CorrelationID)
	if wants {
		// The completion index entry stays until the hand-off is recorded, so a crash
		// here is recovered by the next sweep (BeginComplete reports it pending).
		if err := c.handoff(ctx, id, false); err != nil {
			return c.retryLater(ctx, id, err)
		}
	}
	return c.store.DoneCompletion(ctx, id)
}

// HandOff passes completed upload id to the Handoff again; with force even if it was
// handed off before (to reprocess it on purpose).
func (c *Completer) HandOff(ctx context.Context, id string, force bool) error {
	return c.handoff(ctx, id, force)
}

func (c *Completer) handoff(ctx context.Context, id string, force bool) error {
	if c.cfg.Handoff == nil {
		return errors.New("completion: no hand-off configured")
	}
	u, err := c.store.Get(ctx, id)
	if err != nil {
		return err
	}
	if u.Status != staging.StatusCompleted {
		return fmt.Errorf("completion: upload %s is %s, not COMPLETED", id, u.Status)
	}
	if !force && !u.HandoffPending {
		return nil // handed off already: at most once unless forced
	}
	if err := c.cfg.Handoff.Handoff(ctx, u, force); err != nil {
		return fmt.Errorf("hand off: %w", err)
	}
	_, err = c.store.MarkHandedOff(ctx, id)
	return err
}

func (c *Completer) retryLater(ctx context.Context, id string, err error) error {
	c.mu.Lock()
	c.failures[id]++
	n := c.failures[id]
	c.mu.Unlock()
	_ = c.store.DeferCompletion(ctx, id, c.store.Now().Add(retry.Backoff(c.cfg.RetryBase, c.cfg.RetryMax, n)))
	return err
}

func (c *Completer) completeMultipart(ctx context.Context, b staging.Begin, parts []staging.Part, size int64) (string, error) {
	// The guard is not renewed while S3 works: it is what lets another completer take
	// over from one that hangs. Two completions at once are harmless (S3 completes once;
	// the fenced finish records one), so the call is only bounded.
	ctx, cancel := context.WithTimeout(ctx, c.cfg.S3Timeout)
	defer cancel()
	done := make([]types.CompletedPart, len(parts))
	for i, p := range parts {
		done[i] = types.CompletedPart{ETag: aws.String(p.ETag), PartNumber: aws.Int32(int32(p.N))}
	}
	out, err := c.s3.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket: aws.String(b.Bucket), Key: aws.String(b.Key), UploadId: aws.String(b.MultipartID),
		MultipartUpload: &types.CompletedMultipartUpload{Parts: done},
	})
	if err == nil {
		return aws.ToString(out.ETag), nil
	}
	if !noSuchUpload(err) {
		return "", fmt.Errorf("complete multipart upload: %w", err)
	}
	// An earlier completer may have completed it and died before recording that.
	head, herr := c.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(b.Bucket), Key: aws.String(b.Key)})
	if herr != nil {
		return "", fmt.Errorf("complete multipart upload: %w; and the object is not there: %w", err, herr)
	}
	if aws.ToInt64(head.ContentLength) != size {
		return "", fmt.Errorf("complete multipart upload: %w; the object there has %d bytes, want %d", err, aws.ToInt64(head.ContentLength), size)
	}
	return aws.ToString(head.ETag), nil
}

// strayTimeout bounds the clean-up of stray multipart uploads after a completion, so a
// slow listing delays recording the completion only so long.
const strayTimeout = 30 * time.Second

// abortStrays aborts every multipart upload S3 holds for the completed upload's key
// besides the one it recorded (a worker killed between creating its own and learning it
// lost the race leaves one behind). It is best effort: failures are logged, and the
// completion goes on.
func (c *Completer) abortStrays(ctx context.Context, id string, b staging.Begin) {
	log := c.cfg.Logger.With("upload_id", id, "bucket", b.Bucket, "key", b.Key)
	if c.s3 == nil {
		return
	}
	recorded := 0
	if b.MultipartID != "" {
		recorded = 1
	}
	if b.MultipartAttempts <= recorded {
		return // every multipart upload ever created for it is the recorded one
	}
	if !KeyOwnedBy(b.Key, id) {
		// A key the client chose may be another upload's too: its multipart uploads
		// cannot be told apart, so none is aborted.
		log.Debug("not looking for stray multipart uploads under a key the client chose")
		return
	}
	ctx, cancel := context.WithTimeout(ctx, min(c.cfg.S3Timeout, strayTimeout))
	defer cancel()
	aborted, err := AbortStrayMultipart(ctx, c.s3, b.Bucket, b.Key, b.MultipartID)
	if len(aborted) > 0 {
		log.Info("aborted stray multipart uploads of a completed upload", "aborted", aborted, "kept", b.MultipartID)
	}
	if err != nil {
		log.Warn("abort stray multipart uploads of a completed upload", "err", err)
	}
}

func (c *Completer) failed(ctx context.Context, id string, err error) error {
	if retry.Permanent(err) {
		c.cfg.Logger.Error("completion failed permanently; failing the upload", "upload_id", id, "err", err)
		if endErr := c.ender.End(ctx, id, staging.StatusFailed, err.Error(), c.token); endErr != nil {
			return endErr
		}
		return c.store.DoneCompletion(ctx, id)
	}
	return c.retryLater(ctx, id, err)
}
