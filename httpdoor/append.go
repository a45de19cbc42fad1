package httpdoor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/internal/fault"
)

// The cutter: how a request body becomes chunks.
//
// A body starts at the upload's durable offset: a chunk boundary, or that boundary and
// the upload's tail, which the cutter puts first in its buffer. The cutter reads the body into one chunk buffer and stages
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
//   - A trailing partial chunk that does not end the upload (the body ended, broke, was
//     too slow or was drained) is kept as the upload's tail (Core.SaveTail), and the
//     next request begins its first chunk with it (Core.ReadTail): the offset moves by
//     every byte received, whatever the size of the requests.
//
// A body that carries a checksum (Upload-Checksum, Content-Digest) must stage nothing
// if the checksum fails, so its chunks are kept in memory (at most
// Config.MaxChecksumBody) until the body has ended and matched, and staged then.

// appendJob is one request body to append to an upload, under its lock.
type appendJob struct {
	id string
	// tenant is whose share of the buffer budget the request's buffers count against.
	tenant string
	held   context.Context // from Core.Lock: cancelled when the lock is lost
	up     Upload
	st     summary
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
	// src, when set, is the body instead of the request's: the partial uploads a final
	// upload concatenates, read from the store, to which no client's timeouts apply.
	src io.Reader
}

// appendResult is what an append achieved; it is valid with or without an error.
type appendResult struct {
	offset   int64  // the bytes of the contiguous chunks
	crc      uint32 // CRC32C of the first offset bytes
	complete bool
	size     int64
	// tail and tailCRC are the upload's tail after offset: bytes of the next chunk.
	tail    int64
	tailCRC uint32
}

// durable is the offset the client is told (chunks and tail), and its CRC32C.
func (r appendResult) durable() (int64, uint32) {
	return r.offset + r.tail, crc.Combine(r.crc, r.tailCRC, r.tail)
}

// action is one change to the upload: a chunk to stage, a size to declare, or a tail
// to keep.
type action struct {
	declare bool
	tail    bool
	size    int64
	n       uint32
	data    []byte
	crc     uint32
	last    bool
}

// appendBody cuts r's body into chunks and stages them: a cutter yields the body's
// chunks, a stager makes each durable (keeping one in flight while the next is read).
// It returns what is durable; its error, if any, is answered with that offset.
func (h *Handler) appendBody(w http.ResponseWriter, r *http.Request, job *appendJob) (appendResult, error) {
	st := newStager(h, job)
	defer st.release()
	if job.declare >= 0 {
		if err := st.emit(action{declare: true, size: job.declare}, false); err != nil {
			return st.res, err
		}
	}
	body := h.newBodyReader(w, r, job)
	defer body.close()
	c := &cutter{h: h, job: job, r: r, body: body, st: st}
	if err := c.run(); err != nil {
		return st.res, err
	}
	for _, ck := range job.checks {
		if !ck.ok() {
			return st.res, &checksumError{Field: ck.field, Algorithm: ck.name}
		}
	}
	if err := st.flush(); err != nil {
		return st.res, err
	}
	if job.st.tail.Size > 0 && st.res.tail == 0 {
		// The tail went into a chunk and no new one was kept: drop its bytes now
		// rather than when the upload's keys expire.
		ctx, cancel := context.WithTimeout(job.held, h.cfg.CoreTimeout)
		defer cancel()
		if err := h.core.SaveTail(ctx, job.id, job.st.tail.N, nil); err != nil {
			h.cfg.Logger.Debug("dropping a used tail", "upload", job.id, "err", err)
		}
	}
	return st.res, nil
}

// stager makes a request's actions durable, in order, and keeps what they achieved
// (res). A chunk's stage may run while the cutter reads the next chunk (read-ahead of
// one chunk, in a second buffer), so the body keeps arriving while Redis takes the
// chunk before it; stages stay in order, one at a time. A checksummed body's actions
// are queued until the body is verified (flush). Model: tusd's s3store, whose part
// producer reads while the parts before are uploaded.
type stager struct {
	h       *Handler
	job     *appendJob
	res     appendResult
	checked bool       // the body carries a checksum: queue until verified
	queue   []action   // the actions of a checksummed body
	owned   [][]byte   // buffers handed to the queue
	flight  chan error // the stage in flight, if any
}

func newStager(h *Handler, job *appendJob) *stager {
	return &stager{h: h, job: job, checked: len(job.checks) > 0,
		res: appendResult{offset: job.st.chunkOffset, crc: job.st.chunkCRC, complete: job.st.complete, size: job.up.Size,
			tail: job.st.tail.Size, tailCRC: job.st.tail.CRC32C}}
}

// release gives back the buffers the queue held.
func (s *stager) release() {
	for _, b := range s.owned {
		s.h.bufs.put(s.job.tenant, b)
	}
}

// own keeps buffer b (a queued chunk's) until the stager is released.
func (s *stager) own(b []byte) {
	if b != nil {
		s.owned = append(s.owned, b)
	}
}

// do stages a chunk, keeps a tail or declares the size, and advances the result.
func (s *stager) do(a action) error {
	h, job := s.h, s.job
	ctx, cancel := context.WithTimeout(job.held, h.cfg.CoreTimeout)
	defer cancel()
	if a.declare {
		if err := h.core.DeclareSize(ctx, job.id, a.size); err != nil {
			return err
		}
		s.res.size = a.size
		if a.size > 0 && a.size == s.res.offset {
			s.res.complete = true // the chunks already received make the upload whole
		}
		return nil
	}
	if a.tail {
		if err := h.core.SaveTail(ctx, job.id, a.n, a.data); err != nil {
			return err
		}
		s.res.tail, s.res.tailCRC = int64(len(a.data)), a.crc
		return nil
	}
	if a.last && job.reprCRC != nil {
		if whole := crc.Combine(s.res.crc, a.crc, int64(len(a.data))); whole != *job.reprCRC {
			return &reprDigestError{Offset: s.res.offset}
		}
	}
	if err := h.core.Stage(ctx, job.id, a.n, a.data, a.crc, a.last); err != nil {
		if job.held.Err() != nil {
			return fmt.Errorf("%w: this request lost the upload's lock while staging chunk %d", ErrLocked, a.n)
		}
		return err
	}
	s.res.offset += int64(len(a.data))
	s.res.crc = crc.Combine(s.res.crc, a.crc, int64(len(a.data)))
	if a.n == job.st.tail.N {
		s.res.tail, s.res.tailCRC = 0, 0 // the chunk began with the tail
	}
	if a.last {
		s.res.complete = true
		s.res.size = s.res.offset
	}
	return nil
}

// staged tells the client (IETF 104) the offset a chunk's stage reached. Only the
// request's goroutine writes to the response.
func (s *stager) staged() {
	if s.job.progress != nil && !s.res.complete {
		off, _ := s.res.durable()
		s.job.progress(off)
	}
}

// wait collects the stage in flight, if any.
func (s *stager) wait() error {
	if s.flight == nil {
		return nil
	}
	err := <-s.flight
	s.flight = nil
	if err == nil {
		s.staged()
	}
	return err
}

// emit performs an action: queued until a checksummed body is verified; a chunk that
// is not the last in the background (async reports whether it did); a size or the last
// chunk at once.
func (s *stager) emit(a action, async bool) error {
	if s.checked {
		s.queue = append(s.queue, a)
		return nil
	}
	if err := s.wait(); err != nil {
		return err
	}
	if async && !a.declare && !a.last {
		ch := make(chan error, 1)
		s.flight = ch
		go func() { ch <- s.do(a) }()
		return nil
	}
	if err := s.do(a); err != nil {
		return err
	}
	if !a.declare && !a.tail {
		s.staged()
	}
	return nil
}

// flush performs the queued actions of a verified body.
func (s *stager) flush() error {
	for _, a := range s.queue {
		if err := s.do(a); err != nil {
			return err
		}
		if !a.declare && !a.tail {
			s.staged()
		}
	}
	return nil
}

// cutter reads a request body into the upload's chunks and hands each to the stager as
// soon as it is whole (see the top of this file). Its buffer, cb, grows as the bytes
// come; spare is the second buffer of the read-ahead.
type cutter struct {
	h    *Handler
	job  *appendJob
	r    *http.Request
	body *bodyReader
	st   *stager

	cb    *chunkBuf
	spare []byte
	n     uint32 // the chunk being cut
	start int64  // its offset in the upload
}

// run cuts the whole body.
func (c *cutter) run() (err error) {
	h, job, body := c.h, c.job, c.body
	C, S := job.up.ChunkSize, job.size
	T := job.st.tail.Size // bytes of the first chunk already held as the tail
	if S >= 0 && S == job.st.offset && S > 0 && T == 0 {
		// The size makes the chunks already here the whole upload; the body must be
		// empty.
		if _, err := body.peek(); err == nil {
			return job.overflow
		} else if err != io.EOF {
			return body.interrupted(err)
		}
		return nil
	}
	wait := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(c.r.Context()), h.cfg.BufferWait)
	}
	c.cb = &chunkBuf{b: h.bufs, tenant: job.tenant, size: C, wait: wait}
	defer func() {
		// The stage in flight reads its buffer: it ends before the buffers go back.
		// Its error, if any, came first.
		if werr := c.st.wait(); werr != nil {
			err = werr
		}
		c.cb.free()
		if c.spare != nil {
			h.bufs.put(job.tenant, c.spare)
		}
	}()
	c.n, c.start = job.st.next, job.st.chunkOffset
	carry, hasCarry := byte(0), false
	// The first chunk begins with the tail.
	k0 := T
	if T > 0 {
		if err := c.prefill(T); err != nil {
			return err
		}
	}
	for {
		want, capped := C, false
		if S >= 0 {
			want = min(C, S-c.start)
		} else if m := h.cfg.MaxSize; m > 0 && m-c.start < C {
			// An upload of unknown size ends by the server's maximum at the latest: no
			// byte past it is taken, not even into the tail.
			want, capped = max(0, m-c.start), true
		}
		k := k0
		k0 = 0
		if hasCarry {
			if err := c.cb.ensure(1, 0); err != nil {
				return err
			}
			c.cb.buf[0], k, hasCarry = carry, 1, false
		}
		k, bufErr, err := c.fillTo(k, want)
		if bufErr != nil {
			return bufErr
		}
		if capped && err == nil {
			over := k > want // a byte carried past the maximum
			if !over {
				_, perr := body.peek()
				if perr != nil && perr != io.EOF {
					return c.broken(perr, k)
				}
				over = perr == nil
			}
			if over {
				return fmt.Errorf("%w: the body takes the upload past this server's maximum upload size of %d bytes (its bytes from the last whole chunk on were not kept; Upload-Offset says what was): an upload may have at most %d bytes", ErrTooLarge, h.cfg.MaxSize, h.cfg.MaxSize)
			}
			err = io.EOF // the body ends inside the chunk, as below
		}
		switch {
		case err == nil && S >= 0: // a whole chunk of an upload of known size
			last := c.start+want == S
			if last {
				if _, perr := body.peek(); perr == nil {
					return job.overflow
				} else if perr != io.EOF {
					return body.interrupted(perr)
				}
			}
			if err := c.chunk(want, last); err != nil || last {
				return err
			}
		case err == nil && job.ends: // a whole chunk that may be the last one
			b, perr := body.peek()
			if perr == io.EOF {
				return c.chunk(k, true)
			}
			if perr != nil {
				return body.interrupted(perr)
			}
			if err := c.chunk(k, false); err != nil {
				return err
			}
			carry, hasCarry = b, true
		case err == nil:
			if err := c.chunk(k, false); err != nil {
				return err
			}
		case err == io.EOF && S < 0 && job.ends:
			if k == 0 && c.start > 0 {
				// Every chunk arrived whole before this (empty) request: the size is what
				// they hold.
				return c.st.emit(action{declare: true, size: c.start}, false)
			}
			return c.chunk(k, true)
		case err == io.EOF:
			// The body ended inside a chunk that does not end the upload: those bytes
			// are kept as the tail.
			if job.ends {
				return fmt.Errorf("%w: the request says it completes the upload but its body ends at byte %d of %d", errLength, c.start+k, S)
			}
			return c.keepTail(k)
		default:
			return c.broken(err, k)
		}
		c.n++
		c.start += want
	}
}

// broken ends a body that broke (err) after the first k bytes of the chunk being
// filled: they are kept as the tail, so that the offset counts what arrived (not a
// checksummed body's, which is kept whole or not at all, and not when the lock is lost,
// since nothing could be written then).
func (c *cutter) broken(err error, k int64) error {
	berr := c.body.interrupted(err)
	if !c.st.checked && !fault.Has(berr, fault.Locked) {
		if terr := c.keepTail(k); terr != nil {
			c.h.cfg.Logger.Debug("keeping the bytes of a broken request", "upload", c.job.id, "err", terr)
		}
	}
	return berr
}

// prefill puts the upload's tail, t bytes, at the start of the first chunk.
func (c *cutter) prefill(t int64) error {
	ctx, cancel := context.WithTimeout(c.job.held, c.h.cfg.CoreTimeout)
	data, err := c.h.core.ReadTail(ctx, c.job.id, c.job.st.tail)
	cancel()
	if err != nil {
		return err
	}
	if err := c.cb.ensure(t, 0); err != nil {
		return err
	}
	copy(c.cb.buf, data)
	return nil
}

// fillTo reads the body into the chunk buffer from k until it holds want bytes,
// growing the buffer as the bytes come; bufErr is an error getting memory, err the
// body's.
func (c *cutter) fillTo(k, want int64) (_ int64, bufErr, err error) {
	for k < want {
		if bufErr := c.cb.ensure(k+1, k); bufErr != nil {
			return k, bufErr, nil
		}
		got, err := c.body.fill(c.cb.buf[k:min(want, int64(len(c.cb.buf)))])
		k += int64(got)
		if err != nil {
			return k, nil, err
		}
	}
	return k, nil, nil
}

// keepTail keeps the first k bytes of chunk n, which the body ended (or broke) inside,
// as the upload's tail, so that the offset counts them.
func (c *cutter) keepTail(k int64) error {
	if k == 0 || k == c.job.st.tail.Size && c.n == c.job.st.next {
		return nil // nothing new
	}
	data := c.cb.buf[:k]
	a := action{tail: true, n: c.n, data: data, crc: crc.Checksum(data)}
	if c.st.checked {
		c.st.own(c.cb.take())
	}
	return c.st.emit(a, false)
}

// chunk hands the buffer's first k bytes to the stager; a queued chunk keeps its buffer
// and the cutter grows a new one.
func (c *cutter) chunk(k int64, last bool) error {
	data := c.cb.buf[:k]
	a := action{n: c.n, data: data, crc: crc.Checksum(data), last: last}
	if c.st.checked {
		c.st.own(c.cb.take())
		return c.st.emit(a, false)
	}
	if last {
		return c.st.emit(a, false)
	}
	if c.spare == nil {
		// The second buffer, for read-ahead, only for a body that just filled a chunk.
		// Without room for it the request goes on one chunk at a time.
		var ok bool
		if c.spare, ok = c.h.bufs.tryGet(c.job.tenant, c.job.up.ChunkSize); !ok {
			return c.st.emit(a, false)
		}
	}
	// emit waits for the stage in flight, whose buffer is spare, before it starts this
	// one's: spare is then free to take the next chunk.
	if err := c.st.emit(a, true); err != nil {
		return err
	}
	c.cb.swap(&c.spare)
	return nil
}

// bodyReader reads a request body with an idle deadline and a minimum rate, renewed
// on every read, feeds the body's checksums, bounds checksummed bodies, and can be
// interrupted from another goroutine when the upload's lock is lost.
//
// The minimum rate is a credit of bytes: it starts at rate × window, grows with every
// byte received (up to rate × window again) and drains at rate while the door waits
// for the client; the read deadline is when it would run out. Only time spent waiting
// for the client counts: while the door stages a chunk the clock stops, so backpressure
// is never taken for a slow client.
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

	rate   float64 // bytes per second; 0: no minimum
	window time.Duration
	credit float64   // bytes the body may still be behind the rate by
	last   time.Time // when credit was last brought up to date
	out    time.Time // when the last Read returned (the door's own time starts)

	h       *Handler // for Drain
	mu      sync.Mutex
	stopped bool
	// srcStop stops the read of a body that is no request's (appendJob.src).
	srcStop func()
}

func (h *Handler) newBodyReader(w http.ResponseWriter, r *http.Request, job *appendJob) *bodyReader {
	b := &bodyReader{body: r.Body, rc: http.NewResponseController(w), idle: h.cfg.IdleTimeout, held: job.held, checks: job.checks, h: h}
	if job.src != nil {
		b.body, b.rc = job.src, nil
		if c, ok := job.src.(io.Closer); ok {
			b.srcStop = func() { _ = c.Close() }
		}
	}
	if len(job.checks) > 0 {
		b.limit = h.cfg.MaxChecksumBody
	}
	if h.cfg.MinBodyRate > 0 && job.src == nil {
		b.rate, b.window = float64(h.cfg.MinBodyRate), h.cfg.MinBodyRateWindow
		b.credit = b.rate * b.window.Seconds()
	}
	b.last = time.Now()
	b.arm(b.last)
	b.stop = context.AfterFunc(job.held, b.interrupt)
	h.bodiesMu.Lock()
	h.bodies[b] = struct{}{}
	h.bodiesMu.Unlock()
	if h.draining() {
		b.interrupt()
	}
	return b
}

// deadlines returns when the body times out if nothing arrives from now on, and
// whether that is the minimum rate's deadline (rather than the idle timeout's).
func (b *bodyReader) deadline(now time.Time) (time.Time, bool) {
	idle := now.Add(b.idle)
	if b.rate <= 0 {
		return idle, false
	}
	left := b.credit - b.rate*now.Sub(b.last).Seconds()
	slow := now.Add(time.Duration(max(left, 0) / b.rate * float64(time.Second)))
	if slow.Before(idle) {
		return slow, true
	}
	return idle, false
}

// arm sets the read deadline for a read starting now, unless the body was
// interrupted. Servers that cannot set deadlines (ErrNotSupported) rely on their own
// timeouts.
func (b *bodyReader) arm(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.stopped && b.rc != nil {
		d, _ := b.deadline(now)
		_ = b.rc.SetReadDeadline(d)
	}
}

// interrupt makes a blocked Read return at once.
func (b *bodyReader) interrupt() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopped = true
	if b.rc != nil {
		_ = b.rc.SetReadDeadline(time.Now())
	} else if b.srcStop != nil {
		b.srcStop()
	}
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
	now := time.Now()
	if !b.out.IsZero() {
		b.last = b.last.Add(now.Sub(b.out)) // the door's own time is not the client's
	}
	b.arm(now)
	n, err := b.body.Read(p)
	now = time.Now()
	b.out = now
	b.err = err // sticky: a reader may return data with io.EOF, and fill stops before it
	if b.rate > 0 {
		if err != nil && n == 0 && isTimeout(err) && !b.isStopped() {
			// The rate's deadline, not the idle timeout's, if the credit ran out (within
			// the timer's slack).
			if b.credit-b.rate*now.Sub(b.last).Seconds() <= b.rate/10 {
				b.err = fmt.Errorf("%w: its body arrived slower than %d bytes per second over %s%s", errTooSlow, int64(b.rate), b.window, ResumeAdvice)
				return 0, b.err
			}
		}
		b.credit = min(b.rate*b.window.Seconds(), b.credit-b.rate*now.Sub(b.last).Seconds()+float64(n))
		b.last = now
	}
	if n > 0 {
		b.n += int64(n)
		for _, c := range b.checks {
			c.h.Write(p[:n])
		}
		if b.limit > 0 && b.n > b.limit {
			b.err = fmt.Errorf("%w: a request body with a checksum is held in memory until it is verified, so it may have at most %d bytes; send smaller requests", ErrTooLarge, b.limit)
			return n, b.err
		}
	}
	return n, err
}

func (b *bodyReader) isStopped() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stopped
}

// isTimeout reports whether err is a read deadline's.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
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
	case b.rc == nil && fault.Has(err, fault.DataLoss):
		// The partials of a final upload, read from the store: one came back
		// different from what it was completed with.
		return fault.Wrap(err, fault.DataLoss, fmt.Sprintf("the final upload could not be assembled from its partial uploads (%v); it was not created", err))
	case b.rc == nil:
		// Their read broke, or was stopped (a drain, a lost lock).
		return fault.Wrap(err, fault.Unavailable, fmt.Sprintf("the final upload could not be assembled from its partial uploads (%v); it was not created: create it again", err))
	case fault.Has(err, fault.TooLarge), errors.Is(err, errTooSlow):
		return err
	case b.held != nil && b.held.Err() != nil:
		return fmt.Errorf("%w: this request lost the upload's lock; what arrived in whole chunks is stored", ErrLocked)
	case b.h != nil && b.h.draining():
		return fmt.Errorf("%w: it stopped reading after %d bytes%s", errDraining, b.n, ResumeAdvice)
	}
	return fmt.Errorf("%w after %d bytes (%v)%s", errInterrupted, b.n, err, ResumeAdvice)
}
