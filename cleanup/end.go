// Package cleanup ends uploads and releases what they hold: the staged bytes in Redis
// and the S3 multipart upload. It expires abandoned uploads, runs start-up recovery, and
// is where every other way of ending an upload (abort, permanent failure) releases its
// resources and records its event.
package cleanup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/chunkup/chunkup/events"
	"github.com/chunkup/chunkup/internal/retry"
	"github.com/chunkup/chunkup/s3store"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/uploads"
)

// Objects is the part of the S3 store that releasing an ended upload needs: aborting
// its multipart uploads (the recorded one, and any other left for its key) and deleting
// an object a one-chunk upload wrote.
type Objects interface {
	Abort(ctx context.Context, bucket, key, uploadID string) error
	AbortStrays(ctx context.Context, bucket, key, keep string) ([]string, error)
	Delete(ctx context.Context, bucket, key string) error
}

var _ Objects = (*s3store.Store)(nil)

// Store is the part of the uploads store that ending uploads needs (its Ends view).
type Store interface {
	Now() time.Time
	StateTTL() time.Duration
	Get(ctx context.Context, id string) (*staging.Upload, error)
	End(ctx context.Context, r uploads.EndRequest) (uploads.EndResult, error)
	Released(ctx context.Context, id string) error
	RetryRelease(ctx context.Context, id string, at time.Time) error
	DueReleases(ctx context.Context, limit int64) ([]string, error)
	DueActive(ctx context.Context, limit int64) ([]string, error)
	ActiveUploads(ctx context.Context, start, count int64) ([]string, error)
	Recover(ctx context.Context, id string) error
	DropChunks(ctx context.Context, id string) error
}

var _ Store = (*uploads.Ends)(nil)

// Ender ends uploads.
type Ender struct {
	Store Store
	S3    Objects
	// InstanceID names this process in events.
	InstanceID string
	Logger     *slog.Logger
	// Metrics, when set, counts ended uploads by the status they ended in (see
	// internal/metrics).
	Metrics interface{ UploadEnded(status string) }
}

// End moves upload id to status (FAILED, ABORTED or EXPIRED) with reason and records
// the event that says so, atomically; then it aborts the upload's S3 multipart upload
// and drops its staged chunks. The state change comes first so no worker starts a new
// part afterwards. Releasing resources is best effort: staged bytes also carry a TTL.
func (e *Ender) End(ctx context.Context, id string, status staging.Status, reason string, completer string) error {
	return e.end(ctx, uploads.EndRequest{ID: id, Status: status, Reason: reason, Completer: completer})
}

// FailUnrecorded ends direct upload id as FAILED for reason unless a part of it is
// recorded (uploads.ErrPartsRecorded): another completion, whose report matched what S3
// holds, recorded its parts and completes it.
func (e *Ender) FailUnrecorded(ctx context.Context, id, reason string) error {
	return e.end(ctx, uploads.EndRequest{ID: id, Status: staging.StatusFailed, Reason: reason, Unrecorded: true})
}

// Expire ends upload id as EXPIRED if it has been idle since idleSince or longer; if it
// was active after that it returns a *staging.ActiveError and changes nothing.
func (e *Ender) Expire(ctx context.Context, id string, idleSince time.Time, reason string) error {
	return e.end(ctx, uploads.EndRequest{ID: id, Status: staging.StatusExpired, Reason: reason, IdleSince: idleSince})
}

func (e *Ender) end(ctx context.Context, r uploads.EndRequest) error {
	u, err := e.Store.Get(ctx, r.ID)
	if err != nil {
		return err
	}
	if u.Status.Terminal() {
		return &staging.StateError{Status: u.Status}
	}
	if r.Event, err = events.Ended(u, r.Status, r.Reason, e.InstanceID, e.Store.Now()); err != nil {
		return err
	}
	// The store marks the upload for release first, so a crash or an S3 outage before
	// Released is retried by the cleanup sweep (Release): no multipart upload leaks.
	res, err := e.Store.End(ctx, r)
	if err != nil {
		return err
	}
	if e.Metrics != nil {
		e.Metrics.UploadEnded(string(r.Status))
	}
	log := e.logger().With("upload_id", r.ID, "status", r.Status, "correlation_id", u.CorrelationID)
	if err := e.release(ctx, r.ID, res); err != nil {
		log.Warn("release S3 resources; cleanup will retry", "err", err)
	} else if err := e.Store.Released(ctx, r.ID); err != nil {
		log.Warn("clear release mark", "err", err)
	}
	if err := e.Store.DropChunks(ctx, r.ID); err != nil {
		log.Warn("drop staged chunks", "err", err)
	}
	log.Info("upload ended", "reason", r.Reason)
	return nil
}

// release aborts an ended upload's multipart upload, or deletes the object a one-chunk
// upload already wrote, and then aborts any other multipart upload left for its key: an
// upload that did not complete leaves nothing in S3.
func (e *Ender) release(ctx context.Context, id string, res uploads.EndResult) error {
	if res.MultipartID != "" {
		if err := e.S3.Abort(ctx, res.Bucket, res.Key, res.MultipartID); err != nil {
			return err
		}
	}
	if res.ObjectWritten {
		if err := e.S3.Delete(ctx, res.Bucket, res.Key); err != nil {
			return fmt.Errorf("delete the ended upload's object: %w", err)
		}
	}
	return e.abortStrays(ctx, id, res)
}

// abortStrays aborts every multipart upload S3 still holds for an ended upload's key. A
// worker killed between creating a multipart upload and recording it (or cancelled
// after its request reached S3) leaves one that nothing records. A transient failure is
// returned, so the release is retried; a permanent one (the store does not allow or
// support the listing) is only logged, or the release would be retried for ever.
func (e *Ender) abortStrays(ctx context.Context, id string, res uploads.EndResult) error {
	log := e.logger().With("upload_id", id, "bucket", res.Bucket, "key", res.Key)
	if !s3store.KeyOwnedBy(res.Key, id) {
		// A key the client chose may be another upload's too, whose multipart upload
		// this must not abort.
		log.Debug("not looking for stray multipart uploads under a key the client chose")
		return nil
	}
	aborted, err := e.S3.AbortStrays(ctx, res.Bucket, res.Key, "")
	if len(aborted) > 0 {
		log.Info("aborted stray multipart uploads of an ended upload", "aborted", aborted)
	}
	if err != nil && s3store.Permanent(err) {
		log.Warn("abort stray multipart uploads of an ended upload; giving up", "err", err)
		return nil
	}
	return err
}

// Release retries releasing the S3 resources of ended upload id (see IndexRelease).
// It reports whether the upload needs nothing more.
func (e *Ender) Release(ctx context.Context, id string) (bool, error) {
	u, err := e.Store.Get(ctx, id)
	if errors.Is(err, staging.ErrNotFound) {
		return true, nil // forgotten after retention: nothing left that says what to release
	}
	if err != nil {
		return false, err
	}
	if !u.Status.Terminal() || u.Status == staging.StatusCompleted {
		return true, nil // it did not end (the End was refused) or it completed
	}
	res := uploads.EndResult{MultipartID: u.MultipartID, Bucket: u.Bucket, Key: u.Key,
		ObjectWritten: u.MultipartID == "" && u.Uploaded > 0}
	if err := e.release(ctx, id, res); err != nil {
		return false, err
	}
	return true, nil
}

func (e *Ender) logger() *slog.Logger {
	if e.Logger != nil {
		return e.Logger
	}
	return slog.Default()
}

// ExpirerConfig tunes an Expirer. Zero values mean the documented defaults.
type ExpirerConfig struct {
	// Interval is how often idle uploads are looked for. Zero means 10 s.
	Interval time.Duration
	// Batch is how many candidates one sweep handles. Zero means 100.
	Batch int64
	// ReconcileInterval is how often every active upload is checked for work its
	// indexes lost (see Recover), at start and then periodically: a Redis failover or
	// restart can take away an index entry written moments before, on another node than
	// the state it points at. Zero means 30 s.
	ReconcileInterval time.Duration
	Logger            *slog.Logger
}

// Validate checks the configuration.
func (c ExpirerConfig) Validate() error {
	if c.Interval < 0 || c.Batch < 0 || c.ReconcileInterval < 0 {
		return errors.New("cleanup: settings must not be negative")
	}
	return nil
}

// Expirer expires uploads idle longer than the store's StateTTL, and at start-up
// re-indexes what a crash may have left behind. Several replicas may run one each:
// the atomic end step lets exactly one of them expire a given upload.
type Expirer struct {
	cfg   ExpirerConfig
	store Store
	ender *Ender
}

// NewExpirer returns an Expirer.
func NewExpirer(ender *Ender, cfg ExpirerConfig) (*Expirer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Interval == 0 {
		cfg.Interval = 10 * time.Second
	}
	if cfg.ReconcileInterval == 0 {
		cfg.ReconcileInterval = 30 * time.Second
	}
	if cfg.Batch == 0 {
		cfg.Batch = 100
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Expirer{cfg: cfg, store: ender.Store, ender: ender}, nil
}

// Run recovers, then sweeps every Interval until ctx ends.
func (x *Expirer) Run(ctx context.Context) error {
	var reconciled time.Time
	pace := retry.Pacer{What: "expiring idle uploads", Interval: min(x.cfg.Interval, x.cfg.ReconcileInterval), Logger: x.cfg.Logger}
	for {
		if time.Since(reconciled) >= x.cfg.ReconcileInterval {
			if err := x.Recover(ctx); err != nil && ctx.Err() == nil {
				x.cfg.Logger.Warn("recovering lost index entries", "err", err)
			} else {
				reconciled = time.Now()
			}
		}
		_, err := x.Sweep(ctx)
		if ctx.Err() != nil {
			return nil
		}
		t := time.NewTimer(pace.Next(err))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// Recover walks the active-upload index (an index, not the keyspace) and puts back
// into the work indexes any staged chunk or finished upload a crash or a failover left
// out of them. Run calls it at start and every ReconcileInterval. Leases that expired
// need nothing: the chunks they hold are pending, and the sweeps pick them up.
func (x *Expirer) Recover(ctx context.Context) error {
	n := 0
	for start := int64(0); ; start += 500 {
		ids, err := x.store.ActiveUploads(ctx, start, 500)
		if err != nil {
			return err
		}
		for _, id := range ids {
			if err := x.store.Recover(ctx, id); err != nil {
				return err
			}
		}
		n += len(ids)
		if len(ids) < 500 {
			break
		}
	}
	x.cfg.Logger.Debug("recovered lost index entries", "active_uploads", n)
	return nil
}

// Sweep expires every due upload that has really been idle for StateTTL and reports how
// many it expired.
func (x *Expirer) Sweep(ctx context.Context) (int, error) {
	if err := x.SweepReleases(ctx); err != nil {
		return 0, err
	}
	ids, err := x.store.DueActive(ctx, x.cfg.Batch)
	if err != nil {
		return 0, err
	}
	ttl := x.store.StateTTL()
	expired := 0
	for _, id := range ids {
		// The store re-checks the last activity in the same step, and moves the
		// upload's entry in the active index to when it may next have been idle long
		// enough (or drops it when the upload ended otherwise).
		err := x.ender.Expire(ctx, id, x.store.Now().Add(-ttl), "idle for more than "+ttl.String())
		var active *staging.ActiveError
		var ended *staging.StateError
		switch {
		case err == nil:
			expired++
		case errors.As(err, &active), errors.As(err, &ended), errors.Is(err, staging.ErrNotFound), errors.Is(err, staging.ErrCompleting):
		default:
			return expired, err
		}
	}
	return expired, nil
}

// SweepReleases retries the S3 releases of ended uploads that did not succeed when they
// ended (a crash, S3 unavailable): a failing one is tried again a minute later.
func (x *Expirer) SweepReleases(ctx context.Context) error {
	ids, err := x.store.DueReleases(ctx, x.cfg.Batch)
	if err != nil {
		return err
	}
	for _, id := range ids {
		done, err := x.ender.Release(ctx, id)
		if done {
			err = x.store.Released(ctx, id)
		} else if err != nil {
			x.cfg.Logger.Warn("release S3 resources of an ended upload; will retry", "upload_id", id, "err", err)
			err = x.store.RetryRelease(ctx, id, x.store.Now().Add(time.Minute))
		}
		if err != nil {
			return err
		}
	}
	return nil
}
