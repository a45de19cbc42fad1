package client

import (
	"errors"
	"fmt"
	"io"
)

// ErrLongerThanDeclared means the input went on past the size declared for it.
var ErrLongerThanDeclared = errors.New("chunkup: the input is longer than its declared size")

// chunker cuts a reader into chunks of size bytes and knows which is the last: from the
// declared size, or by reading one chunk ahead when the size is unknown.
type chunker struct {
	r        io.Reader
	size     int64
	left     int64 // bytes still expected, or -1 when unknown
	ahead    []byte
	aheadErr error
	started  bool
	// alloc returns a buffer of n bytes for a chunk (the uploader's, reused).
	alloc func(n int) []byte
}

func newChunker(r io.Reader, size, expected int64, alloc func(int) []byte) *chunker {
	if alloc == nil {
		alloc = func(n int) []byte { return make([]byte, n) }
	}
	return &chunker{r: r, size: size, left: expected, alloc: alloc}
}

func (c *chunker) read() ([]byte, error) {
	buf := c.alloc(int(c.size))
	n, err := io.ReadFull(c.r, buf)
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		err = io.EOF
	}
	return buf[:n], err
}

func (c *chunker) next() (data []byte, last bool, err error) {
	if c.left >= 0 {
		n := min(c.left, c.size)
		buf := c.alloc(int(n))
		if _, err := io.ReadFull(c.r, buf); err != nil {
			return nil, false, fmt.Errorf("input ended before the declared size: %w", err)
		}
		c.left -= n
		if c.left == 0 {
			// The declared size is the whole input: more bytes would be dropped silently.
			var probe [1]byte
			if n, _ := io.ReadFull(c.r, probe[:]); n > 0 {
				return nil, false, ErrLongerThanDeclared
			}
		}
		return buf, c.left == 0, nil
	}
	if !c.started {
		c.started = true
		c.ahead, c.aheadErr = c.read()
	}
	data, err = c.ahead, c.aheadErr
	if err == io.EOF {
		return data, true, nil // a short (or, for an empty input, empty) last chunk
	}
	if err != nil {
		return nil, false, err
	}
	c.ahead, c.aheadErr = c.read()
	if c.aheadErr == io.EOF && len(c.ahead) == 0 {
		return data, true, nil // the input ended exactly at a chunk boundary
	}
	return data, false, nil
}
