package client

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/encoding"
	"google.golang.org/protobuf/proto"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
)

// TestSendCodecReusesBuffersWhole marshals chunk messages of several sizes in turn
// into buffers that are not cleared between uses: each must decode to exactly the
// message marshalled, with nothing of the one before.
func TestSendCodecReusesBuffersWhole(t *testing.T) {
	c := sendCodec{encoding.GetCodecV2("proto")}
	sum := uint32(7)
	for i, n := range []int{1 << 20, 1<<20 - 333, 5 << 20, 100, 1<<20 + 1, 1 << 20} {
		data := bytes.Repeat([]byte{byte('a' + i)}, n)
		in := &chunkupv1.UploadChunkRequest{UploadId: "u", ChunkNumber: uint32(i + 1), Data: data, Crc32C: &sum, IsLast: i%2 == 0}
		bs, err := c.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := bs.Len(), proto.Size(in); got != want {
			t.Fatalf("message %d: marshalled %d bytes, want %d", i, got, want)
		}
		out := &chunkupv1.UploadChunkRequest{}
		if err := proto.Unmarshal(bs.Materialize(), out); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		bs.Free()
		if !proto.Equal(in, out) {
			t.Fatalf("message %d (%d bytes of data) decoded to another message", i, n)
		}
	}
}
