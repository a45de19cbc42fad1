package server

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the codec chunkCodec falls back to
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/bufpool"
)

// chunkCodec is the server's gRPC codec (grpc.ForceServerCodecV2). It decodes an
// UploadChunkRequest itself, so that a chunk's bytes are copied once, from the HTTP/2
// frames gRPC received them in straight into a buffer of this package's pool (see
// chunkBuffers), instead of twice (the default codec first joins the frames into one
// buffer, then protobuf copies the bytes field out of it into a fresh allocation per
// chunk). Every other message goes to the standard protobuf codec.
//
// While a chunk is copied, its bytes are held twice: in the frames (which gRPC frees
// when Unmarshal returns) and in the copy. The frames are under their stream's
// reservation of receive memory (memoryGate); the copies of the messages being decoded
// are under decode (decodeGate: a sixteenth of the receive memory cap, at least one
// largest message), so that with the defaults the two together stay within 1.0625 ×
// --max-receive-memory instead of twice it.
type chunkCodec struct {
	fallback encoding.CodecV2
	decode   *decodeGate // nil: no cap (tests)
	// largest is the largest buffer a chunk is copied into from the pool (0: no cap);
	// a larger one is allocated to size.
	largest int
}

// newChunkCodec returns the codec; decode caps the copies being made at once (nil: no
// cap), largest is the largest message gRPC takes in (0: no cap).
func newChunkCodec(decode *decodeGate, largest int) encoding.CodecV2 {
	return chunkCodec{fallback: encoding.GetCodecV2("proto"), decode: decode, largest: largest}
}

func (chunkCodec) Name() string { return "proto" }

func (c chunkCodec) Marshal(v any) (mem.BufferSlice, error) { return c.fallback.Marshal(v) }

func (c chunkCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*chunkupv1.UploadChunkRequest)
	if !ok {
		return c.fallback.Unmarshal(data, v)
	}
	err := c.decodeChunk(data, m)
	if errors.Is(err, errUnusual) {
		// A field this decoder does not expect (a newer client's, say): protobuf
		// decodes it, unknown fields and all, from one contiguous copy of the message
		// into another of its bytes field: two copies beside the frames, counted too.
		proto.Reset(m)
		n := 2 * int64(data.Len())
		c.decode.acquire(n)
		defer c.decode.release(n)
		return c.fallback.Unmarshal(data, v)
	}
	return err
}

// decodeChunk decodes data into m (decodeChunkRequest), its chunk's copy counted under
// the decode gate until the frames are freed (the bytes counted are given back as
// Unmarshal returns: gRPC frees the frames right after).
func (c chunkCodec) decodeChunk(data mem.BufferSlice, m *chunkupv1.UploadChunkRequest) error {
	var held int64
	defer func() { c.decode.release(held) }()
	return decodeChunkRequest(data, m, func(n int) []byte {
		// A bytes field repeated: the earlier copy went back to the pool (the last one
		// wins); holding its count while waiting for the next could deadlock two decodes.
		c.decode.release(held)
		held = int64(chunkBuffers.SizeFor(n, c.largest))
		c.decode.acquire(held)
		return chunkBuffers.GetWithin(n, c.largest)
	})
}

// errUnusual makes decodeChunkRequest hand a message over to protobuf.
var errUnusual = errors.New("unusual field")

var errWire = errors.New("server: malformed UploadChunkRequest")

// decodeChunkRequest decodes data into m (reset first) as proto.Unmarshal would,
// reading the frames in place, the chunk's bytes into a buffer from get (of the
// given length). It returns errUnusual for anything it leaves to protobuf: unknown
// fields, and wire types a field does not have.
func decodeChunkRequest(data mem.BufferSlice, m *chunkupv1.UploadChunkRequest, get func(n int) []byte) error {
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
				chunkBuffers.Put(m.Data)
			}
			m.Data = get(int(n))
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

// chunkBuffers pools the buffers chunk bytes are received into, by size class (four
// per doubling from 64 KiB to 1 GiB: 5, 6, 7 and 8 MiB, 10, 12, 14 and 16 MiB, ...), so
// that receiving a chunk does not allocate one. A buffer comes back only when the bytes
// are known to be no longer in use (see releaseData); one that is handed on (to a
// worker in this process) is left to the garbage collector.
var chunkBuffers = bufpool.New(16, 30)
