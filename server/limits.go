package server

import (
	"context"
	"fmt"
	"math/bits"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
	"golang.org/x/time/rate"
)

// ErrBudget means Redis stayed over the staged-bytes budget for longer than the server
// waits; the client should retry later.
type BudgetError struct {
	Budget int64
	Waited time.Duration
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("the staged-bytes budget (%d bytes, --staged-bytes-budget) stayed full for %s while workers drain it; retry later", e.Budget, e.Waited)
}

// MemoryError means the bytes of chunk messages this process holds stayed at their cap
// (--max-receive-memory) for longer than a stream waits; the client should retry later.
type MemoryError struct {
	Limit  int64
	Waited time.Duration
	// Tenant: the limit was the tenant's share (--max-receive-memory-per-tenant).
	Tenant bool
}

func (e *MemoryError) Error() string {
	if e.Tenant {
		return fmt.Sprintf("this tenant's streams hold its share of %d bytes reserved for chunks being received or awaited (--max-receive-memory-per-tenant; a stream waiting for its next message reserves the largest one) and there was no room for this stream's next chunk within %s; close idle streams, or retry later", e.Limit, e.Waited)
	}
	return fmt.Sprintf("this server holds its limit of %d bytes reserved for chunks being received or awaited (--max-receive-memory; a stream waiting for its next message reserves the largest one) and had no room for this stream's next chunk within %s; retry later", e.Limit, e.Waited)
}

// CapError is a tenant's cap on creating uploads that was reached (its rate, or its
// uploads in progress); nothing was created. RESOURCE_EXHAUSTED (HTTP 429) with
// RetryAfter.
type CapError struct {
	Msg        string
	RetryAfter time.Duration
}

func (e *CapError) Error() string { return e.Msg }

// LimitError is a per-tenant limit that was reached.
type LimitError struct{ Msg string }

func (e *LimitError) Error() string { return e.Msg }

// TenantRateLimiter limits each tenant's calls per second (a token bucket per tenant).
// It implements go-grpc-middleware's ratelimit.Limiter.
type TenantRateLimiter struct {
	rate  rate.Limit
	burst int
	mu    sync.Mutex
	m     map[string]*rate.Limiter
}

// NewTenantRateLimiter allows each tenant perSecond calls per second with bursts of burst.
func NewTenantRateLimiter(perSecond float64, burst int) *TenantRateLimiter {
	return &TenantRateLimiter{rate: rate.Limit(perSecond), burst: max(1, burst), m: map[string]*rate.Limiter{}}
}

// Limit implements ratelimit.Limiter.
func (l *TenantRateLimiter) Limit(ctx context.Context) error {
	tenant := TenantFrom(ctx)
	if !l.allow(tenant) {
		return fmt.Errorf("tenant %q is over its rate limit of %g calls per second (burst %d; --rate-limit)", tenant, float64(l.rate), l.burst)
	}
	return nil
}

// allow takes a token of tenant's bucket, if there is one.
func (l *TenantRateLimiter) allow(tenant string) bool {
	l.mu.Lock()
	lim, ok := l.m[tenant]
	if !ok {
		if len(l.m) >= 100_000 { // tenants from tokens are unbounded; forget idle buckets
			clear(l.m)
		}
		lim = rate.NewLimiter(l.rate, l.burst)
		l.m[tenant] = lim
	}
	l.mu.Unlock()
	return lim.Allow()
}

// streamCounter bounds the streams (of one kind: what, limited by flag) a tenant has
// open on this process.
type streamCounter struct {
	what, flag string
	limit      int
	mu         sync.Mutex
	open       map[string]int
}

func (c *streamCounter) acquire(tenant string) (func(), error) {
	if c.limit <= 0 {
		return func() {}, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open[tenant] >= c.limit {
		return nil, &LimitError{Msg: fmt.Sprintf("tenant %s already has %d %s open on this server (limit %s); close some, or wait and retry", quote(tenant), c.limit, c.what, c.flag)}
	}
	c.open[tenant]++
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.open[tenant]--; c.open[tenant] == 0 {
			delete(c.open, tenant)
		}
	}, nil
}

// redisCost is what staging a chunk of n bytes can add to Redis' used_memory, which
// the staged-bytes budget measures: the string itself, which jemalloc rounds up to its
// size class (n plus a few bytes of header: up to 25% more, e.g. 10 MiB for an 8 MiB
// chunk), and as much again for the query buffer Redis keeps on the connection that
// sent it, sized for a next argument as large (it shrinks after a second or two idle).
// Counting both over-estimates a connection that stages chunk after chunk, until the
// next measurement corrects it.
func redisCost(n int64) int64 { return 2 * sizeClass(n+64) }

// sizeClass is jemalloc's allocation for n bytes: above 16 KiB the classes are four per
// doubling (n in (2^k, 2^(k+1)] rounds up to a multiple of 2^(k-2)).
func sizeClass(n int64) int64 {
	if n <= 16<<10 {
		return n
	}
	k := bits.Len64(uint64(n-1)) - 1
	step := int64(1) << (k - 2)
	return (n + step - 1) / step * step
}

// budgetGate holds streams back while Redis is over the staged-bytes budget. Before a
// stream reads its next chunk it reserves what staging that chunk can cost Redis (see
// redisCost; the stream's last chunk size, its first read the default chunk size): the
// reservation is granted when Redis' memory as last measured, plus what this process
// staged since, plus what is reserved, plus it, stays under the budget. A chunk that
// turns out larger reserves the difference before it is staged. Not reading makes
// gRPC's flow control push back on the client. So the bytes this process stages exceed
// the budget only by what the measurement has not seen yet (what other processes staged
// within one interval), and by one chunk when a single chunk is larger than the room
// there is: a reservation is always granted when nothing else is reserved, so that a
// chunk larger than the budget's free room cannot wait for ever.
type budgetGate struct {
	budget  int64
	maxWait time.Duration
	every   time.Duration
	measure func(context.Context) (int64, error)

	mu       sync.Mutex
	used     int64 // at the last measurement
	since    int64 // staged by this process since then
	reserved int64 // reserved by streams, not yet staged: no measurement sees it
	measured time.Time
}

// reserve waits until n bytes fit under the budget, and reserves them.
func (g *budgetGate) reserve(ctx context.Context, n int64) error {
	if g == nil || n <= 0 {
		return nil
	}
	start := time.Now()
	for {
		g.mu.Lock()
		if time.Since(g.measured) >= g.every {
			used, err := g.measure(ctx)
			if err != nil {
				g.mu.Unlock()
				return err
			}
			g.used, g.since, g.measured = used, 0, time.Now()
		}
		load := g.used + g.since + g.reserved
		granted := load+n <= g.budget || (g.reserved == 0 && load < g.budget)
		if granted {
			g.reserved += n
		}
		g.mu.Unlock()
		if granted {
			return nil
		}
		if waited := time.Since(start); waited >= g.maxWait {
			return &BudgetError{Budget: g.budget, Waited: waited.Round(time.Second)}
		}
		t := time.NewTimer(g.every)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// settle ends a reservation of reserved bytes: staged is what the chunk cost Redis (0
// when it was not staged there: refused, a repeat, or written through to S3).
func (g *budgetGate) settle(reserved, staged int64) {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.reserved -= reserved
	g.since += staged
	g.mu.Unlock()
}

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
