package server

import (
	"context"
	"fmt"
	"sync"
	"time"

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
	if !lim.Allow() {
		return fmt.Errorf("tenant %q is over its rate limit of %g calls per second (burst %d; --rate-limit)", tenant, float64(l.rate), l.burst)
	}
	return nil
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

// budgetGate holds streams back while Redis is over the staged-bytes budget. Before a
// stream reads its next chunk it waits until Redis' memory as last measured, plus what
// this process staged since, plus what it has received and not yet staged, is under the
// budget. Not reading makes gRPC's flow control push back on the client. So staged
// bytes exceed the budget by at most one chunk per stream (plus what other processes
// staged within one measurement interval).
type budgetGate struct {
	budget  int64
	maxWait time.Duration
	every   time.Duration
	measure func(context.Context) (int64, error)

	mu       sync.Mutex
	used     int64 // at the last measurement
	since    int64 // staged by this process since then
	inflight int64 // received by this process, not yet staged: no measurement sees it
	measured time.Time
}

func (g *budgetGate) wait(ctx context.Context) error {
	if g == nil {
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
		under := g.used+g.since+g.inflight < g.budget
		g.mu.Unlock()
		if under {
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

// received counts a chunk read from a stream and about to be staged.
func (g *budgetGate) received(n int64) {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.inflight += n
	g.mu.Unlock()
}

// done says a received chunk left the stream: staged in Redis (stored) or not.
func (g *budgetGate) done(n int64, stored bool) {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.inflight -= n
	if stored {
		g.since += n
	}
	g.mu.Unlock()
}
