package server

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"unicode/utf8"

	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the codec chunkCodec falls back to
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
)

// chunkCodec is the server's gRPC codec (grpc.ForceServerCodecV2). It decodes an
// UploadChunkRequest itself, so that a chunk's bytes are copied once, from the HTTP/2
// frames gRPC received them in straight into a buffer of this package's pool (see
// chunkBuffers), instead of twice (the default codec first joins the frames into one
// buffer, then protobuf copies the bytes field out of it into a fresh allocation per
// chunk). Every other message goes to the standard protobuf codec.
type chunkCodec struct{ fallback encoding.CodecV2 }

func newChunkCodec() encoding.CodecV2 {
	return chunkCodec{fallback: encoding.GetCodecV2("proto")}
}

func (chunkCodec) Name() string { return "proto" }

func (c chunkCodec) Marshal(v any) (mem.BufferSlice, error) { return c.fallback.Marshal(v) }

func (c chunkCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*chunkupv1.UploadChunkRequest)
	if !ok {
		return c.fallback.Unmarshal(data, v)
	}
	err := decodeChunkRequest(data, m)
	if errors.Is(err, errUnusual) {
		// A field this decoder does not expect (a newer client's, say): protobuf
		// decodes it, unknown fields and all.
		proto.Reset(m)
		return c.fallback.Unmarshal(data, v)
	}
	return err
}

// errUnusual makes decodeChunkRequest hand a message over to protobuf.
var errUnusual = errors.New("unusual field")

var errWire = errors.New("server: malformed UploadChunkRequest")

// decodeChunkRequest decodes data into m (reset first) as proto.Unmarshal would,
// reading the frames in place. It returns errUnusual for anything it leaves to
// protobuf: unknown fields, and wire types a field does not have.
func decodeChunkRequest(data mem.BufferSlice, m *chunkupv1.UploadChunkRequest) error {
	proto.Reset(m)
	r := data.Reader()
	defer r.Close()
	for r.Remaining() > 0 {
		tag, err := binary.ReadUvarint(r)
		if err != nil {
			return errWire
		}
		num, typ := protowire.Number(tag>>3), protowire.Type(tag&7)
		want := protowire.VarintType
		switch num {
		case 1, 3, 6:
			want = protowire.BytesType
		case 2, 4, 5:
		default:
			return errUnusual
		}
		if typ != want || tag>>3 > uint64(protowire.MaxValidNumber) {
			return errUnusual
		}
		if typ == protowire.VarintType {
			v, err := binary.ReadUvarint(r)
			if err != nil {
				return errWire
			}
			switch num {
			case 2:
				m.ChunkNumber = uint32(v)
			case 4:
				c := uint32(v)
				m.Crc32C = &c
			case 5:
				m.IsLast = protowire.DecodeBool(v)
			}
			continue
		}
		n, err := binary.ReadUvarint(r)
		if err != nil || n > uint64(r.Remaining()) {
			return errWire
		}
		switch num {
		case 3:
			// Like protobuf: the last occurrence wins. The buffer is the pool's; the
			// service gives it back once the chunk is staged or stored (releaseData).
			if m.Data != nil {
				chunkBuffers.put(m.Data)
			}
			m.Data = chunkBuffers.get(int(n))
			if _, err := io.ReadFull(r, m.Data); err != nil {
				return errWire
			}
		case 1:
			b := make([]byte, n)
			if _, err := io.ReadFull(r, b); err != nil {
				return errWire
			}
			if !utf8.Valid(b) {
				return fmt.Errorf("%w: upload_id is not valid UTF-8", errWire)
			}
			m.UploadId = string(b)
		case 6:
			b := make([]byte, n)
			if _, err := io.ReadFull(r, b); err != nil {
				return errWire
			}
			if m.Create == nil {
				m.Create = &chunkupv1.CreateUploadRequest{}
			}
			// Merge, as protobuf does with a repeated message field.
			if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(b, m.Create); err != nil {
				return err
			}
		}
	}
	return nil
}

// chunkBuffers pools the buffers chunk bytes are received into, by size class (powers
// of two from 64 KiB), so that receiving a chunk does not allocate one. A buffer comes
// back only when the bytes are known to be no longer in use (see releaseData); one that
// is handed on (to a worker in this process) is left to the garbage collector.
var chunkBuffers = newBufferPool(16, 30)

type bufferPool struct {
	minShift, maxShift int
	classes            []sync.Pool
}

func newBufferPool(minShift, maxShift int) *bufferPool {
	return &bufferPool{minShift: minShift, maxShift: maxShift, classes: make([]sync.Pool, maxShift-minShift+1)}
}

// class is the index of the smallest class holding n bytes, or -1 when n is outside
// the pooled sizes.
func (p *bufferPool) class(n int) int {
	for i := range p.classes {
		if n <= 1<<(p.minShift+i) {
			return i
		}
	}
	return -1
}

// get returns a buffer of length n.
func (p *bufferPool) get(n int) []byte {
	c := p.class(n)
	if c < 0 || n < 1<<p.minShift/2 {
		return make([]byte, n) // small or huge: not worth pooling
	}
	if b, ok := p.classes[c].Get().(*[]byte); ok {
		return (*b)[:n]
	}
	return make([]byte, n, 1<<(p.minShift+c))
}

// put takes back a buffer from get (others are ignored).
func (p *bufferPool) put(b []byte) {
	c := p.class(cap(b))
	if c < 0 || cap(b) != 1<<(p.minShift+c) {
		return
	}
	b = b[:0]
	p.classes[c].Put(&b)
}
