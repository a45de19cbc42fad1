package httpdoor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/chunkup/chunkup/internal/crc"
)

// The cutter: how a request body becomes chunks.
//
// A body starts at the upload's durable offset, which is always a chunk boundary (or
// the end of the upload). The cutter reads the body into one chunk buffer and stages
// each chunk as soon as it is whole, so memory is one chunk per request and the offset
// advances as the bytes arrive. Three cases need care:
//
//   - The last chunk of an upload of known size is staged with last set, and only once
//     the body has shown it ends there (a byte beyond the size is an error, and nothing
//     past the size is ever staged).
//   - When the size is unknown and the request says it ends the upload (IETF
//     Upload-Complete: ?1 on a body of unknown length), any whole chunk may be the last:
//     the cutter holds it back until one more byte arrives (then it is not the last) or
//     the body ends (then it is). One byte of look-ahead, no second buffer.
//   - A trailing partial chunk that does not end the upload, and a held-back chunk when
//     the body breaks, are dropped: chunkup stages only whole chunks, so the client sends
//     those bytes again from the offset it is told (at most one chunk).
//
// A body that carries a checksum (Upload-Checksum, Content-Digest) must stage nothing
// if the checksum fails, so its chunks are kept in memory (at most
// Config.MaxChecksumBody) until the body has ended and matched, and staged then.

// appendJob is one request body to append to an upload, under its lock.
type appendJob struct {
	id   string
	held context.Context // from Core.Lock: cancelled when the lock is lost
	up   Upload
	st   summary
	// size is the upload's size as the request leaves it (declared in this request, or
	// known before), -1 when unknown.
	size int64
	// declare is a size to record before the body's chunks (-1: none).
	declare int64
	// ends: the request says its body ends the upload (IETF Upload-Complete: ?1). With
	// a known size the cutter knows the end by itself.
	ends bool
	// checks are verified over the whole body before anything is staged.
	checks []*bodyCheck
	// reprCRC, when set, is the CRC32C the whole upload must have (Repr-Digest); it is
	// checked before the last chunk is staged.
	reprCRC *uint32
	// overflow is the error for a body that goes past the upload's size: 413 for tus,
	// the inconsistent length problem for the IETF protocol.
	overflow error
	// progress, when set, is told each new durable offset (IETF 104 responses).
	progress func(offset int64)
}

// appendResult is what an append achieved; it is valid with or without an error.
type appendResult struct {
	offset   int64
	crc      uint32 // CRC32C of the first offset bytes
	complete bool
	size     int64
}

// action is one change to the upload: a chunk to stage, or a size to declare.
type action struct {
	declare bool
	size    int64
	n       uint32
	data    []byte
	crc     uint32
	last    bool
}

// appendBody cuts r's body into chunks and stages them. It returns what is durable;
// its error, if any, is answered with that offset.
func (h *Handler) appendBody(w http.ResponseWriter, r *http.Request, job *appendJob) (appendResult, error) {
	res := appendResult{offset: job.st.offset, crc: job.st.crc, complete: job.st.complete, size: job.up.Size}
	checked := len(job.checks) > 0
	var queue []action
	var owned [][]byte // buffers handed to the queue (checked bodies)
	defer func() {
		for _, b := range owned {
			h.bufs.put(b)
		}
	}()

	// do stages a chunk or declares the size, and advances the result.
	do := func(a action) error {
		ctx, cancel := context.WithTimeout(job.held, h.cfg.CoreTimeout)
		defer cancel()
		if a.declare {
			if err := h.core.DeclareSize(ctx, job.id, a.size); err != nil {
				return err
			}
			res.size = a.size
			if a.size > 0 && a.size == res.offset {
				res.complete = true // the chunks already received make the upload whole
			}
			return nil
		}
		if a.last && job.reprCRC != nil {
			if whole := crc.Combine(res.crc, a.crc, int64(len(a.data))); whole != *job.reprCRC {
				return &reprDigestError{Offset: res.offset}
			}
		}
		if err := h.core.Stage(ctx, job.id, a.n, a.data, a.crc, a.last); err != nil {
			if job.held.Err() != nil {
				return fmt.Errorf("%w: this request lost the upload's lock while staging chunk %d", ErrLocked, a.n)
			}
			return err
		}
		res.offset += int64(len(a.data))
		res.crc = crc.Combine(res.crc, a.crc, int64(len(a.data)))
		if a.last {
			res.complete = true
			res.size = res.offset
		}
		return nil
	}
	// staged tells the client (IETF 104) the offset a chunk's stage reached. Only this
	// goroutine, the request's, writes to the response.
	staged := func() {
		if job.progress != nil && !res.complete {
			job.progress(res.offset)
		}
	}
	// A chunk's stage runs while the next chunk is read (read-ahead of one chunk, in a
	// second buffer), so the body keeps arriving while Redis takes the chunk before it.
	// Stages stay in order, one at a time: wait collects the one in flight.
	var inflight chan error
	wait := func() error {
		if inflight == nil {
			return nil
		}
		err := <-inflight
		inflight = nil
		if err == nil {
			staged()
		}
		return err
	}
	// emit performs an action: queued until a checksummed body is verified; a chunk
	// that is not the last in the background (async reports whether it did); a size or
	// the last chunk at once.
	emit := func(a action, async bool) error {
		if checked {
			queue = append(queue, a)
			return nil
		}
		if err := wait(); err != nil {
			return err
		}
		if async && !a.declare && !a.last {
			ch := make(chan error, 1)
			inflight = ch
			go func() { ch <- do(a) }()
			return nil
		}
		if err := do(a); err != nil {
			return err
		}
		if !a.declare {
			staged()
		}
		return nil
	}

	if job.declare >= 0 {
		if err := emit(action{declare: true, size: job.declare}, false); err != nil {
			return res, err
		}
	}

	body := h.newBodyReader(w, r, job)
	defer body.close()
	cut := func() (err error) {
		C, S := job.up.ChunkSize, job.size
		if S >= 0 && S == job.st.offset && S > 0 {
			// The size makes the chunks already here the whole upload; the body must
			// be empty.
			if _, err := body.peek(); err == nil {
				return job.overflow
			} else if err != io.EOF {
				return body.interrupted(err)
			}
			return nil
		}
		getBuf := func() ([]byte, error) {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), h.cfg.BufferWait)
			defer cancel()
			return h.bufs.get(ctx, C)
		}
		// buf is filled while spare's chunk, if any, is staged in the background.
		var spare []byte
		buf, err := getBuf()
		if err != nil {
			return err
		}
		defer func() {
			// The stage in flight reads its buffer: it ends before the buffers go back.
			// Its error, if any, came first.
			if werr := wait(); werr != nil {
				err = werr
			}
			for _, b := range [][]byte{buf, spare} {
				if b != nil {
					h.bufs.put(b)
				}
			}
		}()
		n := job.st.next
		start := job.st.offset
		carry, hasCarry := byte(0), false
		// chunk hands buf[:k] to emit; a queued chunk keeps its buffer and the cutter
		// takes a new one.
		chunk := func(k int64, last bool) error {
			a := action{n: n, data: buf[:k], crc: crc.Checksum(buf[:k]), last: last}
			if checked {
				owned = append(owned, buf)
				if buf, err = getBuf(); err != nil {
					buf = nil
					return err
				}
				return emit(a, false)
			}
			if last {
				return emit(a, false)
			}
			if spare == nil {
				// The second buffer, for read-ahead. Without room for it the request goes
				// on one chunk at a time.
				if spare, err = h.bufs.tryGet(C); err != nil {
					return emit(a, false)
				}
			}
			// emit waits for the stage in flight, whose buffer is spare, before it
			// starts this one's: spare is then free to take the next chunk.
			if err := emit(a, true); err != nil {
				return err
			}
			buf, spare = spare, buf
			return nil
		}
		for {
			want := C
			if S >= 0 {
				want = min(C, S-start)
			}
			var k int64
			if hasCarry {
				buf[0], k, hasCarry = carry, 1, false
			}
			got, err := body.fill(buf[k:want])
			k += int64(got)
			switch {
			case err == nil && S >= 0: // a whole chunk of an upload of known size
				last := start+want == S
				if last {
					if _, perr := body.peek(); perr == nil {
						return job.overflow
					} else if perr != io.EOF {
						return body.interrupted(perr)
					}
				}
				if err := chunk(want, last); err != nil || last {
					return err
				}
			case err == nil && job.ends: // a whole chunk that may be the last one
				b, perr := body.peek()
				if perr == io.EOF {
					return chunk(k, true)
				}
				if perr != nil {
					return body.interrupted(perr)
				}
				if err := chunk(k, false); err != nil {
					return err
				}
				carry, hasCarry = b, true
			case err == nil:
				if err := chunk(k, false); err != nil {
					return err
				}
			case err == io.EOF && S < 0 && job.ends:
				if k == 0 && start > 0 {
					// Every chunk arrived whole before this (empty) request: the size is
					// what they hold.
					return emit(action{declare: true, size: start}, false)
				}
				return chunk(k, true)
			case err == io.EOF:
				// The body ended inside a chunk that does not end the upload: those
				// bytes are dropped and sent again.
				if job.ends {
					return fmt.Errorf("%w: the request says it completes the upload but its body ends at byte %d of %d", errLength, start+k, S)
				}
				return nil
			default:
				return body.interrupted(err)
			}
			n++
			start += want
		}
	}
	if err := cut(); err != nil {
		return res, err
	}
	for _, c := range job.checks {
		if !c.ok() {
			return res, &checksumError{Field: c.field, Algorithm: c.name}
		}
	}
	for _, a := range queue {
		if err := do(a); err != nil {
			return res, err
		}
		if !a.declare {
			staged()
		}
	}
	return res, nil
}

// bodyReader reads a request body with an idle deadline, renewed after every read,
// feeds the body's checksums, bounds checksummed bodies, and can be interrupted from
// another goroutine when the upload's lock is lost.
type bodyReader struct {
	body   io.Reader
	rc     *http.ResponseController
	idle   time.Duration
	held   context.Context
	limit  int64 // bytes a checksummed body may have; 0: no limit
	checks []*bodyCheck
	n      int64
	err    error
	stop   func() bool

	h       *Handler // for Drain
	mu      sync.Mutex
	stopped bool
}

func (h *Handler) newBodyReader(w http.ResponseWriter, r *http.Request, job *appendJob) *bodyReader {
	b := &bodyReader{body: r.Body, rc: http.NewResponseController(w), idle: h.cfg.IdleTimeout, held: job.held, checks: job.checks, h: h}
	if len(job.checks) > 0 {
		b.limit = h.cfg.MaxChecksumBody
	}
	b.arm()
	b.stop = context.AfterFunc(job.held, b.interrupt)
	h.bodiesMu.Lock()
	h.bodies[b] = struct{}{}
	h.bodiesMu.Unlock()
	if h.draining() {
		b.interrupt()
	}
	return b
}

// arm pushes the read deadline IdleTimeout ahead, unless the body was interrupted.
// Servers that cannot set deadlines (ErrNotSupported) rely on their own timeouts.
func (b *bodyReader) arm() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.stopped && b.rc != nil {
		_ = b.rc.SetReadDeadline(time.Now().Add(b.idle))
	}
}

// interrupt makes a blocked Read return at once.
func (b *bodyReader) interrupt() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopped = true
	_ = b.rc.SetReadDeadline(time.Now())
}

func (b *bodyReader) close() {
	if b.stop != nil {
		b.stop()
	}
	if b.h != nil {
		b.h.bodiesMu.Lock()
		delete(b.h.bodies, b)
		b.h.bodiesMu.Unlock()
	}
}

func (b *bodyReader) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.body.Read(p)
	b.err = err // sticky: a reader may return data with io.EOF, and fill stops before it
	if n > 0 {
		b.n += int64(n)
		for _, c := range b.checks {
			c.h.Write(p[:n])
		}
		if b.limit > 0 && b.n > b.limit {
			b.err = fmt.Errorf("%w: a request body with a checksum is held in memory until it is verified, so it may have at most %d bytes; send smaller requests", ErrTooLarge, b.limit)
			return n, b.err
		}
		b.arm()
	}
	return n, err
}

// fill reads until p is full or the body ends; io.EOF means the body ended cleanly
// (possibly after some bytes), any other error that it broke.
func (b *bodyReader) fill(p []byte) (int, error) {
	k := 0
	for k < len(p) {
		n, err := b.Read(p[k:])
		k += n
		if k == len(p) {
			return k, nil // a whole chunk; an error with it is seen by the next read
		}
		if err != nil {
			return k, err
		}
	}
	return k, nil
}

// peek reads one byte ahead: nil error means the body goes on with that byte.
func (b *bodyReader) peek() (byte, error) {
	var one [1]byte
	for {
		n, err := b.Read(one[:])
		if n == 1 {
			return one[0], nil
		}
		if err != nil {
			return 0, err
		}
	}
}

// interrupted turns a body read error into the error the request is answered with.
func (b *bodyReader) interrupted(err error) error {
	switch {
	case errors.Is(err, ErrTooLarge):
		return err
	case b.held != nil && b.held.Err() != nil:
		return fmt.Errorf("%w: this request lost the upload's lock; what arrived in whole chunks is stored", ErrLocked)
	case b.h != nil && b.h.draining():
		return fmt.Errorf("%w: it stopped reading after %d bytes; whole chunks are stored, resume from Upload-Offset", errDraining, b.n)
	}
	return fmt.Errorf("%w after %d bytes (%v); whole chunks are stored, resume from Upload-Offset", errInterrupted, b.n, err)
}
