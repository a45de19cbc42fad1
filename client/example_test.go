package client_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"os"
	"path"
	"strings"
	"testing"

	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/testenv"
)

// exampleServer is a chunkup process on real Redis and MinIO, for the examples.
var exampleServer string

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, func(tb testenv.TB) {
		exampleServer = (&env{redis: testenv.StartRedis(tb), minio: testenv.StartMinIO(tb)}).serve(tb)
	}))
}

func ExampleClient_Upload() {
	ctx := context.Background()
	c, err := client.Dial(exampleServer)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	up, err := c.Upload(ctx, strings.NewReader("hello, chunkup\n"),
		client.WithName("hello.txt"), client.WithContentType("text/plain"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(up.State, up.Size, path.Base(up.Key))
	// Output: UPLOAD_STATE_COMPLETED 15 hello.txt
}

func ExampleClient_UploadDirect() {
	ctx := context.Background()
	c, err := client.Dial(exampleServer)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// The bytes go straight to S3, with URLs the server signs; the server checks the
	// parts and completes the upload.
	data := bytes.Repeat([]byte("direct "), 2<<20) // 14 MiB: two parts
	up, err := c.UploadDirect(ctx, bytes.NewReader(data), int64(len(data)), client.WithName("direct.bin"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(up.State, up.Direct, up.Size, path.Base(up.Key))
	// Output: UPLOAD_STATE_COMPLETED true 14680064 direct.bin
}

func ExampleWithProgress() {
	ctx := context.Background()
	c, err := client.Dial(exampleServer, client.WithWindow(2))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	var last client.Progress
	data := bytes.Repeat([]byte("chunkup "), 20<<20/8) // 20 MiB: three 8 MiB chunks
	_, err = c.Upload(ctx, bytes.NewReader(data), client.WithProgress(func(p client.Progress) { last = p }))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("acknowledged %d bytes; %d of %d chunks in S3\n", last.BytesAcked, last.ChunksUploaded, last.TotalChunks)
	// Output: acknowledged 20971520 bytes; 3 of 3 chunks in S3
}

func ExampleWithOnStart() {
	ctx := context.Background()
	c, err := client.Dial(exampleServer)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// The id is known before the first chunk goes out: keep it to resume later.
	var started *chunkupv1.Upload
	up, err := c.Upload(ctx, strings.NewReader("noted before it is sent"),
		client.WithOnStart(func(u *chunkupv1.Upload) { started = u }))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(started.State, started.UploadId == up.UploadId, up.State)
	// Output: UPLOAD_STATE_ACTIVE true UPLOAD_STATE_COMPLETED
}

func ExampleClient_Watch() {
	ctx := context.Background()
	c, err := client.Dial(exampleServer)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	up, err := c.Upload(ctx, strings.NewReader("watched"))
	if err != nil {
		log.Fatal(err)
	}

	// Watching an upload that has ended gives its final report, then the stream ends.
	last, err := c.Watch(ctx, up.UploadId, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s %.0f%% %d bytes\n", last.State, last.Percent, last.Size)
	// Output: UPLOAD_STATE_COMPLETED 100% 7 bytes
}

func ExampleWithResume() {
	ctx := context.Background()
	c, err := client.Dial(exampleServer)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// An upload whose first chunk arrived before its client went away.
	data := bytes.Repeat([]byte{7}, 10<<20)
	created, err := c.API().CreateUpload(ctx, &chunkupv1.CreateUploadRequest{Name: "resumed.bin"})
	if err != nil {
		log.Fatal(err)
	}
	id, size := created.Upload.UploadId, created.Upload.ChunkSize
	stream, err := c.API().UploadChunk(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if err := stream.Send(&chunkupv1.UploadChunkRequest{UploadId: id, ChunkNumber: 1, Data: data[:size]}); err != nil {
		log.Fatal(err)
	}
	if ack, err := stream.Recv(); err == nil {
		fmt.Println("chunk", ack.ChunkNumber, "acknowledged")
	}
	_ = stream.CloseSend()

	// Later: the same bytes again; what the server has is skipped, the rest is sent.
	var acked int64
	up, err := c.Upload(ctx, bytes.NewReader(data), client.WithResume(id),
		client.WithProgress(func(p client.Progress) { acked = p.BytesAcked }))
	fmt.Println(up.GetState(), up.GetSize(), acked, err)
	// Output:
	// chunk 1 acknowledged
	// UPLOAD_STATE_COMPLETED 10485760 10485760 <nil>
}
