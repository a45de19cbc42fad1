package chunkworker

import (
	"context"
	"sync"
	"time"

	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/uploads"
)

// Write-through is the other half of adaptive staging (the API decides when to try it,
// see server.Config.Staging): while this worker has a free upload slot and S3 keeps
// pace, a chunk the API has just received goes to S3 as its part (or object) straight
// from the API's memory, and the API acknowledges it once the part is recorded; Redis
// never holds its bytes. When S3 is behind — every slot busy, or parts slower than
// SlowPart — chunks are staged in Redis and acknowledged at once, and this worker drains
// them. Both ways meet at the same records (see uploads.Chunks.BeginThrough).

// refPartSize is the part size SlowPart is stated for: a larger part may take
// proportionally longer before it counts as slow.
const refPartSize = 8 << 20

// Through is what WriteThrough did with a chunk.
type Through struct {
	// Stored: the chunk is in S3 and recorded as received and stored: acknowledge it.
	Stored bool
	// Duplicate: the same bytes had been recorded meanwhile (a repeat on another
	// stream, uploaded by a worker); nothing was recorded twice.
	Duplicate bool
	// Ready: the upload now has every part; its completion is indexed.
	Ready bool
	// HandOver is set when the chunk is not stored but its part upload is under way
	// (S3 was slower than SlowPart): the caller stages the chunk, then calls HandOver,
	// as it would Expect's function, with the chunk's bytes if they were staged (nil if
	// not); the part is recorded once its upload ends, like any staged chunk's. When
	// Stored is false and HandOver nil, the caller stages the chunk the ordinary way.
	HandOver func(data []byte, crc uint32)
	// InUse: an upload still reads the chunk's bytes (with HandOver, or when ctx ended
	// during the upload); the caller must not reuse them.
	InUse bool
}

// WriteThrough tries to store chunk ref (data, with CRC32C sum; last when it is the
// upload's last chunk) in S3 now. It does so only when S3 keeps pace, a slot is free
// within SlowPart (what the chunk waits and its part takes together), and the chunk is
// new to its upload (a repeat or a replacement is staged, as the stage script's rules
// decide); otherwise it returns with nothing stored. With wake,
// an upload the chunk makes ready is handed to the in-process completer; without, the
// caller completes it itself (its completion is indexed either way). An error is the
// upload's refusal of the chunk (as Stage would report it) or Redis failing.
//
// data must stay unchanged until HandOver (if returned) has been called and the part
// upload it continues has ended; otherwise until WriteThrough returns.
func (w *Worker) WriteThrough(ctx context.Context, ref staging.ChunkRef, data []byte, sum uint32, last, wake bool) (Through, error) {
	bg := w.running()
	if bg == nil || w.pace.behind() {
		return Through{}, nil
	}
	// The chunk may wait for a slot, but only as long as its part may take: a slot that
	// is not free by then means S3 is behind the chunks coming in.
	began := time.Now()
	deadline := began.Add(slowAfter(w.cfg.SlowPart, int64(len(data))))
	if !w.trySlot() {
		wait := time.NewTimer(time.Until(deadline))
		select {
		case w.slots <- struct{}{}:
			wait.Stop()
		case <-wait.C:
			return Through{}, nil
		case <-ctx.Done():
			wait.Stop()
			return Through{}, ctx.Err()
		}
	}
	token := ids.NewToken()
	t, err := w.store.BeginThrough(ctx, ref, token, sum, int64(len(data)), last, w.cfg.Lease)
	if err != nil || !t.Begun {
		w.freeSlot()
		return Through{}, err
	}
	c := t.Claim
	done := make(chan partResult, 1)
	go func() {
		etag, err := w.upload(bg, c, &localChunk{ref: ref, data: data, crc: sum}, false)
		done <- partResult{etag, err}
	}()
	timer := time.NewTimer(max(time.Until(deadline), 0))
	defer timer.Stop()
	select {
	case r := <-done:
		w.freeSlot()
		took := time.Since(began)
		w.pace.note(took, c.Size, r.err)
		if r.err != nil {
			w.cfg.Logger.Info("write-through failed; staging the chunk instead", "upload_id", ref.UploadID, "chunk", ref.N, "err", r.err)
			w.releaseThrough(bg, c)
			return Through{}, nil
		}
		outcome, ready, err := w.store.RecordThrough(ctx, ref, token, r.etag, sum, c.Size, last, wake)
		if err != nil {
			w.releaseThrough(bg, c)
			return Through{}, err
		}
		switch outcome {
		case uploads.ThroughRecorded:
			if w.cfg.Metrics != nil {
				w.cfg.Metrics.PartUploaded(took)
			}
			return Through{Stored: true, Ready: ready}, nil
		case uploads.ThroughDuplicate:
			return Through{Stored: true, Duplicate: true, Ready: ready}, nil
		}
		return Through{}, nil // lost or stale: other bytes or another worker; Stage decides
	case <-timer.C:
		// S3 is behind: the chunk is staged and acknowledged now, its upload goes on.
		w.expected.Store(ref, struct{}{}) // its wake-up is not for this worker's claims
		return Through{HandOver: w.continueThrough(bg, c, done, began), InUse: true}, nil
	case <-ctx.Done():
		// The stream ended; nobody was told the chunk is stored. Let its upload end.
		go func() {
			r := <-done
			w.freeSlot()
			w.pace.note(time.Since(began), c.Size, r.err)
			w.releaseThrough(bg, c)
		}()
		return Through{InUse: true}, ctx.Err()
	}
}

type partResult struct {
	etag string
	err  error
}

// continueThrough is the HandOver of a write-through whose part upload outlasted
// SlowPart: once the chunk is staged (data not nil), the upload's end is handled as a
// worker's would be (the part recorded, or the lease released for a retry from Redis).
func (w *Worker) continueThrough(bg context.Context, c uploads.Claim, done <-chan partResult, began time.Time) func([]byte, uint32) {
	var once sync.Once
	return func(staged []byte, _ uint32) {
		once.Do(func() {
			if staged != nil {
				// Staged now, and due for sweeps after the stage's grace: keep sweepers off
				// it while the upload runs, as for a claimed chunk.
				_ = w.store.Hold(bg, c.Ref, w.cfg.Lease)
			}
			go func() {
				defer w.expected.Delete(c.Ref)
				defer w.busy.Work() // finishPart may set a retry's due time, as process does
				r := <-done
				w.freeSlot()
				took := time.Since(began)
				w.pace.note(took, c.Size, r.err)
				if staged == nil {
					// Not staged (the stage failed): the client was not acknowledged and
					// sends the chunk again; the part, if any, is overwritten then.
					w.releaseThrough(bg, c)
					return
				}
				w.finishPart(bg, c, r.etag, r.err, took, w.cfg.Logger.With("upload_id", c.Ref.UploadID, "chunk", c.Ref.N))
			}()
		})
	}
}

// releaseThrough gives a write-through's lease back, even when ctx has ended.
func (w *Worker) releaseThrough(ctx context.Context, c uploads.Claim) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := w.store.ReleaseThrough(rctx, c.Ref, c.Token); err != nil {
		w.cfg.Logger.Warn("release write-through lease", "upload_id", c.Ref.UploadID, "chunk", c.Ref.N, "err", err)
	}
}

// slowAfter is how long a part of size bytes may take before S3 counts as behind.
func slowAfter(slow time.Duration, size int64) time.Duration {
	if size <= refPartSize {
		return slow
	}
	return time.Duration(float64(slow) * float64(size) / refPartSize)
}

// pace follows how long this process's part uploads take, to tell whether S3 keeps
// pace: a moving average of recent parts (normalized to an 8 MiB part, a failure
// counting as twice the threshold) over SlowPart means it does not. A reading older
// than ten thresholds is forgotten, so that a burst of slow parts long ago does not keep
// the process staging.
type pace struct {
	slow time.Duration
	now  func() time.Time

	mu   sync.Mutex
	avg  float64 // seconds per reference part
	last time.Time
}

func (p *pace) note(took time.Duration, size int64, err error) {
	d := took
	if size > refPartSize {
		d = time.Duration(float64(took) * refPartSize / float64(size))
	}
	if err != nil {
		d = max(d, 2*p.slow)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last.IsZero() || p.now().Sub(p.last) > 10*p.slow {
		p.avg = d.Seconds()
	} else {
		p.avg = 0.7*p.avg + 0.3*d.Seconds()
	}
	p.last = p.now()
}

// behind reports whether recent parts were slower than the threshold.
func (p *pace) behind() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last.IsZero() || p.now().Sub(p.last) > 10*p.slow {
		return false
	}
	return p.avg > p.slow.Seconds()
}

// trySlot takes an upload slot if one is free.
func (w *Worker) trySlot() bool {
	select {
	case w.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

// takeSlot waits for an upload slot.
func (w *Worker) takeSlot(ctx context.Context) bool {
	select {
	case w.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (w *Worker) freeSlot() { <-w.slots }

// running is the context of in-flight work while Run runs, else nil: write-through
// needs a running worker (its uploads drain on shutdown as the worker's do).
func (w *Worker) running() context.Context {
	if p := w.bg.Load(); p != nil {
		return *p
	}
	return nil
}
