package httpdoor

import (
	"context"
	"fmt"
	"sync"
)

// buffers hands out chunk buffers from pools (one per chunk size, since uploads of
// different sizes have different chunk sizes) within a budget of bytes held at once, so
// the door's memory is bounded whatever the number of requests: a request waits for
// room and is refused when it does not come in time.
type buffers struct {
	pools sync.Map // int64 → *sync.Pool of *[]byte

	mu      sync.Mutex
	budget  int64
	used    int64
	changed chan struct{} // closed and replaced whenever used shrinks
}

func newBuffers(budget int64) *buffers {
	return &buffers{budget: budget, changed: make(chan struct{})}
}

// get returns a buffer of size bytes, waiting while the budget is spent. ctx bounds
// the wait.
func (b *buffers) get(ctx context.Context, size int64) ([]byte, error) {
	if size > b.budget {
		return nil, fmt.Errorf("httpdoor: a chunk of %d bytes does not fit the buffer budget of %d bytes", size, b.budget)
	}
	for {
		b.mu.Lock()
		if b.used+size <= b.budget {
			b.used += size
			b.mu.Unlock()
			break
		}
		ch := b.changed
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: the server is receiving as many uploads as its memory allows; retry in a moment", ErrUnavailable)
		}
	}
	return b.alloc(size), nil
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

// tryGet returns a buffer of size bytes if the budget has room for it now, without
// waiting (for an optional second buffer).
func (b *buffers) tryGet(size int64) ([]byte, error) {
	b.mu.Lock()
	if b.used+size > b.budget {
		b.mu.Unlock()
		return nil, fmt.Errorf("%w: no room for a read-ahead buffer", ErrUnavailable)
	}
	b.used += size
	b.mu.Unlock()
	return b.alloc(size), nil
}

// put returns a buffer that get handed out.
func (b *buffers) put(buf []byte) {
	size := int64(cap(buf))
	if p, ok := b.pools.Load(size); ok {
		buf = buf[:size]
		p.(*sync.Pool).Put(&buf)
	}
	b.mu.Lock()
	b.used -= size
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
}

// inUse reports the bytes handed out, for tests.
func (b *buffers) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}
