package httpdoor

import (
	"context"
	"fmt"
	"sync"
)

// buffers hands out chunk buffers from pools (one per buffer size) within a budget of
// bytes held at once, and within each tenant's share of it, so that the door's memory
// is bounded whatever the number of requests and no tenant can take the room another
// needs: a request waits for room and is refused when it does not come in time.
//
// A request does not reserve a whole chunk before its body's first byte: its buffer
// starts at growStep (or the chunk, if smaller) and doubles as the bytes arrive (see
// chunkBuf), so a request holds about what it received, and one that trickles holds
// little.
type buffers struct {
	pools sync.Map // int64 → *sync.Pool of *[]byte

	mu      sync.Mutex
	budget  int64
	share   int64 // what one tenant may hold
	used    int64
	tenants map[string]int64
	changed chan struct{} // closed and replaced whenever used shrinks
}

// growStep is the first size of a request's chunk buffer.
const growStep = 1 << 20

func newBuffers(budget, share int64) *buffers {
	return &buffers{budget: budget, share: min(share, budget), tenants: map[string]int64{}, changed: make(chan struct{})}
}

// reserve counts size bytes for tenant, waiting while the budget or the tenant's share
// is spent. ctx bounds the wait.
func (b *buffers) reserve(ctx context.Context, tenant string, size int64) error {
	if size > b.share {
		return fmt.Errorf("%w: a chunk buffer of %d bytes does not fit a tenant's share of the server's receive memory (%d bytes)", ErrUnavailable, size, b.share)
	}
	for {
		b.mu.Lock()
		fits, tenantFull := b.fits(tenant, size)
		if fits {
			b.take(tenant, size)
			b.mu.Unlock()
			return nil
		}
		ch := b.changed
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			if tenantFull {
				return fmt.Errorf("%w: this tenant's requests hold its share of the server's receive memory (%d bytes); finish or close some of its uploads, or retry in a moment", ErrUnavailable, b.share)
			}
			return fmt.Errorf("%w: the server is receiving as many uploads as its memory allows; retry in a moment", ErrUnavailable)
		}
	}
}

// tryReserve counts size bytes for tenant if there is room now, without waiting.
func (b *buffers) tryReserve(tenant string, size int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ok, _ := b.fits(tenant, size); !ok {
		return false
	}
	b.take(tenant, size)
	return true
}

// fits reports whether size more bytes fit for tenant, and if not whether the
// tenant's share is what is full. b.mu is held.
func (b *buffers) fits(tenant string, size int64) (ok, tenantFull bool) {
	if b.tenants[tenant]+size > b.share {
		return false, true
	}
	return b.used+size <= b.budget, false
}

func (b *buffers) take(tenant string, size int64) {
	b.used += size
	b.tenants[tenant] += size
}

// release gives back size bytes of tenant's.
func (b *buffers) release(tenant string, size int64) {
	b.mu.Lock()
	b.used -= size
	if b.tenants[tenant] -= size; b.tenants[tenant] <= 0 {
		delete(b.tenants, tenant)
	}
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
}

// get returns a buffer of size bytes for tenant, waiting for room as reserve does.
func (b *buffers) get(ctx context.Context, tenant string, size int64) ([]byte, error) {
	if err := b.reserve(ctx, tenant, size); err != nil {
		return nil, err
	}
	return b.alloc(size), nil
}

// tryGet returns a buffer of size bytes if there is room for it now, without waiting
// (for an optional second buffer).
func (b *buffers) tryGet(tenant string, size int64) ([]byte, bool) {
	if !b.tryReserve(tenant, size) {
		return nil, false
	}
	return b.alloc(size), true
}

// alloc takes a buffer of size bytes from its pool, or makes one; the budget is
// counted already.
func (b *buffers) alloc(size int64) []byte {
	p, _ := b.pools.LoadOrStore(size, &sync.Pool{})
	if v := p.(*sync.Pool).Get(); v != nil {
		return *v.(*[]byte)
	}
	return make([]byte, size)
}

// put returns a buffer that get handed out to tenant.
func (b *buffers) put(tenant string, buf []byte) {
	size := int64(cap(buf))
	if p, ok := b.pools.Load(size); ok {
		buf = buf[:size]
		p.(*sync.Pool).Put(&buf)
	}
	b.release(tenant, size)
}

// inUse reports the bytes handed out, for tests.
func (b *buffers) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// tenantInUse reports the bytes handed out to tenant, for tests.
func (b *buffers) tenantInUse(tenant string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tenants[tenant]
}

// chunkBuf is one chunk's buffer for a request: it starts small and grows (doubling,
// up to the chunk size) only as the body fills it, reserving each growth first, so that
// what a request holds follows what it received.
type chunkBuf struct {
	b      *buffers
	tenant string
	size   int64 // the chunk size: the most it grows to
	buf    []byte
	wait   func() (context.Context, context.CancelFunc)
}

// ensure makes the buffer hold at least n bytes (n ≤ size), keeping its first keep
// bytes.
func (c *chunkBuf) ensure(n int64, keep int64) error {
	if int64(len(c.buf)) >= n {
		return nil
	}
	next := int64(len(c.buf)) * 2
	if next == 0 {
		next = min(c.size, growStep)
	}
	for next < n {
		next *= 2
	}
	next = min(next, c.size)
	ctx, cancel := c.wait()
	defer cancel()
	nb, err := c.b.get(ctx, c.tenant, next)
	if err != nil {
		return err
	}
	copy(nb, c.buf[:keep])
	c.free()
	c.buf = nb
	return nil
}

// take hands the buffer over (to a queue that puts it back later) and leaves c empty.
func (c *chunkBuf) take() []byte {
	b := c.buf
	c.buf = nil
	return b
}

// swap exchanges c's buffer with other's (for the read-ahead buffer).
func (c *chunkBuf) swap(other *[]byte) { c.buf, *other = *other, c.buf }

func (c *chunkBuf) free() {
	if c.buf != nil {
		c.b.put(c.tenant, c.buf)
		c.buf = nil
	}
}
