package upload

import (
	"context"
	"fmt"
	"math/bits"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/chunkup/chunkup/internal/fault"
)

// BudgetError means Redis stayed over the staged-bytes budget for longer than the
// server waits; the client should retry later.
type BudgetError struct {
	Budget int64
	Waited time.Duration
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("this server's staged chunks fill its budget of %d bytes and stayed over it for %s while it moves them to S3; nothing was stored: retry later", e.Budget, e.Waited)
}

// Kind implements fault's kinded errors.
func (e *BudgetError) Kind() fault.Kind { return fault.Overloaded }

// RetryAfter is the delay a client should wait.
func (e *BudgetError) RetryAfter() time.Duration { return time.Second }

// CapError is a tenant's cap on creating uploads that was reached (its rate, or its
// uploads in progress); nothing was created.
type CapError struct {
	Msg   string
	Delay time.Duration
}

func (e *CapError) Error() string { return e.Msg }

// Kind implements fault's kinded errors.
func (e *CapError) Kind() fault.Kind { return fault.Exhausted }

// RetryAfter is the delay a client should wait.
func (e *CapError) RetryAfter() time.Duration { return e.Delay }

// LimitError is a per-tenant limit on what is open at once that was reached.
type LimitError struct{ Msg string }

func (e *LimitError) Error() string { return e.Msg }

// Kind implements fault's kinded errors: like the server's capacity, what a tenant may
// have open at once frees up as its streams end, so it is worth a retry soon (an HTTP
// client retries a 503, and none retries a 429).
func (e *LimitError) Kind() fault.Kind { return fault.Overloaded }

// RetryAfter is the delay a client should wait.
func (e *LimitError) RetryAfter() time.Duration { return time.Second }

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
		return &CapError{Msg: fmt.Sprintf("tenant %q is over its rate limit of %g calls per second (bursts of %d); slow down and retry", tenant, float64(l.rate), l.burst), Delay: time.Second}
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

// StreamCounter bounds the streams (of one kind: What) a tenant has open on this
// process.
type StreamCounter struct {
	What  string
	Limit int
	mu    sync.Mutex
	open  map[string]int
}

// NewStreamCounter bounds each tenant's open streams of one kind (what) to limit; zero
// or negative: no bound.
func NewStreamCounter(what string, limit int) *StreamCounter {
	return &StreamCounter{What: what, Limit: limit, open: map[string]int{}}
}

// Acquire counts a stream of tenant, or refuses it with a *LimitError; the function it
// returns ends it.
func (c *StreamCounter) Acquire(tenant string) (func(), error) {
	if c.Limit <= 0 {
		return func() {}, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open[tenant] >= c.Limit {
		return nil, &LimitError{Msg: fmt.Sprintf("tenant %s already has %d %s open on this server, as many as it may; close some, or wait and retry", Quote(tenant), c.Limit, c.What)}
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
func RedisCost(n int64) int64 { return 2 * sizeClass(n+64) }

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
// RedisCost; the stream's last chunk size, its first read the default chunk size): the
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
