package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/status"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/fault"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/upload"
)

// streamInflight is how many chunks of one stream are worked on at once. A chunk
// written through to S3 takes a part upload's time, so one at a time would make a
// client's window of unacknowledged chunks useless; the receive memory cap bounds
// what all of them hold.
const streamInflight = 8

// IdleError closes a stream on which nothing happened for StreamIdleTimeout.
type IdleError struct{ Idle time.Duration }

func (e *IdleError) Error() string {
	return fmt.Sprintf("stream closed after %s without a chunk; the upload stays resumable: GetUpload lists the chunks the server holds, send the others on a new stream", e.Idle.Round(time.Second))
}

// Kind implements fault's kinded errors.
func (e *IdleError) Kind() fault.Kind { return fault.Deadline }

// UploadChunk implements UploadService.UploadChunk. Each chunk is validated against
// the upload's parameters, checked against its CRC32C, written through to S3 or staged,
// and acknowledged. A stream's chunks are worked on concurrently, so acknowledgements
// may come in another order than the chunks. The first invalid chunk ends the stream
// with its status; chunks acknowledged before it stay.
func (s *UploadService) UploadChunk(stream chunkupv1.UploadService_UploadChunkServer) error {
	release, err := s.core.OpenStream(stream.Context())
	if err != nil {
		return toStatus("", err)
	}
	ctx, cancel := context.WithCancelCause(stream.Context())
	defer cancel(nil)
	cs := &chunkStream{s: s, stream: stream, ctx: ctx, cancel: cancel, params: map[string]staging.Params{},
		slots: make(chan struct{}, streamInflight), tenant: upload.TenantFrom(stream.Context()),
		place: &streamPlace{release: release}, done: make(chan struct{})}
	defer cs.place.end()
	cs.expect.Store(s.core.Config().ChunkSize)
	cs.touch()
	return cs.run()
}

// streamPlace is a stream's count against the tenant's stream caps.
type streamPlace struct {
	mu      sync.Mutex
	release func()
	moved   bool
}

// finishing moves the count to the tenant's finishing streams, if they have room.
func (p *streamPlace) finishing(ctx context.Context, core Core) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.moved && p.release != nil {
		p.release, p.moved = core.FinishingStream(ctx, p.release)
	}
}

// end ends the count.
func (p *streamPlace) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.release != nil {
		p.release()
		p.release = nil
	}
}

// chunkStream is one UploadChunk stream.
type chunkStream struct {
	s      *UploadService
	stream chunkupv1.UploadService_UploadChunkServer
	ctx    context.Context
	cancel context.CancelCauseFunc
	tenant string // the caller's, whose share of receive memory the stream uses

	sendMu sync.Mutex

	paramsMu sync.Mutex
	params   map[string]staging.Params // immutable per upload, read once per stream
	created  string                    // the upload a create request on this stream made

	// place is the stream's count under the tenant's stream cap. done is closed once
	// the upload the stream created has all its parts and the acknowledgement that
	// says so is sent: the stream ends then, without reading the client's end of it.
	place    *streamPlace
	done     chan struct{}
	doneOnce sync.Once

	inflight sync.WaitGroup
	slots    chan struct{} // chunks being worked on
	active   atomic.Int32
	// waiting is true while the receiver waits for the client's next message (not for
	// the budget or memory): the only time the stream can be idle.
	waiting atomic.Bool
	last    atomic.Int64 // unix ns of the last message or acknowledgement
	// expect is the size of the stream's chunks (its last one), for the budget
	// reservation of its next read.
	expect atomic.Int64

	failOnce sync.Once
	failErr  error
}

// message is a received request with what it holds under the limits.
type message struct {
	req    *chunkupv1.UploadChunkRequest
	memory int64 // under the receive memory cap
	budget int64 // reserved under the staged-bytes budget
	// checked: the chunk a create carried was checked before the create (checkChunk),
	// and its CRC32C is sum.
	checked bool
	sum     uint32
}

func (cs *chunkStream) touch() { cs.last.Store(time.Now().UnixNano()) }

// fail ends the stream with err (the first failure wins) and cancels its other work.
func (cs *chunkStream) fail(err error) {
	if err == nil {
		return
	}
	cs.failOnce.Do(func() {
		cs.failErr = err
		cs.cancel(err)
	})
}

func (cs *chunkStream) send(r *chunkupv1.UploadChunkResponse) error {
	cs.sendMu.Lock()
	defer cs.sendMu.Unlock()
	cs.touch()
	return cs.stream.Send(r)
}

// release gives back what m holds: its memory, and its budget reservation (staged is
// what staging it cost Redis, 0 when it was not staged there).
func (cs *chunkStream) release(m message, staged int64) {
	cs.s.memory.release(cs.tenant, m.memory)
	cs.s.core.SettleStaging(m.budget, staged)
}

func (cs *chunkStream) run() error {
	msgs := make(chan message)
	recvErr := make(chan error, 1)
	go cs.receive(msgs, recvErr)

	idleAfter := cs.s.cfg.StreamIdleTimeout
	var idleTimer *time.Timer
	var idle <-chan time.Time
	if idleAfter > 0 {
		idleTimer = time.NewTimer(idleAfter)
		defer idleTimer.Stop()
		idle = idleTimer.C
	}
	first := true
	for {
		select {
		case <-cs.s.draining:
			return cs.finish(toStatus("", upload.ErrDraining))
		case <-cs.ctx.Done():
			return cs.finish(nil)
		case <-cs.done:
			return cs.finish(nil)
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return cs.finish(nil)
			}
			return cs.finish(toStatus("", err))
		case <-idle:
			// Idle means the client sent nothing and has nothing to wait for: the receiver
			// waits for its next message and no chunk is being worked on.
			since := time.Since(time.Unix(0, cs.last.Load()))
			if cs.waiting.Load() && cs.active.Load() == 0 && since >= idleAfter {
				return cs.finish(toStatus("", &IdleError{Idle: idleAfter}))
			}
			idleTimer.Reset(max(idleAfter-since, idleAfter/8))
		case m := <-msgs:
			if err := cs.handle(m, first); err != nil {
				return cs.finish(err)
			}
			first = false
		}
	}
}

// finish waits for the chunks being worked on (their acknowledgements go out first),
// and returns the stream's status: the first chunk's failure, else err, else the
// context's end (nil after the client's last message).
func (cs *chunkStream) finish(err error) error {
	cs.inflight.Wait()
	cs.fail(err)   // keeps an earlier chunk's failure
	cs.cancel(nil) // the receiver stops; a message it holds is released
	if cs.failErr != nil {
		return cs.failErr
	}
	if err := cs.stream.Context().Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	return nil
}

// receive reads the stream's messages, each only once the limits have room for it:
// first the staged-bytes budget's reservation for a chunk of the stream's size (not
// reading while Redis is over its budget makes gRPC's flow control hold the client
// back), then the receive memory cap's for the largest message there may be.
func (cs *chunkStream) receive(msgs chan<- message, recvErr chan<- error) {
	s := cs.s
	largest := int64(s.cfg.MaxMessageSize())
	for {
		var want int64
		if s.core.Budgeted() {
			want = upload.RedisCost(cs.expect.Load())
			if err := s.core.ReserveStaging(cs.ctx, want); err != nil {
				recvErr <- err
				return
			}
		}
		if err := s.memory.reserve(cs.ctx, cs.tenant, largest); err != nil {
			s.core.SettleStaging(want, 0)
			recvErr <- err
			return
		}
		cs.waiting.Store(true)
		req, err := cs.stream.Recv()
		cs.waiting.Store(false)
		if err != nil {
			s.memory.release(cs.tenant, largest)
			s.core.SettleStaging(want, 0)
			recvErr <- err
			return
		}
		cs.touch()
		size := int64(len(req.Data))
		// What the message holds is its buffer's capacity (chunkCodec: at most a quarter
		// over its length, and at most the largest message).
		m := message{req: req, memory: int64(cap(req.Data)) + 1<<10, budget: want}
		s.memory.release(cs.tenant, largest-m.memory)
		if size > 0 && !req.IsLast {
			cs.expect.Store(size)
		}
		if s.core.Budgeted() {
			// A chunk larger than reserved for waits for the rest before it can be staged;
			// one smaller gives the difference back at once.
			if cost := upload.RedisCost(size); cost > want {
				if err := s.core.ReserveStaging(cs.ctx, cost-want); err != nil {
					cs.release(m, 0)
					recvErr <- err
					return
				}
				m.budget = cost
			} else {
				s.core.SettleStaging(want-cost, 0)
				m.budget = cost
			}
		}
		select {
		case msgs <- m:
		case <-cs.ctx.Done():
			cs.release(m, 0)
			chunkBuffers.Put(req.Data)
			return
		}
	}
}

// handle takes one message: a create is made at once, a chunk is worked on in a
// goroutine of its own (at most streamInflight at a time).
func (cs *chunkStream) handle(m message, first bool) error {
	req := m.req
	switch {
	case req.Create != nil:
		if err := cs.createOnStream(&m, first); err != nil {
			cs.release(m, 0)
			return err
		}
		if req.ChunkNumber == 0 && len(req.Data) == 0 {
			cs.release(m, 0)
			return nil
		}
	case cs.created != "" && req.UploadId == "":
		req.UploadId = cs.created
	case cs.created != "" && req.UploadId != cs.created:
		cs.release(m, 0)
		return toStatus(cs.created, invalidf("this stream created upload %s and carries only its chunks; send chunks of upload %s on a stream of their own", cs.created, quote(req.UploadId)))
	}
	select {
	case cs.slots <- struct{}{}:
	case <-cs.ctx.Done():
		cs.release(m, 0)
		return nil
	}
	cs.inflight.Add(1)
	cs.active.Add(1)
	go func() {
		defer cs.inflight.Done()
		defer func() { <-cs.slots }()
		defer cs.active.Add(-1)
		r, err := cs.chunk(m)
		cs.release(m, r.redisCost)
		if !r.keep {
			chunkBuffers.Put(req.Data)
		}
		if err != nil {
			cs.fail(toStatus(req.UploadId, err))
			return
		}
		// The upload this stream created has all its parts: the stream has nothing
		// more to carry. Before the acknowledgement, its count moves from the tenant's
		// open streams to its finishing ones (Core.FinishingStream), so a client that
		// opens its next stream on reading it is not refused; and the stream ends
		// without waiting for the client's end of it (a client that never closes its
		// side would hold the stream until the idle timeout).
		ended := r.ready && cs.created != "" && req.UploadId == cs.created
		if ended {
			cs.place.finishing(cs.ctx, cs.s.core)
		}
		if err := cs.send(r.resp); err != nil {
			cs.fail(err)
		}
		if ended {
			cs.doneOnce.Do(func() { close(cs.done) })
		}
	}()
	return nil
}

// createOnStream handles a create request on a stream: it must be the stream's first
// message; the response carries the new upload, and the message then names it. A chunk
// in the same message is checked first, against the upload the create would make: a
// message refused as a whole creates nothing.
func (cs *chunkStream) createOnStream(m *message, first bool) error {
	req := m.req
	if !first {
		return toStatus("", invalidf("create is allowed only in the first message of a stream"))
	}
	if req.UploadId != "" {
		return toStatus("", invalidf("a message with create must not name an upload_id"))
	}
	if req.Create.Direct {
		return toStatus("", invalidf("a direct upload takes no chunks from a stream: create it with CreateUpload, then put its parts into S3 with the URLs SignParts gives"))
	}
	cr, err := createRequest(cs.ctx, req.Create)
	if err != nil {
		return toStatus("", err)
	}
	p, err := cs.s.core.Plan(cr)
	if err != nil {
		return toStatus("", err)
	}
	if req.ChunkNumber != 0 || len(req.Data) > 0 || req.IsLast || req.Crc32C != nil {
		if m.sum, err = cs.s.core.Check(p, chunkOf(req)); err != nil {
			return toStatus("", fault.Wrap(err, fault.KindOf(err), err.Error()+"; nothing was created (a create and the chunk it carries are refused together)"))
		}
		m.checked = true
	}
	created, err := cs.s.core.CreatePlanned(cs.ctx, cr, p)
	if err != nil {
		return toStatus("", err)
	}
	up := toProto(created)
	if err := cs.send(&chunkupv1.UploadChunkResponse{UploadId: up.UploadId, Upload: up}); err != nil {
		return err
	}
	req.UploadId, cs.created = up.UploadId, up.UploadId
	// The upload as made (a repeated create returns the one it made before).
	p = staging.Params{ChunkSize: up.ChunkSize, ExpectedSize: up.ExpectedSize, Total: up.TotalChunks, Tenant: up.Tenant}
	if p.ExpectedSize >= 0 {
		p.Total = staging.TotalChunks(p.ExpectedSize, p.ChunkSize)
	}
	cs.paramsMu.Lock()
	cs.params[up.UploadId] = p
	cs.paramsMu.Unlock()
	return nil
}

// paramsFor reads upload id's parameters once per stream, for its caller's tenant.
func (cs *chunkStream) paramsFor(id string) (staging.Params, error) {
	cs.paramsMu.Lock()
	p, ok := cs.params[id]
	cs.paramsMu.Unlock()
	if ok {
		return p, nil
	}
	p, err := cs.s.core.Params(cs.ctx, id)
	if err != nil {
		return staging.Params{}, err
	}
	cs.paramsMu.Lock()
	if len(cs.params) > 64 {
		clear(cs.params)
	}
	cs.params[id] = p
	cs.paramsMu.Unlock()
	return p, nil
}

// chunkResult is what became of a chunk.
type chunkResult struct {
	resp *chunkupv1.UploadChunkResponse
	// redisCost is what staging it cost Redis (0: not staged there).
	redisCost int64
	// keep: the bytes were handed on (to this process's worker) and must not be reused.
	keep bool
	// ready: the upload has all its parts (upload.Taken.Ready).
	ready bool
}

// chunkOf is the core's chunk for req.
func chunkOf(req *chunkupv1.UploadChunkRequest) *upload.Chunk {
	return &upload.Chunk{UploadID: req.UploadId, N: req.ChunkNumber, Data: req.Data, CRC32C: req.Crc32C, Last: req.IsLast}
}

// chunk hands a chunk to the core, which checks it and writes it through to S3 or
// stages it.
func (cs *chunkStream) chunk(m message) (chunkResult, error) {
	req := m.req
	if req.UploadId == "" {
		return chunkResult{}, invalidf("upload_id is required: create an upload first, or send a create request in the first message")
	}
	p, err := cs.paramsFor(req.UploadId)
	if err != nil {
		return chunkResult{}, err
	}
	var sum *uint32
	if m.checked {
		sum = &m.sum
	}
	t, err := cs.s.core.Take(cs.ctx, p, chunkOf(req), sum)
	r := chunkResult{redisCost: t.RedisCost, keep: t.Keep, ready: t.Ready}
	if err != nil {
		return r, err
	}
	r.resp = &chunkupv1.UploadChunkResponse{UploadId: req.UploadId, ChunkNumber: req.ChunkNumber, Crc32C: t.CRC32C,
		Stored: t.Stored, Duplicate: t.Duplicate}
	if t.Completed != nil {
		r.resp.Completed = toProto(t.Completed)
	}
	return r, nil
}
