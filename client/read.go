package client

import (
	"context"
	"errors"
	"fmt"
	"io"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/crc"
)

// ErrCorrupt means bytes read back do not match their CRC32C: the message's, or, for a
// whole object, the object's.
var ErrCorrupt = errors.New("chunkup: the bytes read do not match their CRC32C")

// ReadObject writes the object req names (an upload's, or a key's; a range of it when
// req has an offset or a limit) to w. It checks each message's CRC32C and that the
// messages follow one another, and, when it reads a whole object whose CRC32C is known,
// the object's CRC32C too (ErrCorrupt). It returns the first message, which describes
// the object (its size and CRC32C, and the upload when read by id).
func (c *Client) ReadObject(ctx context.Context, req *chunkupv1.ReadObjectRequest, w io.Writer) (*chunkupv1.ReadObjectResponse, error) {
	stream, err := c.api.ReadObject(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("chunkup: read object: %w", err)
	}
	var first *chunkupv1.ReadObjectResponse
	var whole uint32
	next := req.Offset
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return first, fmt.Errorf("chunkup: read object: %w", err)
		}
		if first == nil {
			first = m
		}
		if m.Offset != next {
			return first, fmt.Errorf("%w: a message at offset %d, expected %d", ErrCorrupt, m.Offset, next)
		}
		if sum := crc.Checksum(m.Data); sum != m.Crc32C {
			return first, fmt.Errorf("%w: %d bytes at offset %d have CRC32C %08x, the message says %08x", ErrCorrupt, len(m.Data), m.Offset, sum, m.Crc32C)
		}
		whole = crc.Combine(whole, m.Crc32C, int64(len(m.Data)))
		next += int64(len(m.Data))
		if _, err := w.Write(m.Data); err != nil {
			return first, err
		}
	}
	if first == nil {
		return nil, errors.New("chunkup: read object: the server sent nothing")
	}
	want := first.ObjectSize - req.Offset
	if req.Limit > 0 {
		want = min(want, req.Limit)
	}
	if got := next - req.Offset; got != want {
		return first, fmt.Errorf("chunkup: read object: %d bytes read, %d expected", got, want)
	}
	if req.Offset == 0 && req.Limit == 0 && first.HasObjectCrc32C && whole != first.ObjectCrc32C {
		return first, fmt.Errorf("%w: the object read has CRC32C %08x, the object's is %08x", ErrCorrupt, whole, first.ObjectCrc32C)
	}
	return first, nil
}
