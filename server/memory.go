package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/chunkup/chunkup/internal/fault"
)

// MemoryError means the bytes of chunk messages this process holds stayed at their cap
// (Config.MaxReceiveMemory) for longer than a stream waits; the client should retry
// later.
type MemoryError struct {
	Limit  int64
	Waited time.Duration
	// Tenant: the limit was the tenant's share (Config.MaxReceiveMemoryPerTenant).
	Tenant bool
}

func (e *MemoryError) Error() string {
	if e.Tenant {
		return fmt.Sprintf("this tenant's streams hold its share of %d bytes reserved for chunks being received or awaited (a stream waiting for its next message reserves the largest one) and there was no room for this stream's next chunk within %s; close idle streams, or retry later", e.Limit, e.Waited)
	}
	return fmt.Sprintf("this server holds its limit of %d bytes reserved for chunks being received or awaited (a stream waiting for its next message reserves the largest one) and had no room for this stream's next chunk within %s; retry later", e.Limit, e.Waited)
}

// Kind implements fault's kinded errors.
func (e *MemoryError) Kind() fault.Kind { return fault.Overloaded }

// RetryAfter is the delay a client should wait.
func (e *MemoryError) RetryAfter() time.Duration { return time.Second }

// memoryGate caps the bytes held in chunk messages being received or processed by this
// process (Config.MaxReceiveMemory). A stream reserves the largest message it may be
// sent before it reads the next one (gRPC takes in a whole message once it has read
// its length, so nothing less bounds what the read will hold), keeps the message's own
// size once it has arrived, and gives that back when the chunk is staged or stored. A
// stream that cannot reserve within maxWait fails with RESOURCE_EXHAUSTED and retry
// advice; meanwhile it does not read, so flow control holds its client back.
type memoryGate struct {
	limit int64
	// perTenant caps one tenant's reservations (0: only limit does), so that one
	// tenant's waiting streams cannot lock the others out.
	perTenant int64
	maxWait   time.Duration

	mu       sync.Mutex
	held     int64
	byTenant map[string]int64
	changed  chan struct{} // closed and replaced when held goes down
}

func newMemoryGate(limit, perTenant int64, maxWait time.Duration) *memoryGate {
	return &memoryGate{limit: limit, perTenant: perTenant, maxWait: maxWait, byTenant: map[string]int64{}, changed: make(chan struct{})}
}

// reserve waits until n more bytes fit under the limit and under tenant's share, and
// reserves them. A reservation is granted when nothing is held (by anyone, or by the
// tenant for its share), so that one larger than a limit cannot wait for ever.
func (g *memoryGate) reserve(ctx context.Context, tenant string, n int64) error {
	timer := time.NewTimer(g.maxWait)
	defer timer.Stop()
	for {
		g.mu.Lock()
		t := g.byTenant[tenant]
		share := g.perTenant <= 0 || t+n <= g.perTenant || t == 0
		if share && (g.held+n <= g.limit || g.held == 0) {
			g.held += n
			g.byTenant[tenant] = t + n
			g.mu.Unlock()
			return nil
		}
		ch := g.changed
		g.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			if !share {
				return &MemoryError{Limit: g.perTenant, Waited: g.maxWait, Tenant: true}
			}
			return &MemoryError{Limit: g.limit, Waited: g.maxWait}
		case <-ch:
		}
	}
}

// release gives back n bytes tenant reserved.
func (g *memoryGate) release(tenant string, n int64) {
	if n == 0 {
		return
	}
	g.mu.Lock()
	g.held -= n
	if t := g.byTenant[tenant] - n; t > 0 {
		g.byTenant[tenant] = t
	} else {
		delete(g.byTenant, tenant)
	}
	close(g.changed)
	g.changed = make(chan struct{})
	g.mu.Unlock()
}

// Held is the number of bytes reserved now (for tests and metrics).
func (g *memoryGate) Held() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held
}

// decodeGate caps the bytes of chunk messages being decoded at once (see chunkCodec):
// for a moment a message is held twice, in the HTTP/2 frames gRPC received it in (under
// its stream's memoryGate reservation) and in the buffer the codec copies its chunk
// into. Copying is a memory copy, not network wait, so a few at a time keep the cores
// busy; what the gate holds is the receive memory's overdraft (decodeReserve). It is
// x/sync's weighted semaphore (first come, first served); a message larger than the
// cap takes all of it, so it goes alone and does not wait for ever.
type decodeGate struct {
	limit int64
	sem   *semaphore.Weighted
}

func newDecodeGate(limit int64) *decodeGate {
	return &decodeGate{limit: limit, sem: semaphore.NewWeighted(limit)}
}

// weight is what n bytes take of the gate: a message larger than the whole limit takes
// all of it, so it goes alone.
func (g *decodeGate) weight(n int64) int64 { return min(n, g.limit) }

// acquire waits until n more bytes fit, and takes them. It does not wait for a client:
// whoever holds the gate is copying bytes it has, and gives them back within
// milliseconds.
func (g *decodeGate) acquire(n int64) {
	if g == nil || n <= 0 {
		return
	}
	_ = g.sem.Acquire(context.Background(), g.weight(n)) // fails only with its context
}

// release gives back n bytes from acquire.
func (g *decodeGate) release(n int64) {
	if g == nil || n <= 0 {
		return
	}
	g.sem.Release(g.weight(n))
}

// decodeReserve is what chunk messages being decoded may hold beyond the receive memory
// cap: a sixteenth of it, and at least the largest message (decodeGate lets one
// message through alone whatever its size). With the defaults that is one 64 MiB
// message, or eight 8 MiB ones, at once: a copy is memory work, and more copies at once
// than there are cores go no faster, while each holds its message twice.
func decodeReserve(c Config) int64 {
	return max(c.MaxReceiveMemory/16, int64(c.MaxMessageSize()))
}

// MemoryLimit is the soft memory limit (runtime/debug.SetMemoryLimit) chunkup serve
// sets for cfg unless GOMEMLIMIT is set: the receive memory cap, what messages being
// decoded hold beyond it (decodeReserve), and gcSlack for the rest of the process and
// for what the garbage collector has not collected yet (freed frames and chunk buffers
// wait in pools until a collection, and without a limit the collector lets the heap
// grow past what is live by GOGC percent). The collector collects sooner as the process
// nears it (chunk bytes are pointer-free: a collection costs little); it is soft, so a
// process that needs more (many ReadObject or idle streams, chunks handed to its
// worker) gets it, at the cost of more collections.
func MemoryLimit(cfg Config) int64 {
	cfg.setDefaults()
	return cfg.MaxReceiveMemory + decodeReserve(cfg) + gcSlack(cfg)
}

// gcSlack is what MemoryLimit leaves beyond the chunk messages: a thirty-second of the
// receive memory cap (at least 32 MiB), and 32 MiB more.
func gcSlack(c Config) int64 {
	return max(c.MaxReceiveMemory/32, 32<<20) + 32<<20
}
