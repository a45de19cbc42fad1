package upload

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/internal/sniff"
	"github.com/chunkup/chunkup/staging"
)

// Chunk is one chunk of an upload, as a door received it.
type Chunk struct {
	UploadID string
	// N numbers it from 1.
	N    uint32
	Data []byte
	// CRC32C, when the client sent one, is checked against Data.
	CRC32C *uint32
	// Last marks the upload's last chunk (needed when its size is unknown).
	Last bool
}

// Taken is what became of a chunk.
type Taken struct {
	// CRC32C is the chunk's checksum.
	CRC32C uint32
	// Stored: the chunk's part is in S3. Duplicate: the same bytes had been received
	// before (a repeat, acknowledged again).
	Stored, Duplicate bool
	// Completed is the upload, when the chunk completed it at once (it was written
	// through as the last part, and this process completed it); nil otherwise.
	Completed *staging.Upload
	// Ready: every part of the upload is in S3 now, so it takes no more chunks (a
	// door may end the stream or request that created it).
	Ready bool
	// RedisCost is what staging it cost Redis (0: not staged there), for
	// SettleStaging.
	RedisCost int64
	// Keep: the chunk's bytes were handed on (to this process's worker) and the door
	// must not reuse them.
	Keep bool
}

// Check checks chunk ch against its upload's parameters p, this server's limits and
// the chunk's own checksum (every check that needs nothing stored), and returns the
// chunk's CRC32C.
func (c *Core) Check(p staging.Params, ch *Chunk) (uint32, error) {
	if p.Final {
		return 0, Explain(ch.UploadID, errFinalChunk)
	}
	sum, err := c.check(p, ch)
	return sum, Explain(ch.UploadID, err)
}

// errFinalChunk refuses a chunk sent on its own to a final upload (tus
// concatenation), whose bytes are its partial uploads' (Check and Take are the gRPC
// door's; the HTTP door's request that creates it appends them with Stage).
var errFinalChunk = invalidf("it is a final upload of tus concatenation: its bytes are its partial uploads', and it takes no chunks of its own")

func (c *Core) check(p staging.Params, ch *Chunk) (uint32, error) {
	n := ch.N
	if p.Direct {
		return 0, invalidf("it is a direct upload: put its parts into S3 with the URLs chunkup signs, and complete it with their ETags")
	}
	if err := ValidateChunk(p, n, int64(len(ch.Data)), ch.Last); err != nil {
		return 0, err
	}
	if limit := c.cfg.MaxUploadSize; limit > 0 && n > 0 && int64(n-1)*p.ChunkSize+int64(len(ch.Data)) > limit {
		return 0, &TooLargeError{Msg: fmt.Sprintf("chunk %d takes the upload past this server's maximum upload size of %d bytes", n, limit)}
	}
	sum := crc.Checksum(ch.Data)
	if ch.CRC32C != nil && *ch.CRC32C != sum {
		return 0, &ChecksumError{N: n, Got: sum, Want: *ch.CRC32C}
	}
	return sum, nil
}

// Take checks chunk ch of an upload with parameters p (read with Params) and writes it
// through to S3, when the core may and S3 keeps pace, or stages it; it returns once
// the chunk is durable. sum, when not nil, is the chunk's CRC32C as Check returned it
// (the chunk was checked already).
func (c *Core) Take(ctx context.Context, p staging.Params, ch *Chunk, sum *uint32) (Taken, error) {
	if p.Final {
		return Taken{}, Explain(ch.UploadID, errFinalChunk)
	}
	var s uint32
	if sum != nil {
		s = *sum
	} else {
		var err error
		if s, err = c.check(p, ch); err != nil {
			return Taken{}, Explain(ch.UploadID, err)
		}
	}
	t, err := c.take(ctx, p, ch, s, true)
	return t, Explain(ch.UploadID, err)
}

// take takes chunk ch, checked (its CRC32C is sum).
func (c *Core) take(ctx context.Context, p staging.Params, ch *Chunk, sum uint32, throughOK bool) (Taken, error) {
	id, n := ch.UploadID, ch.N
	last := ch.Last || (p.Total > 0 && n == p.Total)
	ref := staging.ChunkRef{UploadID: id, N: n}
	t := Taken{CRC32C: sum}

	var handOver func([]byte, uint32)
	if c.through != nil && throughOK {
		w, err := c.through.WriteThrough(ctx, ref, ch.Data, sum, last, c.completer == nil)
		if err != nil {
			t.Keep = w.InUse
			if c.repeatOfHeld(ctx, ch, sum, &t, err) {
				return t, nil
			}
			return t, err
		}
		if w.Stored {
			if c.metrics != nil {
				c.metrics.ChunkWrittenThrough(w.Duplicate)
			}
			t.Stored, t.Duplicate, t.Ready = true, w.Duplicate, w.Ready
			if w.Ready && c.completer != nil {
				var head []byte
				if n == 1 { // the chunk that completed it begins the object
					head = ch.Data[:min(len(ch.Data), sniff.HeadSize)]
				}
				t.Completed = c.completeNow(ctx, id, head)
			}
			return t, nil
		}
		handOver = w.HandOver
	}
	if handOver == nil && c.local != nil {
		handOver = c.local.Expect(ref)
	}
	res, err := c.store.Stage(ctx, id, n, ch.Data, sum, last)
	t.Keep = handOver != nil
	if handOver != nil {
		if err == nil && !res.Duplicate {
			handOver(ch.Data, sum)
		} else {
			handOver(nil, 0)
		}
	}
	if err != nil {
		if c.repeatOfHeld(ctx, ch, sum, &t, err) {
			return t, nil
		}
		return t, err
	}
	if c.metrics != nil {
		c.metrics.ChunkStaged(res.Duplicate)
	}
	if !res.Duplicate {
		t.RedisCost = RedisCost(int64(len(ch.Data)))
	}
	t.Duplicate, t.Stored, t.Ready = res.Duplicate, res.Stored, res.Ready
	return t, nil
}

// repeatOfHeld reports whether chunk ch (with CRC32C sum), which its upload refused
// with err because it is no longer ACTIVE, is a repeat of what the upload holds, and
// then fills t as its acknowledgement. That is when the upload is COMPLETING or
// COMPLETED and holds the same bytes (CRC32C and size) for the chunk: a repeat whose
// first acknowledgement was lost (a client retrying while the completer holds the
// upload, or a one-message upload retried after the server completed it), acknowledged
// again as for any repeated chunk: stored (every part of an upload being completed is
// in S3) and duplicate, with the completed upload once it is COMPLETED. Not for any
// other refusal, other bytes, a chunk the upload does not hold, or is_last on another
// chunk than its last (refused while ACTIVE too): the refusal stands.
func (c *Core) repeatOfHeld(ctx context.Context, ch *Chunk, sum uint32, t *Taken, err error) bool {
	var se *staging.StateError
	if !errors.As(err, &se) || !holdsAll(se.Status) {
		return false
	}
	up, gerr := c.store.Get(ctx, ch.UploadID)
	if gerr != nil || !holdsAll(up.Status) || ch.Last && ch.N != up.Total {
		return false
	}
	for _, info := range up.Chunks {
		if info.N == ch.N {
			if info.CRC32C != sum || info.Size != int64(len(ch.Data)) {
				return false
			}
			t.Stored, t.Duplicate, t.Ready = true, true, true
			if up.Status == staging.StatusCompleted {
				t.Completed = up
			}
			return true
		}
	}
	return false
}

// holdsAll reports whether an upload in status holds every chunk it will ever have:
// it is being completed, or it is.
func holdsAll(status staging.Status) bool {
	return status == staging.StatusCompleting || status == staging.StatusCompleted
}

// completeNow completes upload id in this process, now that a chunk written through
// gave it its last part, and returns it if it is COMPLETED. It returns nil when another
// completer has it, or completing failed (the completion is indexed: the completer
// role retries it).
func (c *Core) completeNow(ctx context.Context, id string, head []byte) *staging.Upload {
	// Not cut short by the stream: the object is final before the acknowledgement.
	ctx = context.WithoutCancel(ctx)
	up, err := c.completer.CompleteUpload(ctx, id, head)
	if err != nil {
		c.cfg.Logger.Warn("complete upload at once; the completer will retry", "upload_id", id, "err", err)
	}
	if up == nil {
		if err != nil {
			return nil
		}
		// Completed before, or by another completer now: say so if it is done.
		if up, err = c.store.Get(ctx, id); err != nil {
			return nil
		}
	}
	if up.Status != staging.StatusCompleted {
		return nil
	}
	return up
}

// Stage stages chunk n of upload id for a door that appends bytes under the upload's
// append lock (see Lock): it waits while Redis is over the staged-bytes budget, checks
// the chunk against the upload (number, size, last, the maximum upload size, crc32c),
// stages it, and returns once it is durable; duplicate says the same bytes had been
// received before. The caller may reuse data as soon as it returns: the in-process
// worker's fast path is handed a copy. Such a door's chunks are always staged, never
// written through: the append lock that fences its request is checked by the stage
// script.
func (c *Core) Stage(ctx context.Context, id string, n uint32, data []byte, sum uint32, last bool) (duplicate bool, err error) {
	duplicate, err = c.stage(ctx, id, n, data, sum, last)
	return duplicate, Explain(id, c.lockLost(ctx, err))
}

func (c *Core) stage(ctx context.Context, id string, n uint32, data []byte, sum uint32, last bool) (bool, error) {
	began := time.Now()
	p, err := c.Params(ctx, id)
	if err != nil {
		return false, err
	}
	if c.local != nil {
		// The fast path keeps the bytes until the worker has uploaded them, after this
		// returns; a gRPC message is the stream's to give away, a door's buffer is not.
		data = bytes.Clone(data)
	}
	cost := RedisCost(int64(len(data)))
	if err := c.budget.reserve(ctx, cost); err != nil {
		return false, err
	}
	ch := &Chunk{UploadID: id, N: n, Data: data, CRC32C: &sum, Last: last}
	checked, err := c.check(p, ch)
	if err != nil {
		c.budget.settle(cost, 0)
		return false, err
	}
	t, err := c.take(ctx, p, ch, checked, false)
	c.budget.settle(cost, t.RedisCost)
	if err != nil {
		return false, err
	}
	if c.metrics != nil {
		c.metrics.ChunkAcked(time.Since(began), int64(len(data)), t.Duplicate)
	}
	return t.Duplicate, nil
}
