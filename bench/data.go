package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// source is the benchmark's input: one block of random bytes read round and round from
// a chosen offset. Producing an input of any size then costs a memcpy (the contenders
// share the client's two cores with the servers, so generating random bytes on the fly
// would tax both), and the same input can be produced again to verify an object.
type source struct{ block []byte }

func newSource(size int) *source {
	b := make([]byte, size)
	r := rand.NewChaCha8([32]byte{'c', 'h', 'u', 'n', 'k', 'u', 'p'})
	_, _ = r.Read(b)
	return &source{block: b}
}

// reader returns n bytes of the input that starts at offset start.
func (s *source) reader(start, n int64) io.Reader {
	return &cyclic{block: s.block, pos: int(start % int64(len(s.block))), left: n}
}

// bytes returns n bytes of the input that starts at offset start, as one slice (for
// small objects, which PutObject sends from memory).
func (s *source) bytes(start, n int64) []byte {
	b := make([]byte, n)
	_, _ = io.ReadFull(s.reader(start, n), b)
	return b
}

type cyclic struct {
	block []byte
	pos   int
	left  int64
}

func (c *cyclic) Read(p []byte) (int, error) {
	if c.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n := 0
	for n < len(p) {
		k := copy(p[n:], c.block[c.pos:])
		n += k
		c.pos = (c.pos + k) % len(c.block)
	}
	c.left -= int64(n)
	return n, nil
}

// verify reads bucket/key back and compares it, byte for byte, with the input that
// starts at start and is n bytes long.
func verify(ctx context.Context, s3c *s3.Client, src *source, bucket, key string, start, n int64) error {
	out, err := s3c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		return fmt.Errorf("verify %s: %w", key, err)
	}
	defer out.Body.Close()
	want := src.reader(start, n)
	got, exp := make([]byte, 1<<20), make([]byte, 1<<20)
	var off int64
	for {
		k, err := io.ReadFull(out.Body, got)
		if k > 0 {
			if _, werr := io.ReadFull(want, exp[:k]); werr != nil {
				return fmt.Errorf("verify %s: object is longer than the input's %d bytes", key, n)
			}
			if !bytes.Equal(got[:k], exp[:k]) {
				return fmt.Errorf("verify %s: bytes differ from the input within [%d, %d)", key, off, off+int64(k))
			}
			off += int64(k)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return fmt.Errorf("verify %s: read: %w", key, err)
		}
	}
	if off != n {
		return fmt.Errorf("verify %s: object has %d bytes, input %d", key, off, n)
	}
	return nil
}
