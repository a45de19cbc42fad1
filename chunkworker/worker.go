// Package chunkworker moves staged chunks from Redis to S3. A worker is woken by pub/sub
// when a chunk is staged and, because a wake-up can be lost, also sweeps the durable
// index of pending chunks. It leases a chunk (one winner), uploads it as an S3 part (or
// as the whole object for a one-chunk upload), records the part's ETag, and only then
// lets the staged bytes go. A worker that dies leaves its lease to expire, after which
// the chunk is offered again.
package chunkworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/internal/retry"
	"github.com/chunkup/chunkup/s3store"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/uploads"
)

// Objects is the part of the S3 store a worker uses.
type Objects interface {
	PutChunk(ctx context.Context, bucket, key, ct string, o s3store.Owner, data []byte, sum uint32) (string, error)
	CreateMultipart(ctx context.Context, bucket, key, ct string, o s3store.Owner) (id string, checksummed bool, err error)
	UploadPart(ctx context.Context, bucket, key, uploadID string, checksummed bool, n uint32, data []byte, sum uint32) (string, error)
	Abort(ctx context.Context, bucket, key, uploadID string) error
	Delete(ctx context.Context, bucket, key string) error
}

var _ Objects = (*s3store.Store)(nil)

// Store is the part of the uploads store a worker uses (its Chunks view).
type Store interface {
	Now() time.Time
	Listen(ctx context.Context) *staging.Subscription
	DueNext(ctx context.Context, limit int64) ([]staging.ChunkRef, time.Duration, error)
	Claim(ctx context.Context, ref staging.ChunkRef, token string, lease time.Duration) (uploads.Claim, error)
	Data(ctx context.Context, ref staging.ChunkRef, lease time.Duration) ([]byte, error)
	Hold(ctx context.Context, ref staging.ChunkRef, lease time.Duration) error
	Renew(ctx context.Context, ref staging.ChunkRef, token string, lease time.Duration) (bool, error)
	Release(ctx context.Context, ref staging.ChunkRef, token string, retryAt time.Time) error
	Drop(ctx context.Context, ref staging.ChunkRef) error
	NoteMultipartAttempt(ctx context.Context, id string) error
	SetMultipart(ctx context.Context, id, multipartID string, checksummed bool) (string, bool, error)
	Record(ctx context.Context, ref staging.ChunkRef, token, etag string, crc uint32, size int64) (uploads.RecordOutcome, bool, error)
	BeginThrough(ctx context.Context, ref staging.ChunkRef, token string, crc uint32, size int64, last bool, lease time.Duration) (uploads.Through, error)
	RecordThrough(ctx context.Context, ref staging.ChunkRef, token, etag string, crc uint32, size int64, last, wake bool) (uploads.ThroughOutcome, bool, error)
	ReleaseThrough(ctx context.Context, ref staging.ChunkRef, token string) error
}

var _ Store = (*uploads.Chunks)(nil)

// Ender ends an upload that cannot succeed (see cleanup.Ender).
type Ender interface {
	End(ctx context.Context, id string, status staging.Status, reason string, completer string) error
}

// Config tunes a Worker. Zero values mean the documented defaults.
type Config struct {
	// Concurrency is how many chunks are uploaded at once. Zero means 8: part uploads
	// wait on S3 more than they use CPU, and 8 keeps S3 busy while each part's claim
	// and record go to Redis (docs/performance.md).
	Concurrency int
	// Lease is how long a claim lasts without renewal; a worker that dies holds its
	// chunks this long. It is renewed every third of it. Zero means 30 s.
	Lease time.Duration
	// SweepInterval is how often the pending index is swept for chunks whose wake-up
	// was lost, whose worker died or whose retry is due. Zero means 1 s. A sweep that
	// finds nothing due sleeps until the index's next entry falls due, up to ten
	// intervals (an idle server polls Redis a tenth as often), and the first chunk this
	// worker takes meanwhile brings the next sweep back to one interval.
	SweepInterval time.Duration
	// RetryBase and RetryMax bound the backoff (exponential, full jitter) before a chunk
	// whose upload failed transiently is tried again. The S3 client's own retries
	// happen first. Zero means 500 ms and 30 s.
	RetryBase, RetryMax time.Duration
	// GiveUpAfter is how long a chunk may keep failing transiently (S3 unreachable,
	// throttling, 5xx) before its upload is failed. Zero means never: the chunk is
	// retried until its staged bytes expire (ChunkTTL).
	GiveUpAfter time.Duration
	// S3Timeout bounds one chunk's S3 calls (CreateMultipartUpload and UploadPart, or
	// PutObject, with the S3 client's own retries). A call that hangs longer (a stalled
	// connection) is abandoned and the chunk retried after a backoff, so a hung call
	// cannot hold a chunk's lease, renewed meanwhile, for ever. Zero means 2 min.
	S3Timeout time.Duration
	// DrainTimeout is how long in-flight uploads may run after Run's context ends before
	// they are cancelled and their leases released. Zero means 10 s.
	DrainTimeout time.Duration
	Logger       *slog.Logger
	// Metrics, when set, records claims and uploaded parts (see internal/metrics).
	Metrics Metrics
	// SlowPart is how long an 8 MiB part upload may take (larger parts proportionally
	// longer) before S3 counts as behind: while recent parts took longer on average, the
	// API stages chunks in Redis instead of writing them through (see WriteThrough), and
	// a write-through still waiting for S3 after this long is staged and acknowledged
	// while its upload goes on. Zero means 1 s.
	SlowPart time.Duration
}

// Metrics is what a worker records (implemented by *metrics.Set).
type Metrics interface {
	// ChunkClaimed records a won claim; reclaimed when it took over an expired lease.
	ChunkClaimed(reclaimed bool)
	// PartUploaded records a part uploaded and recorded, and how long the upload took.
	PartUploaded(d time.Duration)
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Concurrency < 0 || c.Lease < 0 || c.SweepInterval < 0 || c.RetryBase < 0 || c.RetryMax < 0 || c.DrainTimeout < 0 || c.GiveUpAfter < 0 || c.S3Timeout < 0 || c.SlowPart < 0 {
		return errors.New("chunkworker: settings must not be negative")
	}
	if c.Lease > 0 && c.Lease < 300*time.Millisecond {
		return errors.New("chunkworker: lease must be at least 300ms")
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.Concurrency == 0 {
		c.Concurrency = 8
	}
	if c.Lease == 0 {
		c.Lease = 30 * time.Second
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = time.Second
	}
	if c.RetryBase == 0 {
		c.RetryBase = 500 * time.Millisecond
	}
	if c.RetryMax == 0 {
		c.RetryMax = 30 * time.Second
	}
	if c.S3Timeout == 0 {
		c.S3Timeout = 2 * time.Minute
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 10 * time.Second
	}
	if c.SlowPart == 0 {
		c.SlowPart = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Worker uploads staged chunks.
type Worker struct {
	cfg   Config
	store Store
	s3    Objects
	ender Ender
	work  chan staging.ChunkRef
	// local carries chunks this process's API has just staged, with their bytes (see
	// Expect); expected holds their refs until they are done, so that the pub/sub
	// wake-up for the same chunk does not send a second goroutine to claim it.
	local    chan localChunk
	expected sync.Map // staging.ChunkRef → struct{}
	// dropped is set when an offer found the queue full: the next goroutine to go idle
	// sweeps at once instead of waiting up to SweepInterval with work in Redis.
	dropped atomic.Bool
	// busy is nudged by every chunk this worker takes: a sweep sleeping past an idle
	// index wakes within SweepInterval once there is work (whose retries it must find).
	busy retry.Nudge
	// slots are the Concurrency upload slots, shared by the chunks this worker drains
	// from Redis and the chunks the API writes through (a write-through takes a slot
	// only when one is free).
	slots chan struct{}
	// bg is the context of in-flight work while Run runs (see running).
	bg atomic.Pointer[context.Context]
	// pace follows part upload times: is S3 keeping pace?
	pace *pace

	mu       sync.Mutex
	failures map[staging.ChunkRef]failing // consecutive transient failures, for backoff
	// notBefore keeps this worker off a chunk it failed until its retry is due, so that
	// offers it queued meanwhile do not re-claim it at once: the retry goes to whichever
	// worker's sweep finds it due (a worker whose S3 is broken does not hog it).
	notBefore map[staging.ChunkRef]time.Time
}

// New returns a Worker.
func New(store Store, s3c Objects, ender Ender, cfg Config) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	return &Worker{
		cfg: cfg, store: store, s3: s3c, ender: ender,
		work:     make(chan staging.ChunkRef, cfg.Concurrency*4),
		local:    make(chan localChunk, max(1, cfg.Concurrency/4)),
		slots:    make(chan struct{}, cfg.Concurrency),
		busy:     retry.NewNudge(),
		pace:     &pace{slow: cfg.SlowPart, now: time.Now},
		failures: map[staging.ChunkRef]failing{}, notBefore: map[staging.ChunkRef]time.Time{},
	}, nil
}

// Run works until ctx ends, then lets in-flight uploads finish for DrainTimeout,
// releases what is left, and returns.
func (w *Worker) Run(ctx context.Context) error {
	// In-flight work gets its own context so that shutdown drains rather than aborts.
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(w.cfg.DrainTimeout, cancelWork) })
	defer stop()
	w.bg.Store(&workCtx)
	defer w.bg.Store(nil)

	ps := w.store.Listen(ctx)
	defer ps.Close()

	var wg sync.WaitGroup
	wg.Go(func() { w.listen(ctx, ps) })
	wg.Go(func() { w.sweepLoop(ctx) })
	for range w.cfg.Concurrency {
		wg.Go(func() {
			for {
				// A chunk in memory goes first: it is the cheapest to upload, and it holds
				// memory until it is.
				select {
				case lc := <-w.local:
					w.processLocal(workCtx, lc)
					continue
				default:
				}
				if len(w.work) == 0 && w.dropped.Swap(false) {
					_ = w.Sweep(ctx)
				}
				select {
				case <-ctx.Done():
					return
				case lc := <-w.local:
					w.processLocal(workCtx, lc)
				case ref := <-w.work:
					w.Process(workCtx, ref)
				}
			}
		})
	}
	wg.Wait()
	return nil
}

func (w *Worker) listen(ctx context.Context, sub *staging.Subscription) {
	for {
		select {
		case <-ctx.Done():
			return
		case msg, ok := <-sub.C:
			if !ok {
				return
			}
			if ref, ok := staging.ParseChunkRef(msg); ok {
				if _, mine := w.expected.Load(ref); !mine {
					w.offer(ref)
				}
			}
		}
	}
}

// offer queues ref unless the queue is full: a dropped offer is picked up by a sweep,
// as soon as a goroutine is idle.
func (w *Worker) offer(ref staging.ChunkRef) {
	select {
	case w.work <- ref:
	default:
		w.dropped.Store(true)
	}
}

// localChunk is a chunk staged by this process, with the bytes it received.
type localChunk struct {
	ref  staging.ChunkRef
	data []byte
	crc  uint32
}

// Expect is the local fast path: the API calls it before it stages chunk ref, and the
// function it returns once staging is over, with the chunk's bytes if they were staged
// (nil otherwise). A staged chunk is queued for this worker with its bytes, so it is
// uploaded from memory rather than read back from Redis, and the pub/sub wake-up for it
// is ignored here meanwhile. Nothing else changes: the chunk is claimed, leased and
// recorded like any other, and Redis keeps the durable copy until its part is
// recorded, so a crash loses nothing and other replicas still take the chunk over
// after the lease (or from the sweep, if this worker is too busy to take it now: the
// queue holds a quarter of Concurrency chunks, which bounds the memory it pins; past
// that, reading a chunk back from Redis is cheaper than holding it in memory).
//
// The returned function does not block, and must not be called more than once.
func (w *Worker) Expect(ref staging.ChunkRef) func(data []byte, crc uint32) {
	w.expected.Store(ref, struct{}{})
	return func(data []byte, crc uint32) {
		if data == nil {
			w.expected.Delete(ref)
			return
		}
		select {
		case w.local <- localChunk{ref: ref, data: data, crc: crc}:
		default:
			w.expected.Delete(ref)
			w.offer(ref) // busy: the chunk takes the ordinary way, through Redis
		}
	}
}

func (w *Worker) processLocal(ctx context.Context, lc localChunk) {
	defer w.expected.Delete(lc.ref)
	w.process(ctx, lc.ref, &lc)
}

func (w *Worker) sweepLoop(ctx context.Context) {
	pace := retry.Pacer{What: "sweeping pending chunks", Interval: w.cfg.SweepInterval, Idle: 10 * w.cfg.SweepInterval, Logger: w.cfg.Logger}
	pace.Sweep(ctx, w.busy, w.sweep)
}

// Sweep offers every chunk whose sweep time has come: chunks whose wake-up was lost,
// whose worker died, or whose retry is due.
func (w *Worker) Sweep(ctx context.Context) error {
	_, _, err := w.sweep(ctx)
	return err
}

// sweep is Sweep; it says how many chunks were due and when the next falls due (see
// uploads.Chunks.DueNext).
func (w *Worker) sweep(ctx context.Context) (int, time.Duration, error) {
	refs, next, err := w.store.DueNext(ctx, int64(cap(w.work)))
	if err != nil {
		return 0, 0, err
	}
	for _, ref := range refs {
		if _, mine := w.expected.Load(ref); !mine { // queued here with its bytes
			w.offer(ref)
		}
	}
	return len(refs), next, nil
}

// Process claims ref and, if the claim is won, uploads it and records the part.
func (w *Worker) Process(ctx context.Context, ref staging.ChunkRef) { w.process(ctx, ref, nil) }

// process is Process with, for a chunk staged by this process, its bytes.
func (w *Worker) process(ctx context.Context, ref staging.ChunkRef, local *localChunk) {
	defer w.busy.Work() // after a retry's due time is written, for the sweep to see
	log := w.cfg.Logger.With("upload_id", ref.UploadID, "chunk", ref.N)
	if w.backingOff(ref) {
		return
	}
	if !w.takeSlot(ctx) {
		return
	}
	defer w.freeSlot()
	token := ids.NewToken()
	c, err := w.store.Claim(ctx, ref, token, w.cfg.Lease)
	if err != nil {
		log.Warn("claim chunk", "err", err)
		return
	}
	if c.Outcome != uploads.Claimed && c.Outcome != uploads.Busy {
		w.clearFailures(ref) // finished or gone elsewhere: nothing to back off from
	}
	switch c.Outcome {
	case uploads.AlreadyDone, uploads.Busy, uploads.Gone, uploads.Missing:
		return // the store keeps the pending index in step
	case uploads.Expired:
		// An acknowledged chunk is gone: the upload can never be exact, so say so.
		reason := fmt.Sprintf("staged chunk %d expired from Redis before it could be uploaded to S3", ref.N)
		w.endThenDrop(ctx, ref, reason, log, "failing upload", "reason", reason)
		return
	}

	if w.cfg.Metrics != nil {
		w.cfg.Metrics.ChunkClaimed(c.Reclaimed)
	}
	began := time.Now()
	etag, err := w.upload(ctx, c, local, true)
	took := time.Since(began)
	w.pace.note(took, c.Size, err)
	w.finishPart(ctx, c, etag, err, took, log)
}

// finishPart handles the end of a claimed chunk's upload: it records the part (which
// lets the staged bytes go), or handles the failure.
func (w *Worker) finishPart(ctx context.Context, c uploads.Claim, etag string, err error, took time.Duration, log *slog.Logger) {
	ref, token := c.Ref, c.Token
	if err != nil {
		w.failed(ctx, c, err, log)
		return
	}
	w.clearFailures(ref)
	outcome, _, err := w.store.Record(ctx, ref, token, etag, c.CRC32C, c.Size)
	if err != nil {
		log.Warn("record part", "err", err)
		if outcome == 0 {
			w.release(ctx, c, time.Time{})
		}
		return
	}
	if outcome == uploads.Recorded && w.cfg.Metrics != nil {
		w.cfg.Metrics.PartUploaded(took)
	}
	switch outcome {
	case uploads.Ended:
		if singleObject(c) {
			// The upload ended while this one-chunk upload's object was being written:
			// an upload that did not complete leaves no object behind.
			if err := w.s3.Delete(context.WithoutCancel(ctx), c.Bucket, c.Key); err != nil {
				log.Warn("delete the object of an upload that ended meanwhile", "err", err)
			}
		}
	case uploads.LeaseLost:
		log.Info("lease lost before the part was recorded; another worker has the chunk")
	}
}

// endThenDrop fails the upload of chunk ref with reason, saying why at error level (msg
// and args), then drops ref from the pending index. In that order: a crash in between
// leaves the chunk pending, and its next claim finds the upload gone. An upload that
// ended meanwhile (a client's DELETE or an expiry while its chunk was on its way, whose
// multipart upload S3 then no longer has) has nothing to fail: that is said at info
// level, not as a failure to chase.
func (w *Worker) endThenDrop(ctx context.Context, ref staging.ChunkRef, reason string, log *slog.Logger, msg string, args ...any) {
	err := w.ender.End(ctx, ref.UploadID, staging.StatusFailed, reason, "")
	if se := (*staging.StateError)(nil); errors.As(err, &se) {
		log.Info("the upload ended while its chunk was being stored; nothing to fail", append([]any{"status", se.Status}, args...)...)
	} else {
		log.Error(msg, args...)
		if err != nil {
			log.Warn("fail upload", "err", err)
		}
	}
	_ = w.store.Drop(ctx, ref)
}

// upload sends a claimed chunk to S3 while keeping its lease alive, and returns the
// part's (or object's) ETag. Losing the lease cancels the upload. A chunk whose bytes
// are in memory (local) is not read from Redis; with hold, its pending entry is pushed
// past the lease as reading it would (a write-through's chunk has none).
func (w *Worker) upload(ctx context.Context, c uploads.Claim, local *localChunk, hold bool) (string, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	renewDone := make(chan struct{})
	defer func() {
		cancel(nil)
		<-renewDone
	}()
	go func() {
		defer close(renewDone)
		t := time.NewTicker(w.cfg.Lease / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				ok, err := w.store.Renew(ctx, c.Ref, c.Token, w.cfg.Lease)
				if err == nil && !ok {
					cancel(errLeaseLost)
					return
				}
			}
		}
	}()

	var data []byte
	if local != nil && local.crc == c.CRC32C && int64(len(local.data)) == c.Size {
		// The claimed chunk is the one this process staged (a repeat with other bytes
		// may have replaced it since; then it is read from Redis like any other). As
		// reading it would, keep sweeps off it while the lease lasts.
		data = local.data
		if hold {
			if err := w.store.Hold(ctx, c.Ref, w.cfg.Lease); err != nil {
				return "", err
			}
		}
	} else {
		var err error
		if data, err = w.store.Data(ctx, c.Ref, w.cfg.Lease); err != nil {
			return "", err
		}
		if got := crc.Checksum(data); got != c.CRC32C || int64(len(data)) != c.Size {
			return "", &retry.PermanentError{Err: fmt.Errorf("staged chunk %d is corrupt: crc32c %08x, want %08x", c.Ref.N, got, c.CRC32C)}
		}
	}
	s3ctx, cancelS3 := context.WithTimeout(ctx, w.cfg.S3Timeout)
	defer cancelS3()
	if singleObject(c) {
		etag, err := w.s3.PutChunk(s3ctx, c.Bucket, c.Key, c.ContentType, owner(c), data, c.CRC32C)
		return etag, withCause(ctx, err)
	}
	mpu, checksummed := c.MultipartID, c.MultipartChecksummed
	if mpu == "" {
		var err error
		if mpu, checksummed, err = w.createMultipart(s3ctx, c); err != nil {
			return "", withCause(ctx, err)
		}
	}
	etag, err := w.s3.UploadPart(s3ctx, c.Bucket, c.Key, mpu, checksummed, c.Ref.N, data, c.CRC32C)
	return etag, withCause(ctx, err)
}

var errLeaseLost = errors.New("chunk lease lost")

// owner is the upload a claimed chunk's object is written for.
func owner(c uploads.Claim) s3store.Owner {
	return s3store.Owner{UploadID: c.Ref.UploadID, IfAbsent: c.IfAbsent}
}

// singleObject reports whether a claimed chunk is a whole one-chunk upload, stored with
// a single PutObject rather than as a part.
func singleObject(c uploads.Claim) bool { return c.Ref.N == 1 && c.Total == 1 && c.MultipartID == "" }

// multipartDecisionWait is how long a worker keeps asking Redis whose multipart upload
// was recorded before it gives up and aborts its own.
const multipartDecisionWait = 2 * time.Minute

// withCause replaces a cancellation error by its cause (e.g. a lost lease).
func withCause(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
		return fmt.Errorf("%w (%w)", cause, err)
	}
	return err
}

// createMultipart starts the upload's S3 multipart upload. Several workers may race to
// do so; the first recorded id wins and the others abort theirs.
func (w *Worker) createMultipart(ctx context.Context, c uploads.Claim) (id string, checksummed bool, err error) {
	// Counted first: should this process die between creating its multipart upload and
	// recording or aborting it, the completer knows to look for a stray one.
	if err := w.store.NoteMultipartAttempt(ctx, c.Ref.UploadID); err != nil {
		return "", false, fmt.Errorf("count multipart attempt: %w", err)
	}
	mine, mineChecksummed, err := w.s3.CreateMultipart(ctx, c.Bucket, c.Key, c.ContentType, owner(c))
	if err != nil {
		return "", false, err
	}
	// A failed call may still have recorded ours (a timeout after Redis ran the script),
	// so ask until Redis answers (it does after an outage) before deciding whose id it
	// is: aborting ours on a guess could abort the recorded one, and leaving it on a
	// guess leaks it.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), multipartDecisionWait)
	defer cancel()
	var won string
	var ended *staging.StateError
	for n := 1; ; n++ {
		won, checksummed, err = w.store.SetMultipart(rctx, c.Ref.UploadID, mine, mineChecksummed)
		if err == nil || errors.As(err, &ended) || rctx.Err() != nil {
			break
		}
		t := time.NewTimer(retry.Backoff(100*time.Millisecond, 2*time.Second, n))
		select {
		case <-rctx.Done():
		case <-t.C:
		}
	}
	if err == nil && won == mine {
		return mine, checksummed, nil
	}
	if err != nil && !errors.As(err, &ended) {
		// Redis stayed unreachable: ours is most likely not recorded; abort it rather
		// than leak it (if it was recorded, its upload fails and says why).
		w.cfg.Logger.Warn("could not record the multipart upload; aborting it", "upload_id", c.Ref.UploadID, "err", err)
	}
	if abortErr := w.s3.Abort(context.WithoutCancel(ctx), c.Bucket, c.Key, mine); abortErr != nil {
		w.cfg.Logger.Warn("abort surplus multipart upload", "upload_id", c.Ref.UploadID, "err", abortErr)
	}
	return won, checksummed, err
}

// failed handles an upload error: a permanent one fails the whole upload with its
// reason; anything else releases the lease and retries after a backoff.
func (w *Worker) failed(ctx context.Context, c uploads.Claim, err error, log *slog.Logger) {
	var se *staging.StateError
	if errors.As(err, &se) {
		_ = w.store.Drop(ctx, c.Ref)
		return
	}
	if errors.Is(err, errLeaseLost) {
		log.Info("lease lost while uploading", "err", err)
		return
	}
	if s3store.Permanent(err) {
		w.endThenDrop(ctx, c.Ref, s3store.Reason(err), log, "chunk upload failed permanently; failing the upload", "err", err)
		return
	}
	f := w.noteFailure(c.Ref)
	if w.cfg.GiveUpAfter > 0 && w.store.Now().Sub(f.since) >= w.cfg.GiveUpAfter {
		reason := fmt.Sprintf("chunk %d could not be stored in S3 for %s: %v", c.Ref.N, w.cfg.GiveUpAfter, err)
		w.endThenDrop(ctx, c.Ref, reason, log, "giving up on the chunk; failing the upload", "reason", reason)
		w.clearFailures(c.Ref)
		return
	}
	n := f.n
	retryAt := w.store.Now().Add(retry.Backoff(w.cfg.RetryBase, w.cfg.RetryMax, n))
	if ctx.Err() != nil {
		retryAt = time.Time{} // shutting down: let another replica take it at once
	} else {
		// Other workers get the first go at the retry: this one may be the reason it
		// failed (its S3 connection hangs), and an idle worker that dropped a wake-up
		// sweeps at once, so without a margin it would win every retry it failed.
		w.mu.Lock()
		w.notBefore[c.Ref] = retryAt.Add(2 * w.cfg.SweepInterval)
		w.mu.Unlock()
	}
	log.Warn("chunk upload failed; will retry", "err", err, "attempt", n, "retry_at", retryAt)
	w.release(ctx, c, retryAt)
}

// release gives the chunk's lease back (even during shutdown) so it is retried at at,
// or at once when at is zero.
func (w *Worker) release(ctx context.Context, c uploads.Claim, at time.Time) {
	if at.IsZero() {
		at = w.store.Now()
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := w.store.Release(rctx, c.Ref, c.Token, at); err != nil {
		w.cfg.Logger.Warn("release chunk lease", "upload_id", c.Ref.UploadID, "chunk", c.Ref.N, "err", err)
	}
}

// failing is a chunk's run of transient failures.
type failing struct {
	n     int
	since time.Time
}

func (w *Worker) noteFailure(ref staging.ChunkRef) failing {
	w.mu.Lock()
	defer w.mu.Unlock()
	f := w.failures[ref]
	if f.n == 0 {
		f.since = w.store.Now()
	}
	f.n++
	w.failures[ref] = f
	return f
}

func (w *Worker) clearFailures(ref staging.ChunkRef) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.failures, ref)
	delete(w.notBefore, ref)
}

// backingOff reports whether this worker failed ref and its retry is not due yet.
func (w *Worker) backingOff(ref staging.ChunkRef) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	until, ok := w.notBefore[ref]
	if ok && !w.store.Now().Before(until) {
		delete(w.notBefore, ref) // due: forget it, whoever finishes the chunk
		return false
	}
	return ok
}
