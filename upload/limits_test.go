package upload

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestSizeClass(t *testing.T) {
	for _, tc := range []struct{ n, want int64 }{
		{100, 100},
		{8<<20 + 64, 10 << 20},
		{8 << 20, 8 << 20},
		{5<<20 + 64, 6 << 20},
		{64<<20 + 64, 80 << 20},
		{1<<20 + 1, 1<<20 + 256<<10},
	} {
		if got := sizeClass(tc.n); got != tc.want {
			t.Errorf("sizeClass(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
	if got := RedisCost(8 << 20); got != 20<<20 {
		t.Errorf("RedisCost(8 MiB) = %d, want 20 MiB (string and query buffer, each a 10 MiB class)", got)
	}
}

// TestBudgetHoldsUnderConcurrency has 64 streams reserve chunks at once against a
// budget of ten: the bytes reserved and staged never exceed it, every stream gets its
// turn as others are staged and the measurement sees Redis drained, and a chunk larger
// than the room left waits until nothing else is reserved.
func TestBudgetHoldsUnderConcurrency(t *testing.T) {
	const chunk = 20
	var redis atomic.Int64 // what "Redis" holds: staged chunks, drained by a "worker"
	g := &budgetGate{budget: 10 * chunk, maxWait: time.Minute, every: time.Millisecond,
		measure: func(context.Context) (int64, error) { return redis.Load(), nil }}
	ctx := context.Background()
	var peak atomic.Int64
	check := func() {
		g.mu.Lock()
		load := g.used + g.since + g.reserved
		g.mu.Unlock()
		for {
			p := peak.Load()
			if load <= p || peak.CompareAndSwap(p, load) {
				break
			}
		}
	}
	stop := make(chan struct{})
	go func() { // the worker drains Redis
		for {
			select {
			case <-stop:
				return
			default:
			}
			if v := redis.Load(); v > 0 {
				redis.Add(-min(v, chunk))
			}
			time.Sleep(100 * time.Microsecond) // the drain's pace
		}
	}()
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 5 {
				if err := g.reserve(ctx, chunk); err != nil {
					t.Error(err)
					return
				}
				check()
				redis.Add(chunk) // staged
				g.settle(chunk, chunk)
				check()
			}
		})
	}
	wg.Wait()
	close(stop)
	if p := peak.Load(); p > g.budget {
		t.Errorf("reserved and staged peaked at %d, over the budget %d", p, g.budget)
	}

	// One chunk larger than the budget's free room is granted once nothing else is
	// reserved (else it would wait for ever), and not before.
	g2 := &budgetGate{budget: 100, maxWait: time.Minute, every: time.Millisecond,
		measure: func(context.Context) (int64, error) { return 50, nil }}
	if err := g2.reserve(ctx, 40); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- g2.reserve(ctx, 80) }()
	select {
	case err := <-got:
		t.Fatalf("an 80-byte chunk was granted with 90 of 100 taken: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	g2.settle(40, 0)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// TestFinishingStreams: a stream whose upload has all its parts moves from the
// tenant's open streams to its finishing ones, so the tenant may open another at once;
// past the finishing streams' cap it stays counted where it was, so a tenant holds at
// most twice the cap whatever its clients do; ending a stream frees what it holds.
func TestFinishingStreams(t *testing.T) {
	c := &Core{streams: NewStreamCounter("upload streams", 2), finishing: NewStreamCounter("finishing upload streams", 2)}
	ctx := WithTenant(context.Background(), "acme")
	open := func() func() {
		t.Helper()
		r, err := c.OpenStream(ctx)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		return r
	}
	var finishing []func()
	for i := range 2 {
		r, moved := c.FinishingStream(ctx, open())
		if !moved {
			t.Fatalf("stream %d did not move to the finishing streams", i)
		}
		finishing = append(finishing, r)
	}
	// Both open places are free again; the finishing ones are full.
	a, b := open(), open()
	if _, err := c.OpenStream(ctx); err == nil {
		t.Fatal("a third open stream was allowed under a cap of 2")
	}
	r, moved := c.FinishingStream(ctx, a)
	if moved {
		t.Fatal("a stream moved past the finishing streams' cap")
	}
	if _, err := c.OpenStream(ctx); err == nil {
		t.Fatal("a stream that could not move gave its open place back")
	}
	// Another tenant is not affected.
	if _, err := c.OpenStream(WithTenant(context.Background(), "other")); err != nil {
		t.Fatalf("another tenant: %v", err)
	}
	r()
	b()
	finishing[0]()
	open()
	if _, moved := c.FinishingStream(ctx, open()); !moved {
		t.Fatal("a finishing place freed was not taken")
	}
}
