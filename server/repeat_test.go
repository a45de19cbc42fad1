package server_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chunkup/chunkup/chunkworker"
	"github.com/chunkup/chunkup/cleanup"
	"github.com/chunkup/chunkup/completion"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/s3store"
	"github.com/chunkup/chunkup/server"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/stagingtest"
	"github.com/chunkup/chunkup/staging/uploads"
	"github.com/chunkup/chunkup/upload"
)

const repeatBucket = "repeats"

// heldCompletions is the completer's store, which holds the completer between its
// guard and the completion: BeginSnapshot takes the guard (the upload is COMPLETING),
// says so on held, and returns only once the test lets it go (let); Finish says on finished
// that the upload is COMPLETED.
type heldCompletions struct {
	*uploads.Completions
	held, finished chan string
	release        chan struct{}
	heldOnce       sync.Once
	finishedOnce   sync.Once
	releaseOnce    sync.Once
}

// let lets the completer go on.
func (h *heldCompletions) let() { h.releaseOnce.Do(func() { close(h.release) }) }

func (h *heldCompletions) BeginSnapshot(ctx context.Context, id, token string, lease time.Duration) (staging.Begin, *staging.Upload, []staging.Part, error) {
	b, u, parts, err := h.Completions.BeginSnapshot(ctx, id, token, lease)
	if err != nil || b.Outcome != staging.Begun {
		return b, u, parts, err
	}
	h.heldOnce.Do(func() { h.held <- id })
	select {
	case <-h.release:
	case <-ctx.Done():
		return staging.Begin{}, nil, nil, ctx.Err()
	}
	return b, u, parts, err
}

func (h *heldCompletions) Finish(ctx context.Context, id, token string, f staging.Final, ev staging.OutboxEvent, handoff bool) error {
	err := h.Completions.Finish(ctx, id, token, f, ev, handoff)
	if err == nil {
		h.finishedOnce.Do(func() { h.finished <- id })
	}
	return err
}

// countingThrough is the assembly's write-through adapter, counting the chunks whose
// write-through its upload refused because it is COMPLETING (BeginThrough's refusal).
type countingThrough struct {
	w          *chunkworker.Worker
	completing atomic.Int32
}

func (t *countingThrough) WriteThrough(ctx context.Context, ref staging.ChunkRef, data []byte, sum uint32, last, wake bool) (upload.Written, error) {
	r, err := t.w.WriteThrough(ctx, ref, data, sum, last, wake)
	var se *staging.StateError
	if errors.As(err, &se) && se.Status == staging.StatusCompleting {
		t.completing.Add(1)
	}
	return upload.Written{Stored: r.Stored, Duplicate: r.Duplicate, Ready: r.Ready, HandOver: r.HandOver, InUse: r.InUse}, err
}

// repeatRig is one process's API, worker and completer (held: heldCompletions) on
// their own Redis, as the assembly wires them, serving gRPC.
type repeatRig struct {
	client  chunkupv1.UploadServiceClient
	held    *heldCompletions
	through *countingThrough
}

func newRepeatRig(t *testing.T, minio *testenv.MinIO, mode string) *repeatRig {
	t.Helper()
	ctx := testenv.Context(t, time.Minute)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	s3c, err := s3store.NewClient(ctx, minio.S3Config())
	if err != nil {
		t.Fatal(err)
	}
	objects := s3store.New(s3c)
	stores := stagingtest.Open(t, testenv.StartRedis(t).Client(t), staging.Config{})
	st := stores.Uploads
	ender := &cleanup.Ender{Store: st.Ends(), S3: objects, Logger: quiet}

	// A part is slow only after a minute: write-through is not given up for staging
	// because the machine is busy.
	w, err := chunkworker.New(st.Chunks(), objects, ender, chunkworker.Config{SlowPart: time.Minute, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	held := &heldCompletions{Completions: st.Completions(), held: make(chan string, 1), finished: make(chan string, 1), release: make(chan struct{})}
	comp, err := completion.New(held, objects, ender, stores.Hub.Ready(), completion.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	var running sync.WaitGroup
	running.Go(func() { _ = w.Run(runCtx) })
	running.Go(func() { _ = comp.Run(runCtx) })
	t.Cleanup(func() { stop(); running.Wait() })
	t.Cleanup(held.let) // before the completer stops: its wait ends

	through := &countingThrough{w: w}
	core, err := upload.New(upload.Deps{Store: st, Ender: ender, Objects: objects, Local: w, Through: through, Completer: comp},
		upload.Config{Bucket: repeatBucket, Staging: mode, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := server.NewUploadService(server.Deps{Core: core, Lister: st, Progress: stores.Outbox, Objects: objects}, server.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	gs, _ := server.NewGRPCServer(svc, quiet)
	conn := server.Serve(t, gs)
	return &repeatRig{client: chunkupv1.NewUploadServiceClient(conn), held: held, through: through}
}

// openStream is an UploadChunk stream whose responses a goroutine reads: acks, then
// its end on done (nil after the server's clean end).
type openStream struct {
	stream chunkupv1.UploadService_UploadChunkClient
	acks   chan *chunkupv1.UploadChunkResponse
	done   chan error
}

func open(ctx context.Context, t *testing.T, c chunkupv1.UploadServiceClient) *openStream {
	t.Helper()
	stream, err := c.UploadChunk(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := &openStream{stream: stream, acks: make(chan *chunkupv1.UploadChunkResponse, 16), done: make(chan error, 1)}
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				s.done <- err
				return
			}
			s.acks <- r
		}
	}()
	return s
}

func (s *openStream) send(t *testing.T, req *chunkupv1.UploadChunkRequest) {
	t.Helper()
	if err := s.stream.Send(req); err != nil {
		t.Fatalf("send chunk %d: %v", req.ChunkNumber, err)
	}
}

// ack waits for the stream's next acknowledgement.
func (s *openStream) ack(ctx context.Context, t *testing.T, what string) *chunkupv1.UploadChunkResponse {
	t.Helper()
	select {
	case r := <-s.acks:
		return r
	case err := <-s.done:
		t.Fatalf("%s: the stream ended with %v before its acknowledgement", what, err)
	case <-ctx.Done():
		t.Fatalf("%s: no acknowledgement: %v", what, ctx.Err())
	}
	return nil
}

// end closes the stream's sending side and returns its remaining acknowledgements and
// its status.
func (s *openStream) end(ctx context.Context, t *testing.T) ([]*chunkupv1.UploadChunkResponse, error) {
	t.Helper()
	if err := s.stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var acks []*chunkupv1.UploadChunkResponse
	for {
		select {
		case r := <-s.acks:
			acks = append(acks, r)
		case err := <-s.done:
			for len(s.acks) > 0 {
				acks = append(acks, <-s.acks)
			}
			return acks, err
		case <-ctx.Done():
			t.Fatalf("the stream did not end: %v", ctx.Err())
		}
	}
}

// repeatCase is a chunk sent again, alone on a stream of its own, and what must come
// of it: an acknowledgement as a duplicate, or the stream refused with code and a
// message containing msg.
type repeatCase struct {
	name string
	n    uint32
	data []byte
	last bool
	dup  bool
	code codes.Code
	msg  string
}

// sendRepeat sends c on a new stream of upload id, and checks what came of it with
// the upload in state (a duplicate's acknowledgement says stored while the upload is
// being completed, and carries it once it is COMPLETED).
func sendRepeat(ctx context.Context, t *testing.T, r *repeatRig, id string, state chunkupv1.UploadState, c repeatCase) {
	t.Helper()
	s := open(ctx, t, r.client)
	s.send(t, &chunkupv1.UploadChunkRequest{UploadId: id, ChunkNumber: c.n, Data: c.data, IsLast: c.last})
	acks, err := s.end(ctx, t)
	if !c.dup {
		if len(acks) != 0 || status.Code(err) != c.code || !strings.Contains(status.Convert(err).Message(), c.msg) {
			t.Fatalf("acks %v, stream %v; want no acknowledgement and %s containing %q", acks, err, c.code, c.msg)
		}
		return
	}
	if err != nil || len(acks) != 1 {
		t.Fatalf("acks %v, stream %v; want the chunk acknowledged", acks, err)
	}
	a := acks[0]
	if a.UploadId != id || a.ChunkNumber != c.n || a.Crc32C != crc.Checksum(c.data) || !a.Duplicate {
		t.Fatalf("ack %v; want chunk %d acknowledged as a duplicate", a, c.n)
	}
	if state != chunkupv1.UploadState_UPLOAD_STATE_ACTIVE && !a.Stored {
		t.Errorf("ack %v; want stored (every part of the upload is in S3)", a)
	}
	if got := a.Completed != nil; got != (state == chunkupv1.UploadState_UPLOAD_STATE_COMPLETED) {
		t.Errorf("ack carries the completed upload: %v; want it only once the upload is COMPLETED", got)
	} else if got && a.Completed.State != chunkupv1.UploadState_UPLOAD_STATE_COMPLETED {
		t.Errorf("ack's completed upload is %s", a.Completed.State)
	}
}

func getUpload(ctx context.Context, t *testing.T, r *repeatRig, id string) *chunkupv1.Upload {
	t.Helper()
	resp, err := r.client.GetUpload(ctx, &chunkupv1.GetUploadRequest{UploadId: id})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Upload
}

// TestRepeatedChunkAcknowledgedInEveryState: a chunk sent again with the same bytes is
// acknowledged as a duplicate while its upload is ACTIVE, COMPLETING (the completer
// held between its guard and the completion) and COMPLETED, written through or staged;
// other bytes, a last-chunk flag on another chunk, and a chunk the upload never had
// are refused as before. The upload then completes with exactly its bytes.
func TestRepeatedChunkAcknowledgedInEveryState(t *testing.T) {
	minio := testenv.StartMinIO(t)
	minio.CreateBucket(t, repeatBucket)

	chunk1 := bytes.Repeat([]byte("chunkup!"), 1<<20) // 8 MiB: the default chunk size
	chunk2 := bytes.Repeat([]byte{7}, 1000)
	other1 := bytes.Clone(chunk1)
	other1[len(other1)/2] ^= 0xff
	chunk3 := bytes.Repeat([]byte{3}, len(chunk1))

	const (
		active     = chunkupv1.UploadState_UPLOAD_STATE_ACTIVE
		completing = chunkupv1.UploadState_UPLOAD_STATE_COMPLETING
		completed  = chunkupv1.UploadState_UPLOAD_STATE_COMPLETED
	)
	refused := func(name string, n uint32, data []byte, last bool, state string) repeatCase {
		return repeatCase{name: name, n: n, data: data, last: last, code: codes.FailedPrecondition, msg: "is " + state + " and accepts no more chunks"}
	}
	phases := []struct {
		state chunkupv1.UploadState
		cases []repeatCase
	}{
		{active, []repeatCase{
			{name: "same bytes", n: 1, data: chunk1, dup: true},
		}},
		{completing, []repeatCase{
			{name: "same bytes", n: 1, data: chunk1, dup: true},
			{name: "same last chunk", n: 2, data: chunk2, last: true, dup: true},
			refused("other bytes", 1, other1, false, "COMPLETING"),
			refused("other size", 2, chunk2[:999], true, "COMPLETING"),
			refused("is_last on another chunk", 1, chunk1, true, "COMPLETING"),
			refused("new chunk", 3, chunk3, false, "COMPLETING"),
		}},
		{completed, []repeatCase{
			{name: "same bytes", n: 1, data: chunk1, dup: true},
			{name: "same last chunk", n: 2, data: chunk2, last: true, dup: true},
			refused("other bytes", 1, other1, false, "COMPLETED"),
			refused("new chunk", 3, chunk3, false, "COMPLETED"),
		}},
	}

	for _, mode := range []string{upload.StagingAdaptive, upload.StagingAlways} {
		t.Run(mode, func(t *testing.T) {
			ctx := testenv.Context(t, 2*time.Minute)
			r := newRepeatRig(t, minio, mode)

			// Stream A: a create carrying chunk 1.
			a := open(ctx, t, r.client)
			a.send(t, &chunkupv1.UploadChunkRequest{ChunkNumber: 1, Data: chunk1,
				Create: &chunkupv1.CreateUploadRequest{Name: "repeat.bin", ContentType: "application/octet-stream"}})
			created := a.ack(ctx, t, "create")
			id := created.UploadId
			if created.Upload == nil || id == "" {
				t.Fatalf("first response %v; want the created upload", created)
			}
			if ack := a.ack(ctx, t, "chunk 1"); ack.ChunkNumber != 1 || ack.Duplicate {
				t.Fatalf("ack %v; want chunk 1 acknowledged", ack)
			}

			for _, ph := range phases {
				switch ph.state {
				case completing:
					// The last chunk: the completer takes the guard (written through, in the
					// acknowledgement's path) and is held there.
					a.send(t, &chunkupv1.UploadChunkRequest{UploadId: id, ChunkNumber: 2, Data: chunk2, IsLast: true})
					select {
					case got := <-r.held.held:
						if got != id {
							t.Fatalf("completer held %s; want %s", got, id)
						}
					case <-ctx.Done():
						t.Fatal("the completer never took the guard")
					}
					// The repeat a client sends after losing chunk 1's acknowledgement, on
					// the stream whose last chunk the completer is completing.
					a.send(t, &chunkupv1.UploadChunkRequest{UploadId: id, ChunkNumber: 1, Data: chunk1})
				case completed:
					r.held.let()
					select {
					case <-r.held.finished:
					case <-ctx.Done():
						t.Fatal("the upload was not completed once the completer was let go")
					}
				}
				if got := getUpload(ctx, t, r, id).State; got != ph.state {
					t.Fatalf("upload is %s; want %s", got, ph.state)
				}
				for _, c := range ph.cases {
					t.Run(ph.state.String()+"/"+c.name, func(t *testing.T) {
						sendRepeat(ctx, t, r, id, ph.state, c)
					})
				}
				if got := getUpload(ctx, t, r, id).State; got != ph.state {
					t.Fatalf("after the repeats the upload is %s; want %s", got, ph.state)
				}
			}

			// Stream A: chunk 2 and the repeat of chunk 1 were acknowledged, whenever
			// chunk 2's acknowledgement waited for the completion.
			acks, err := a.end(ctx, t)
			if err != nil {
				t.Fatalf("stream A: %v", err)
			}
			var got2, dup1 bool
			for _, ack := range acks {
				got2 = got2 || ack.ChunkNumber == 2 && !ack.Duplicate
				dup1 = dup1 || ack.ChunkNumber == 1 && ack.Duplicate && ack.Stored
			}
			if !got2 || !dup1 || len(acks) != 2 {
				t.Fatalf("stream A's last acknowledgements %v; want chunk 2, and chunk 1 again as a stored duplicate", acks)
			}
			if mode == upload.StagingAdaptive && r.through.completing.Load() == 0 {
				t.Error("no repeat went through the write-through while the upload was COMPLETING")
			}

			up := getUpload(ctx, t, r, id)
			whole := append(bytes.Clone(chunk1), chunk2...)
			if up.Size != int64(len(whole)) || up.Crc32C != crc.Checksum(whole) || up.TotalChunks != 2 || up.ReceivedBytes != int64(len(whole)) {
				t.Fatalf("completed upload %v; want %d bytes in 2 chunks, CRC32C %08x", up, len(whole), crc.Checksum(whole))
			}
			if obj := minio.Object(t, repeatBucket, up.Key); !bytes.Equal(obj, whole) {
				t.Fatalf("object has %d bytes; want the upload's %d exactly", len(obj), len(whole))
			}
		})
	}
}
