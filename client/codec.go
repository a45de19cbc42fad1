package client

import (
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/chunkup/chunkup/internal/bufpool"
)

// DialDefaults are the options Dial adds to a connection: replies of up to 16 MiB (an
// upload's state lists up to 10,000 chunks) and chunk messages marshalled into
// buffers that are not cleared first (sendCodec). A program that dials its own
// connection for New passes them too.
func DialDefaults() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithDefaultCallOptions(
		grpc.MaxCallRecvMsgSize(16<<20),
		grpc.ForceCodecV2(sendCodec{encoding.GetCodecV2("proto")}),
	)}
}

// sendBuffers pools the buffers messages are marshalled into, by size class (a chunk
// message is its chunk and a few bytes more).
var sendBuffers = bufpool.New(10, 26).Pointers()

// sendCodec is gRPC's proto codec with one difference: a message is marshalled into a
// pooled buffer that is not cleared first. gRPC's pools clear every buffer they lend,
// and the marshalling then writes every byte of it again: for a chunk, that clearing
// was a twentieth of the CLI's CPU (docs/performance.md, run O).
type sendCodec struct{ encoding.CodecV2 }

func (sendCodec) Name() string { return "proto" }

func (c sendCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return c.CodecV2.Marshal(v)
	}
	// UseCachedSize below relies on this Size, as in gRPC's codec.
	size := proto.Size(m)
	if mem.IsBelowBufferPoolingThreshold(size) {
		return c.CodecV2.Marshal(v)
	}
	buf := sendBuffers.Get(size)
	out, err := (proto.MarshalOptions{UseCachedSize: true}).MarshalAppend((*buf)[:0], m)
	if err == nil && len(out) != size {
		err = fmt.Errorf("proto: marshalled %d bytes of a message of %d (changed while being sent?)", len(out), size)
	}
	if err != nil {
		sendBuffers.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, sendBuffers)}, nil
}
