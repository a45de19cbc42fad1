// Package bufpool pools byte buffers by size class, four per doubling (64 KiB, 80, 96,
// 112, 128 KiB, ..., 5, 6, 7, 8 MiB, ...), so that a buffer is at most a quarter larger
// than what it holds: the server receives chunks into them, and the SDK reads small
// inputs into them.
package bufpool

import (
	"math/bits"
	"sync"
)

// Pool pools byte buffers by size class.
type Pool struct {
	minShift, maxShift int
	classes            []sync.Pool
}

// New makes a Pool whose classes run from 1<<minShift to 1<<maxShift bytes.
func New(minShift, maxShift int) *Pool {
	return &Pool{minShift: minShift, maxShift: maxShift, classes: make([]sync.Pool, 1+4*(maxShift-minShift))}
}

// class is the index of the smallest class holding n bytes, or -1 when n is outside
// the pooled sizes. Class 0 is 1<<minShift; above it, n in (2^k, 2^(k+1)] rounds up to
// a multiple of 2^(k-2), as jemalloc's classes do (up to a quarter more than n).
func (p *Pool) class(n int) int {
	if n <= 1<<p.minShift {
		return 0
	}
	if n > 1<<p.maxShift {
		return -1
	}
	k := bits.Len(uint(n-1)) - 1
	step := 1 << (k - 2)
	return 4*(k-p.minShift) + (n-1<<k+step-1)/step
}

// size is class c's capacity.
func (p *Pool) size(c int) int {
	if c == 0 {
		return 1 << p.minShift
	}
	k := p.minShift + (c-1)/4
	return 1<<k + ((c-1)%4+1)<<(k-2)
}

// Get returns a buffer of length n.
func (p *Pool) Get(n int) []byte { return p.GetWithin(n, 0) }

// GetWithin returns a buffer of length n and capacity SizeFor(n, most).
func (p *Pool) GetWithin(n, most int) []byte {
	c := p.pooled(n, most)
	if c < 0 {
		return make([]byte, n)
	}
	return *p.take(c, n)
}

// take lends a buffer of class c with length n.
func (p *Pool) take(c, n int) *[]byte {
	if b, ok := p.classes[c].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, p.size(c))
	return &b
}

// give takes back a buffer lent by take (others are ignored).
func (p *Pool) give(b *[]byte) {
	if c := p.class(cap(*b)); c >= 0 && cap(*b) == p.size(c) {
		p.classes[c].Put(b)
	}
}

// SizeFor is the capacity of the buffer GetWithin(n, most) returns, the memory it
// holds: its pool class (at most a quarter more than n), or n when n is not worth
// pooling (small, huge) or when the class is larger than most (when most > 0), so that
// a buffer never holds more than the largest message.
func (p *Pool) SizeFor(n, most int) int {
	if c := p.pooled(n, most); c >= 0 {
		return p.size(c)
	}
	return n
}

// pooled is the class GetWithin(n, most) takes a buffer from, or -1 (allocated to size).
func (p *Pool) pooled(n, most int) int {
	c := p.class(n)
	if c < 0 || n < 1<<p.minShift/2 || most > 0 && p.size(c) > most {
		return -1
	}
	return c
}

// Put takes back a buffer from Get or GetWithin (others are ignored).
func (p *Pool) Put(b []byte) { p.give(&b) }

// Pointers lends p's buffers by pointer, as grpc's mem.BufferPool does (a buffer that
// goes back through its pointer costs no allocation). Unlike grpc's own pools it does
// not clear a buffer before lending it: grpc fills the buffers it takes from a pool
// whole before anything reads them (an HTTP/2 frame's payload is read into its buffer
// in full, or the buffer is dropped), and clearing every 16 KiB frame buffer was a
// twentieth of the server's CPU for a chunk received (docs/performance.md, run O).
type Pointers struct{ p *Pool }

// Pointers returns p lending by pointer.
func (p *Pool) Pointers() Pointers { return Pointers{p} }

// Get returns a buffer of length n (its bytes are whatever was in it).
func (q Pointers) Get(n int) *[]byte {
	c := q.p.pooled(n, 0)
	if c < 0 {
		b := make([]byte, n)
		return &b
	}
	return q.p.take(c, n)
}

// Put takes back a buffer from Get (others are ignored).
func (q Pointers) Put(b *[]byte) { q.p.give(b) }
