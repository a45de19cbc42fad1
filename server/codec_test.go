package server

import (
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
)

// frames cuts b into a BufferSlice of pieces of random sizes, as HTTP/2 DATA frames
// arrive (a field may straddle pieces anywhere).
func frames(b []byte, rnd *rand.Rand) mem.BufferSlice {
	var s mem.BufferSlice
	for len(b) > 0 {
		n := min(len(b), 1+rnd.IntN(64))
		if rnd.IntN(4) == 0 {
			n = min(len(b), 1+rnd.IntN(16<<10))
		}
		s = append(s, mem.SliceBuffer(b[:n]))
		b = b[n:]
	}
	return s
}

// decodeBoth decodes wire with the chunk codec and with protobuf and fails when they
// disagree (on the message, or on whether it is valid).
func decodeBoth(t *testing.T, wire []byte, rnd *rand.Rand) {
	t.Helper()
	want := &chunkupv1.UploadChunkRequest{}
	wantErr := proto.Unmarshal(wire, want)
	got := &chunkupv1.UploadChunkRequest{}
	gotErr := newChunkCodec(nil, 0).Unmarshal(frames(wire, rnd), got)
	if (gotErr == nil) != (wantErr == nil) {
		t.Fatalf("wire %x: codec error %v, protobuf error %v", wire, gotErr, wantErr)
	}
	if wantErr == nil && !proto.Equal(got, want) {
		t.Fatalf("wire %x: codec decoded %v, protobuf %v", wire, got, want)
	}
}

// TestChunkCodecAgreesWithProtobuf decodes many requests, as SDKs and hand-written
// clients send them (fields in any order, repeated, unknown ones, a create in the
// message), cut into frames anywhere: the codec decodes exactly what protobuf does.
func TestChunkCodecAgreesWithProtobuf(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		m := &chunkupv1.UploadChunkRequest{UploadId: "abcdefghijklmnopqrstuvwxyz"[:rnd.IntN(27)], ChunkNumber: rnd.Uint32N(20000), IsLast: rnd.IntN(2) == 0}
		if rnd.IntN(2) == 0 {
			m.Data = make([]byte, rnd.IntN(300<<10))
			for j := range m.Data {
				m.Data[j] = byte(j * i)
			}
		}
		if rnd.IntN(2) == 0 {
			c := rnd.Uint32()
			m.Crc32C = &c
		}
		if rnd.IntN(4) == 0 {
			m.Create = &chunkupv1.CreateUploadRequest{Name: "f.bin", ChunkSize: 5 << 20, Metadata: map[string]string{"k": "v"}}
		}
		wire, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		switch rnd.IntN(5) {
		case 0: // an unknown field
			wire = protowire.AppendTag(wire, 99, protowire.BytesType)
			wire = protowire.AppendBytes(wire, []byte("future"))
		case 1: // fields again: the last occurrence wins, messages merge
			again := &chunkupv1.UploadChunkRequest{ChunkNumber: 7, Data: []byte("second"), Create: &chunkupv1.CreateUploadRequest{Key: "k2"}}
			b, _ := proto.Marshal(again)
			wire = append(wire, b...)
		case 2: // a field with a wrong wire type
			wire = protowire.AppendTag(wire, 2, protowire.BytesType)
			wire = protowire.AppendBytes(wire, []byte{1})
		case 3: // truncated
			if len(wire) > 0 {
				wire = wire[:rnd.IntN(len(wire))]
			}
		}
		decodeBoth(t, wire, rnd)
	}
	// Invalid UTF-8 in upload_id is refused, as protobuf refuses it.
	decodeBoth(t, protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte{0xff, 0xfe}), rnd)
}

// FuzzChunkCodec checks that the codec and protobuf agree on any input.
func FuzzChunkCodec(f *testing.F) {
	for _, m := range []*chunkupv1.UploadChunkRequest{
		{UploadId: "x", ChunkNumber: 1, Data: []byte("abc"), IsLast: true},
		{Create: &chunkupv1.CreateUploadRequest{Name: "n"}, ChunkNumber: 1, Data: make([]byte, 100)},
		{},
	} {
		b, _ := proto.Marshal(m)
		f.Add(b, uint64(1))
	}
	f.Fuzz(func(t *testing.T, wire []byte, seed uint64) {
		decodeBoth(t, wire, rand.New(rand.NewPCG(seed, 3)))
	})
}

// TestChunkCodecCountsDecodes: the copy a chunk message is decoded into is counted
// under the decode gate while it is made (a decode waits while the gate is full) and
// given back when Unmarshal returns.
func TestChunkCodecCountsDecodes(t *testing.T) {
	gate := newDecodeGate(1 << 20)
	codec := newChunkCodec(gate, 2<<20)
	wire, err := proto.Marshal(&chunkupv1.UploadChunkRequest{UploadId: "u", ChunkNumber: 1, Data: make([]byte, 1<<20)})
	if err != nil {
		t.Fatal(err)
	}
	gate.acquire(1) // another decode
	done := make(chan error, 1)
	go func() {
		done <- codec.Unmarshal(frames(wire, rand.New(rand.NewPCG(1, 1))), &chunkupv1.UploadChunkRequest{})
	}()
	select {
	case err := <-done:
		t.Fatalf("decoded (%v) while the gate was full", err)
	case <-time.After(50 * time.Millisecond):
	}
	gate.release(1)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !gate.sem.TryAcquire(gate.limit) {
		t.Fatal("the gate holds bytes after the decode")
	}
}
