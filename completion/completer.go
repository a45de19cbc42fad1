// Package completion finalizes uploads: when every part of an upload is in S3, exactly
// one completer (the holder of the upload's completion guard) calls
// CompleteMultipartUpload with the parts in order and marks the upload COMPLETED with
// the object's ETag, size and CRC32C, recording its UploadCompleted event in the same
// step, then hands the upload off (to OCR) if it is a document. Completions are
// indexed durably, so a completer that dies mid-way is replaced once its guard's lease
// runs out.
package completion

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/chunkup/chunkup/events"
	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/internal/retry"
	"github.com/chunkup/chunkup/internal/sniff"
	"github.com/chunkup/chunkup/s3store"
	"github.com/chunkup/chunkup/staging"
)

// Objects is the part of the S3 store a completer uses: completing the multipart
// upload, and, once the object is there, aborting any other multipart upload left for
// its key, reading its first bytes to recognize its type, and deleting the partial
// uploads a final one concatenated.
type Objects interface {
	Complete(ctx context.Context, bucket, key, uploadID string, checksummed bool, parts []s3store.Part, size int64, sum uint32, o s3store.Owner) (string, error)
	AbortStrays(ctx context.Context, bucket, key, keep string) ([]string, error)
	FirstBytes(ctx context.Context, bucket, key string, n int64) ([]byte, error)
	ObjectCRC(ctx context.Context, bucket, key string) (uint32, int64, error)
	Delete(ctx context.Context, bucket, key string) error
}

var _ Objects = (*s3store.Store)(nil)

// Store is the part of the uploads store a completer uses.
type Store interface {
	Now() time.Time
	BeginSnapshot(ctx context.Context, id, token string, lease time.Duration) (staging.Begin, *staging.Upload, []staging.Part, error)
	Finish(ctx context.Context, id, token string, f staging.Final, ev staging.OutboxEvent, handoff bool) error
	HandedOff(ctx context.Context, id string) (bool, error)
	Retry(ctx context.Context, id string, at time.Time) error
	Drop(ctx context.Context, id string) error
	Get(ctx context.Context, id string) (*staging.Upload, error)
	DueNext(ctx context.Context, limit int64) ([]string, time.Duration, error)
}

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
	// SweepInterval is how often the completion index is swept for due work. Zero means
	// 1 s.
	SweepInterval time.Duration
	// LocalReady says that every upload made ready for completion is announced on the
	// ready channel: this process runs the API and the workers too, and a completer
	// elsewhere finds the uploads they make ready by its own process's announcements.
	// Its sweep is then a safety net, and one that finds nothing due sleeps until the
	// index's next entry falls due, up to ten intervals; the first upload this completer
	// takes meanwhile brings the next sweep back to one interval (its retries are due
	// again soon). False: uploads made ready by another process (an API or worker role
	// apart) are found by the sweep alone, every SweepInterval.
	LocalReady bool
	// Concurrency is how many uploads are completed at once. Zero means 2.
	Concurrency int
	// ReadsPerTenant is how many of one tenant's objects this process reads whole at
	// once to learn their CRC32C (direct uploads whose client gave no checksums: an
	// Uppy upload). A completion that would read more waits its turn without holding
	// one of the Concurrency slots, so that one tenant's large objects do not hold up
	// other tenants' completions. Zero means 1.
	ReadsPerTenant int
	// RetryBase and RetryMax bound the backoff after a transient S3 error. Zero means
	// 1 s and 30 s.
	RetryBase, RetryMax time.Duration
	// S3Timeout bounds one CompleteMultipartUpload (and the HeadObject after it); a
	// call that hangs longer is abandoned and retried. Zero means 5 min.
	S3Timeout time.Duration
	// InstanceID names this process in events and logs.
	InstanceID string
	// Handoff, when set, receives completed uploads it wants.
	Handoff Handoff
	Logger  *slog.Logger
	// Metrics, when set, counts completed uploads (see internal/metrics; failed ones
	// are counted where they end, in cleanup.Ender).
	Metrics Metrics
}

// Metrics is what a completer records (implemented by *metrics.Set).
type Metrics interface {
	// UploadCompleted records an upload completed: its size (the bytes stored in S3 for
	// it) and the time from its first chunk to its completion (zero when unknown).
	UploadCompleted(size int64, sinceFirstChunk time.Duration)
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Lease < 0 || c.SweepInterval < 0 || c.Concurrency < 0 || c.ReadsPerTenant < 0 || c.RetryBase < 0 || c.RetryMax < 0 || c.S3Timeout < 0 {
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
	s3    Objects
	ender Ender
	// token identifies this completer in guards; it is the same for all its attempts,
	// so a retry after a transient error does not wait for its own guard to expire.
	token string
	ready <-chan string
	// busy is nudged by every completion attempt: a sweep sleeping past an idle index
	// wakes within SweepInterval once there is work (whose retries it must find).
	busy retry.Nudge

	mu       sync.Mutex
	inflight map[string]bool
	failures map[string]int
	// reading counts each tenant's objects being read for their CRC32C; waiting holds,
	// in order, the completions of a tenant at its ReadsPerTenant that wait their turn.
	reading map[string]int
	waiting map[string][]string
}

// New returns a Completer. ready (the process's notify.Hub Ready; nil for none)
// delivers ids of uploads to complete at once, ahead of the sweep.
func New(store Store, s3c Objects, ender Ender, ready <-chan string, cfg Config) (*Completer, error) {
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
	if cfg.ReadsPerTenant == 0 {
		cfg.ReadsPerTenant = 1
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
		cfg: cfg, store: store, s3: s3c, ender: ender, token: ids.NewToken(),
		ready: ready, busy: retry.NewNudge(), inflight: map[string]bool{}, failures: map[string]int{},
		reading: map[string]int{}, waiting: map[string][]string{},
	}, nil
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
	if c.cfg.LocalReady {
		pace.Idle = 10 * c.cfg.SweepInterval
	}
	var sweeper sync.WaitGroup
	defer wg.Wait()
	defer close(work)
	defer sweeper.Wait() // it sends work: done before work closes
	sweeper.Go(func() {
		pace.Sweep(ctx, c.busy, func(ctx context.Context) (int, time.Duration, error) {
			ids, next, err := c.store.DueNext(ctx, 100)
			for _, id := range ids {
				send(ctx, work, id)
			}
			return len(ids), next, err
		})
	})
	for {
		select {
		case <-ctx.Done():
			return nil
		case id := <-c.ready:
			send(ctx, work, id)
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
	_, err := c.CompleteUpload(ctx, id, nil)
	return err
}

// CompleteUpload is Complete, and returns the upload as it recorded it COMPLETED, or
// nil when this call did not complete it (not ready, another completer has it, or it
// was completed before).
//
// head is the object's first bytes (up to sniff.HeadSize) when the caller has them, as
// the process that wrote a one-chunk upload through does: content detection then needs
// no read from S3. nil: they are read from S3 when needed.
func (c *Completer) CompleteUpload(ctx context.Context, id string, head []byte) (*staging.Upload, error) {
	u, err := c.complete(ctx, id, head)
	if err != nil && (u == nil || u.Status != staging.StatusCompleted) {
		return nil, err
	}
	return u, err
}

func (c *Completer) complete(ctx context.Context, id string, head []byte) (*staging.Upload, error) {
	defer c.busy.Work() // after a retry's due time is written, for the sweep to see
	c.mu.Lock()
	if c.inflight[id] {
		c.mu.Unlock()
		return nil, nil
	}
	c.inflight[id] = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.inflight, id)
		c.mu.Unlock()
	}()

	// The guard, the upload (for its event) and its parts, in one round trip.
	b, u, parts, err := c.store.BeginSnapshot(ctx, id, c.token, c.cfg.Lease)
	if err != nil {
		return nil, err
	}
	switch b.Outcome {
	case staging.Finished:
		if b.HandoffPending {
			if err := c.handoff(ctx, id, false); err != nil {
				return nil, c.retryLater(ctx, id, err)
			}
		}
		return nil, nil
	case staging.NotActive, staging.NotReady, staging.Guarded:
		// NotReady: a recorded part or the last chunk will index it again. Guarded:
		// it is due again when the guard expires.
		return nil, nil
	}

	reads := slices.ContainsFunc(parts, func(p staging.Part) bool { return p.NoCRC })
	if reads {
		if !c.takeRead(u.Tenant, id) {
			// Due again once a read of the tenant's ends (or, should this process die,
			// when its guard has expired).
			return nil, c.store.Retry(ctx, id, c.store.Now().Add(c.cfg.Lease))
		}
		defer c.endRead(ctx, u.Tenant)
	}
	var size int64
	var sum uint32
	for _, p := range parts {
		sum = crc.Combine(sum, p.CRC32C, p.Size)
		size += p.Size
	}
	etag := parts[0].ETag // a one-chunk upload was a single PutObject
	if b.MultipartID != "" {
		etag, err = c.completeMultipart(ctx, id, b, parts, size, sum)
		if err != nil {
			return nil, c.failed(ctx, id, err)
		}
	}
	if reads {
		// A direct upload whose client gave no checksums: the object's CRC32C (which
		// its record, its event and its readers' checks carry) is learnt by reading it.
		var n int64
		if sum, n, err = c.objectCRC(ctx, b, size); err != nil {
			return nil, c.retryLater(ctx, id, err)
		}
		if n != size {
			return nil, c.failed(ctx, id, &retry.PermanentError{Err: fmt.Errorf("the object has %d bytes, but its parts %d", n, size)})
		}
	}
	// The object is final: no other multipart upload for its key can be of use. Done
	// before the completion is recorded, so that a completer dying here leaves the job
	// to its successor (which meets NoSuchUpload, finds the object, and gets here).
	c.abortStrays(ctx, id, b)
	c.mu.Lock()
	delete(c.failures, id)
	c.mu.Unlock()
	final := staging.Final{ETag: etag, Size: size, CRC32C: sum}
	if !u.Partial && sniff.Generic(u.ContentType) {
		if final.DetectedContentType, err = c.detect(ctx, b, head); err != nil {
			return nil, c.retryLater(ctx, id, err)
		}
		u.DetectedContentType = final.DetectedContentType
	}
	// One instant, in Redis' millisecond precision, for the record, the event and the
	// answer, so that a client comparing them sees one completion time.
	now := c.store.Now().Truncate(time.Millisecond)
	final.Completed = now
	var ev staging.OutboxEvent
	wants := false
	if !u.Partial {
		// A partial upload (tus concatenation) is a piece of the final upload, which
		// is the one announced and handed off.
		if ev, err = events.Completed(u, c.cfg.InstanceID, final, now); err != nil {
			return nil, err
		}
		wants = c.cfg.Handoff != nil && c.cfg.Handoff.Wants(u.EffectiveContentType())
	}
	if err := c.store.Finish(ctx, id, c.token, final, ev, wants); errors.Is(err, staging.ErrAlreadyCompleted) {
		c.cfg.Logger.Info("upload completed by another completer first; nothing more to record", "upload_id", id)
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	// What Finish recorded.
	u.Status, u.ETag, u.Size, u.CRC32C, u.HandoffPending = staging.StatusCompleted, etag, size, sum, wants
	u.Completed, u.Updated = now, now
	if c.cfg.Metrics != nil {
		var since time.Duration
		if !u.FirstChunk.IsZero() {
			since = max(0, now.Sub(u.FirstChunk))
		}
		c.cfg.Metrics.UploadCompleted(size, since)
	}
	c.cfg.Logger.Info("upload completed", "upload_id", id, "node_id", u.NodeID, "bucket", b.Bucket, "key", b.Key, "size", size,
		"etag", etag, "content_type", u.ContentType, "detected_content_type", final.DetectedContentType,
		"correlation_id", u.CorrelationID)
	if len(u.Concat) > 0 {
		c.dropPartials(ctx, u)
	}
	if wants {
		// The completion index entry stays until the hand-off is recorded, so a crash
		// here is recovered by the next sweep (Begin reports it pending).
		if err := c.handoff(ctx, id, false); err != nil {
			return u, c.retryLater(ctx, id, err)
		}
	}
	return u, nil
}

// detect returns the content type the completed object's first bytes show ("" when
// none is recognized): head when the caller has them, else read from S3. An object S3 will not give back (a permanent
// error) is left undetected, with a warning; a transient error is returned, so the
// completion is retried.
func (c *Completer) detect(ctx context.Context, b staging.Begin, head []byte) (string, error) {
	if head != nil {
		return sniff.Detect(head), nil
	}
	if c.s3 == nil {
		return "", nil
	}
	ctx, cancel := context.WithTimeout(ctx, min(c.cfg.S3Timeout, strayTimeout))
	defer cancel()
	head, err := c.s3.FirstBytes(ctx, b.Bucket, b.Key, sniff.HeadSize)
	if err != nil {
		if s3store.Permanent(err) {
			c.cfg.Logger.Warn("cannot read the object's first bytes; its type stays undetected", "bucket", b.Bucket, "key", b.Key, "err", err)
			return "", nil
		}
		return "", err
	}
	return sniff.Detect(head), nil
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
	_, err = c.store.HandedOff(ctx, id)
	return err
}

func (c *Completer) retryLater(ctx context.Context, id string, err error) error {
	c.mu.Lock()
	c.failures[id]++
	n := c.failures[id]
	c.mu.Unlock()
	_ = c.store.Retry(ctx, id, c.store.Now().Add(retry.Backoff(c.cfg.RetryBase, c.cfg.RetryMax, n)))
	return err
}

func (c *Completer) completeMultipart(ctx context.Context, id string, b staging.Begin, parts []staging.Part, size int64, sum uint32) (string, error) {
	// The guard is not renewed while S3 works: it is what lets another completer take
	// over from one that hangs. Two completions at once are harmless (S3 completes once;
	// the fenced finish records one), so the call is only bounded.
	ctx, cancel := context.WithTimeout(ctx, c.cfg.S3Timeout)
	defer cancel()
	ps := make([]s3store.Part, len(parts))
	for i, p := range parts {
		ps[i] = s3store.Part{N: p.N, ETag: p.ETag, CRC32C: p.CRC32C}
	}
	return c.s3.Complete(ctx, b.Bucket, b.Key, b.MultipartID, b.MultipartChecksummed, ps, size, sum,
		s3store.Owner{UploadID: id, IfAbsent: b.IfAbsent})
}

// takeRead counts a read of tenant's objects for upload id's completion, unless the
// tenant has ReadsPerTenant under way: then id waits for one of them to end.
func (c *Completer) takeRead(tenant, id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reading[tenant] >= c.cfg.ReadsPerTenant {
		if !slices.Contains(c.waiting[tenant], id) {
			c.waiting[tenant] = append(c.waiting[tenant], id)
		}
		return false
	}
	c.reading[tenant]++
	return true
}

// endRead ends a read of tenant's objects: the completion that waited longest for it
// is due now.
func (c *Completer) endRead(ctx context.Context, tenant string) {
	c.mu.Lock()
	c.reading[tenant]--
	if c.reading[tenant] == 0 {
		delete(c.reading, tenant)
	}
	var next string
	if w := c.waiting[tenant]; len(w) > 0 {
		next = w[0]
		if c.waiting[tenant] = w[1:]; len(w) == 1 {
			delete(c.waiting, tenant)
		}
	}
	c.mu.Unlock()
	if next != "" {
		if err := c.store.Retry(context.WithoutCancel(ctx), next, c.store.Now()); err != nil {
			c.cfg.Logger.Warn("a completion waiting for its tenant's reads is due at its guard's expiry", "upload_id", next, "err", err)
		}
		c.busy.Work()
	}
}

// objectCRC reads the completed object of size bytes for its CRC32C, within the S3
// timeout plus a second per 16 MiB (a store slower than that is retried later), so
// that a stalled read does not hold the completion for ever.
func (c *Completer) objectCRC(ctx context.Context, b staging.Begin, size int64) (uint32, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.S3Timeout+time.Duration(size>>24)*time.Second)
	defer cancel()
	return c.s3.ObjectCRC(ctx, b.Bucket, b.Key)
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
	if !s3store.KeyOwnedBy(b.Key, id) {
		// A key the client chose may be another upload's too: its multipart uploads
		// cannot be told apart, so none is aborted.
		log.Debug("not looking for stray multipart uploads under a key the client chose")
		return
	}
	ctx, cancel := context.WithTimeout(ctx, min(c.cfg.S3Timeout, strayTimeout))
	defer cancel()
	aborted, err := c.s3.AbortStrays(ctx, b.Bucket, b.Key, b.MultipartID)
	if len(aborted) > 0 {
		log.Info("aborted stray multipart uploads of a completed upload", "aborted", aborted, "kept", b.MultipartID)
	}
	if err != nil {
		log.Warn("abort stray multipart uploads of a completed upload", "err", err)
	}
}

func (c *Completer) failed(ctx context.Context, id string, err error) error {
	if s3store.Permanent(err) {
		c.cfg.Logger.Error("completion failed permanently; failing the upload", "upload_id", id, "err", err)
		if endErr := c.ender.End(ctx, id, staging.StatusFailed, s3store.Reason(err), c.token); endErr != nil {
			return endErr
		}
		return c.store.Drop(ctx, id)
	}
	return c.retryLater(ctx, id, err)
}

// dropPartials deletes the objects of the partial uploads final upload u concatenated
// (tus concatenation), now that its object holds their bytes: not sooner, so that a
// final upload that fails before it completes can be created again from them. A
// partial whose record is gone, that is not the same tenant's partial upload, or that
// another final upload claimed (none can, while u holds it, unless u was taken for
// abandoned), is left alone; a delete that fails is logged (docs/http-uploads.md says how a bucket
// lifecycle rule collects what is left).
func (c *Completer) dropPartials(ctx context.Context, u *staging.Upload) {
	for _, id := range u.Concat {
		p, err := c.store.Get(ctx, id)
		if err != nil || !p.Partial || p.Tenant != u.Tenant || p.ClaimedBy != "" && p.ClaimedBy != u.ID {
			c.cfg.Logger.Warn("a concatenated partial upload's object is left", "upload_id", u.ID, "partial", id, "err", err)
			continue
		}
		if err := c.s3.Delete(ctx, p.Bucket, p.Key); err != nil {
			c.cfg.Logger.Warn("delete a concatenated partial upload's object", "upload_id", u.ID, "partial", id, "key", p.Key, "err", err)
		}
	}
}
