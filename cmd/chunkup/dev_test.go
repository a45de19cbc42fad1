package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/internal/testenv"
)

// TestDevMode starts `chunkup dev` as a user would, uploads a file with
// `chunkup upload --json`, reads the UploadCompleted event from the dev Kafka address,
// finds the object's bytes under --data, and resumes a half-sent upload with
// `chunkup upload --resume`.
func TestDevMode(t *testing.T) {
	ctx := testenv.Context(t, 3*time.Minute)
	bin := testenv.BuildBinary(t, "github.com/chunkup/chunkup/cmd/chunkup")
	data := t.TempDir()
	port := func() string { return fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)) }
	grpcAddr, httpAddr, kafkaAddr := port(), port(), port()
	testenv.StartProcess(t, bin, []string{"dev", "--data", data, "--grpc-addr", grpcAddr,
		"--http-addr", httpAddr, "--s3-addr", port(), "--kafka-addr", kafkaAddr}, nil)
	deadline := time.Now().Add(time.Minute)
	for {
		r, err := http.Get("http://" + httpAddr + "/readyz")
		if err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("chunkup dev not ready: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	content := make([]byte, 9<<20+77) // two chunks: a multipart object
	_, _ = rand.NewChaCha8([32]byte{9}).Read(content)
	file := filepath.Join(t.TempDir(), "dev.bin")
	if err := os.WriteFile(file, content, 0o600); err != nil {
		t.Fatal(err)
	}
	up := cliUpload(t, ctx, bin, "upload", "--server", grpcAddr, "--json", file)
	if up.State != chunkupv1.UploadState_UPLOAD_STATE_COMPLETED || up.Size != int64(len(content)) {
		t.Fatalf("upload: %v", up)
	}
	stored, err := os.ReadFile(filepath.Join(data, "s3", "buckets", up.Bucket, up.Key))
	if err != nil {
		t.Fatalf("object not under --data: %v", err)
	}
	if sha256.Sum256(stored) != sha256.Sum256(content) {
		t.Fatal("the stored object differs from the file")
	}

	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{kafkaAddr}, Topic: "chunkup.uploads",
		GroupID: "dev-test", StartOffset: kafka.FirstOffset, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	m, err := r.FetchMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ev chunkupv1.UploadCompleted
	if err := protojson.Unmarshal(m.Value, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.UploadId != up.UploadId || ev.Size != up.Size || ev.ChecksumCrc32C != fmt.Sprintf("%08x", crc.Checksum(content)) {
		t.Fatalf("event %v does not describe upload %v", &ev, up)
	}

	// A half-sent upload, finished by `upload --resume`.
	c, err := client.Dial(grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	created, err := c.API().CreateUpload(ctx, &chunkupv1.CreateUploadRequest{Name: "dev.bin", ExpectedSize: proto.Int64(int64(len(content)))})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := c.API().UploadChunk(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cs := created.Upload.ChunkSize
	if err := stream.Send(&chunkupv1.UploadChunkRequest{UploadId: created.Upload.UploadId, ChunkNumber: 1, Data: content[:cs]}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	_ = stream.CloseSend()
	resumed := cliUpload(t, ctx, bin, "upload", "--server", grpcAddr, "--json", "--resume", created.Upload.UploadId, file)
	if resumed.UploadId != created.Upload.UploadId || resumed.State != chunkupv1.UploadState_UPLOAD_STATE_COMPLETED {
		t.Fatalf("resumed upload: %v", resumed)
	}
	stored, err = os.ReadFile(filepath.Join(data, "s3", "buckets", resumed.Bucket, resumed.Key))
	if err != nil || !bytes.Equal(stored, content) {
		t.Fatalf("resumed object differs from the file (%v)", err)
	}
}

// cliUpload runs the chunkup binary and decodes its --json output.
func cliUpload(t *testing.T, ctx context.Context, bin string, args ...string) *chunkupv1.Upload {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chunkup %v: %v\n%s", args, err, stderr.String())
	}
	var raw json.RawMessage
	if err := json.Unmarshal(stdout.Bytes(), &raw); err != nil {
		t.Fatalf("output is not one JSON object: %q", stdout.String())
	}
	var up chunkupv1.Upload
	if err := protojson.Unmarshal(raw, &up); err != nil {
		t.Fatal(err)
	}
	return &up
}
