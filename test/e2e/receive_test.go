package e2e

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/test/harness"
)

// rawMsg is a message already encoded, sent and received as is (rawCodec).
type rawMsg []byte

// rawCodec lets a hostile client send one encoded message on many streams without a
// copy per stream.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.(rawMsg))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*(v.(*rawMsg)) = data.Materialize()
	return nil
}

// peakRSS is process pid's peak resident set (VmHWM) in bytes; resetPeak resets it.
func peakRSS(t *testing.T, pid int) int64 { return harness.PeakRSS(t, pid) }

func resetPeak(t *testing.T, pid int) { harness.ResetPeakRSS(t, pid) }

// TestHostileMessagesBoundMemory sends 16 messages of 64 MiB at once, each on a stream
// of its own, to an upload of 8 MiB chunks on a `chunkup serve` process (its own
// process, so its RSS is its own) with the default --max-receive-memory (1 GiB), while a
// normal 20 MiB upload goes on. The server takes in only as many messages as the cap
// holds (the others wait, unread, and are refused with RESOURCE_EXHAUSTED or, once
// read, with INVALID_ARGUMENT), decodes only a sixteenth of the cap at once beyond it, its
// peak RSS stays under R₀ + 1.25 × the cap (docs/limits.md: the flag is the bound, not
// twice it), and the normal upload completes exact.
func TestHostileMessagesBoundMemory(t *testing.T) {
	const (
		receiveCap = 1 << 30 // the default --max-receive-memory
		hostile    = 16
		message    = 64 << 20
	)
	e := newEnv(t)
	node := e.serveProcess(t, nil, "server", "api,worker,completer,cleanup",
		"--chunk-size", "8MiB")
	c := dial(t, node.GRPCAddr)
	size := int64(80 << 20)
	created, err := c.API().CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{Name: "target.bin", ExpectedSize: &size})
	if err != nil {
		t.Fatal(err)
	}
	wire, err := proto.Marshal(&chunkupv1.UploadChunkRequest{UploadId: created.Upload.UploadId, ChunkNumber: 1, Data: make([]byte, message)})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(node.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Warm the process up (its pools, its connections) before the peak is measured.
	warm := randomBytes(9<<20, 90)
	if up, err := c.Upload(ctx(t), bytes.NewReader(warm), client.WithSize(int64(len(warm)))); err != nil {
		t.Fatal(err)
	} else {
		e.requireExact(t, up, warm)
	}
	pid := node.Proc.Pid()
	resetPeak(t, pid)
	base := peakRSS(t, pid)

	var wg sync.WaitGroup
	codesSeen := make(chan codes.Code, hostile)
	desc := &grpc.StreamDesc{StreamName: "UploadChunk", ClientStreams: true, ServerStreams: true}
	for range hostile {
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx(t), 2*time.Minute)
			defer cancel()
			s, err := conn.NewStream(sctx, desc, chunkupv1.UploadService_UploadChunk_FullMethodName)
			if err != nil {
				t.Error(err)
				return
			}
			_ = s.SendMsg(rawMsg(wire)) // may fail once the server refused the stream
			_ = s.CloseSend()
			var ack rawMsg
			err = s.RecvMsg(&ack)
			codesSeen <- status.Code(err)
		})
	}
	normal := randomBytes(20<<20+77, 91)
	up, err := c.Upload(ctx(t), bytes.NewReader(normal), client.WithSize(int64(len(normal))))
	if err != nil {
		t.Fatalf("a normal upload during the attack: %v", err)
	}
	e.requireExact(t, up, normal)
	wg.Wait()
	close(codesSeen)
	seen := map[codes.Code]int{}
	for code := range codesSeen {
		seen[code]++
		if code != codes.InvalidArgument && code != codes.ResourceExhausted {
			t.Errorf("a hostile message ended with %v; want INVALID_ARGUMENT or RESOURCE_EXHAUSTED", code)
		}
	}
	peak := peakRSS(t, pid)
	// docs/limits.md: what the process holds anyway (measured before the attack) and
	// the receive cap, plus a sixteenth of it for messages being decoded (held for a
	// moment in the frames they arrived in and in the buffer they are copied into), the
	// open streams' windows and the garbage collector's slack: a quarter in all.
	bound := base + receiveCap*5/4
	t.Logf("%d hostile %d MiB messages: %v; server RSS %d MiB before, peak %d MiB during; bound %d MiB",
		hostile, message>>20, seen, base>>20, peak>>20, bound>>20)
	if peak > bound {
		t.Fatalf("server peak RSS %d MiB, over the bound %d MiB", peak>>20, bound>>20)
	}
}

// TestIdleStreamCloses: a stream on which no chunk arrives for --stream-idle-timeout is
// closed with DEADLINE_EXCEEDED naming the setting; the upload it created is intact and
// takes its chunks on a new stream.
func TestIdleStreamCloses(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.Server.StreamIdleTimeout = 300 * time.Millisecond
	a := e.start(t, cfg)
	c := e.client(t, a)
	stream, err := c.API().UploadChunk(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("sent after the idle stream closed")
	size := int64(len(data))
	if err := stream.Send(&chunkupv1.UploadChunkRequest{Create: &chunkupv1.CreateUploadRequest{Name: "idle.txt", ExpectedSize: &size}}); err != nil {
		t.Fatal(err)
	}
	ack, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	id := ack.UploadId
	_, err = stream.Recv() // nothing more is sent
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "without a chunk; the upload stays resumable") {
		t.Fatalf("idle stream ended with %v; want DEADLINE_EXCEEDED naming --stream-idle-timeout", err)
	}
	up, err := c.Upload(ctx(t), bytes.NewReader(data), client.WithResume(id))
	if err != nil {
		t.Fatal(err)
	}
	e.requireExact(t, up, data)
}

// TestMessageSizeFollowsMaxChunk: the server takes a message as large as the largest
// chunk it allows (--max-chunk-size) plus its framing, and refuses a larger one before
// reading it in, with RESOURCE_EXHAUSTED.
func TestMessageSizeFollowsMaxChunk(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.Upload.ChunkSize, cfg.Upload.MaxChunkSize = 5<<20, 6<<20
	a := e.start(t, cfg)
	c := e.client(t, a)
	size := int64(12 << 20)
	created, err := c.API().CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{ExpectedSize: &size, ChunkSize: 6 << 20})
	if err != nil {
		t.Fatal(err)
	}
	send := func(n int) error {
		stream, err := c.API().UploadChunk(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		_ = stream.Send(&chunkupv1.UploadChunkRequest{UploadId: created.Upload.UploadId, ChunkNumber: 1, Data: make([]byte, n)})
		_ = stream.CloseSend()
		_, err = stream.Recv()
		return err
	}
	if err := send(6 << 20); err != nil {
		t.Fatalf("a chunk of the largest size: %v", err)
	}
	if err := send(6<<20 + 64<<10 + 1); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a message over the largest chunk plus framing: %v; want RESOURCE_EXHAUSTED", err)
	}
}
