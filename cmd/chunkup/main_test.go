package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/chunkup/chunkup/app"
	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/testenv"
)

const bucket = "chunkup-test"

// runCLI runs the command line args in process, as main would, and returns its exit
// code and output. A command that does not return within a minute fails the test.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- run(args, &out, &errb) }()
	select {
	case code = <-done:
	case <-time.After(time.Minute):
		t.Fatalf("chunkup %s did not return within a minute", strings.Join(args, " "))
	}
	return code, out.String(), errb.String()
}

// clearEnv removes the CHUNKUP_* variables that would change flag defaults (they come
// back when the test ends), so the tests see the documented defaults.
func clearEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "CHUNKUP_") && k != "CHUNKUP_CACHE" {
			t.Setenv(k, v) // restores it after the test
			if err := os.Unsetenv(k); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestUsage(t *testing.T) {
	clearEnv(t)
	for _, tc := range []struct {
		name   string
		env    map[string]string
		args   []string
		code   int
		stdout string // part of stdout
		stderr string // part of stderr
	}{
		{"no arguments", nil, nil, exitUsage, "", "usage: chunkup COMMAND"},
		{"unknown command", nil, []string{"frobnicate"}, exitUsage, "", `unknown command "frobnicate"`},
		{"-h", nil, []string{"-h"}, exitOK, "usage: chunkup COMMAND", ""},
		{"--help", nil, []string{"--help"}, exitOK, "serve", ""},
		{"help", nil, []string{"help"}, exitOK, "abort", ""},

		{"serve: unknown flag", nil, []string{"serve", "--bogus"}, exitUsage, "", "flag provided but not defined: -bogus"},
		{"serve: chunk size under 5 MiB", nil, []string{"serve", "--chunk-size", "1MiB"}, exitUsage, "", "chunk size must be between 5 MiB and 5 GiB"},
		{"serve: chunk size over 5 GiB", nil, []string{"serve", "--chunk-size", "6GiB", "--max-chunk-size", "6GiB"}, exitUsage, "", "between 5 MiB and 5 GiB"},
		{"serve: chunk size over the max", nil, []string{"serve", "--chunk-size", "16MiB", "--max-chunk-size", "8MiB"}, exitUsage, "", "must not exceed max chunk size"},
		{"serve: not a size", nil, []string{"serve", "--chunk-size", "8XB"}, exitUsage, "", "is not a size"},
		{"serve: unknown role", nil, []string{"serve", "--roles", "api,bogus"}, exitUsage, "", `unknown role "bogus"`},
		{"serve: bad log level", nil, []string{"serve", "--log-level", "loud"}, exitUsage, "", "use debug, info, warn or error"},
		{"serve: bad log format", nil, []string{"serve", "--log-format", "xml"}, exitUsage, "", "use text or json"},
		{"serve: bad redis url", nil, []string{"serve", "--redis-url", "ftp://nowhere"}, exitUsage, "", "redis url"},
		{"serve: lease too short", nil, []string{"serve", "--lease", "1ms"}, exitUsage, "", "lease must be at least"},
		{"serve: arguments", nil, []string{"serve", "extra"}, exitUsage, "", "serve takes no arguments"},
		{"serve: bad environment twin", map[string]string{"CHUNKUP_WORKER_CONCURRENCY": "many"}, []string{"serve"}, exitUsage, "", "$CHUNKUP_WORKER_CONCURRENCY"},
		{"serve -h", nil, []string{"serve", "-h"}, exitOK, "", "CHUNKUP_GRPC_ADDR"},

		{"upload: no file", nil, []string{"upload"}, exitUsage, "", "upload needs at least one FILE"},
		{"upload: --key with two files", nil, []string{"upload", "--key", "k", "a", "b"}, exitUsage, "", "--key applies to one file only"},
		{"upload -h", nil, []string{"upload", "-h"}, exitOK, "", "CHUNKUP_SERVER"},
		{"status: no id", nil, []string{"status"}, exitUsage, "", "status needs exactly one UPLOAD_ID"},
		{"status: two ids", nil, []string{"status", "a", "b"}, exitUsage, "", "exactly one UPLOAD_ID"},
		{"status: unknown flag", nil, []string{"status", "--bogus", "a"}, exitUsage, "", "-bogus"},
		{"abort: no id", nil, []string{"abort"}, exitUsage, "", "abort needs exactly one UPLOAD_ID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			code, stdout, stderr := runCLI(t, tc.args...)
			if code != tc.code {
				t.Fatalf("chunkup %q exited %d, want %d\nstdout: %s\nstderr: %s", tc.args, code, tc.code, stdout, stderr)
			}
			if !strings.Contains(stdout, tc.stdout) {
				t.Errorf("stdout %q does not contain %q", stdout, tc.stdout)
			}
			if !strings.Contains(stderr, tc.stderr) {
				t.Errorf("stderr %q does not contain %q", stderr, tc.stderr)
			}
		})
	}
}

func TestStatusUnreachableServer(t *testing.T) {
	clearEnv(t)
	code, stdout, stderr := runCLI(t, "status", "--server", "127.0.0.1:1", "abcdefghijklmnopqrstuvwxyz")
	if code != exitFailure {
		t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, exitFailure, stdout, stderr)
	}
	if stdout != "" {
		t.Errorf("stdout %q, want nothing", stdout)
	}
	if !strings.Contains(stderr, "Unavailable") {
		t.Errorf("stderr %q does not say the server is unavailable", stderr)
	}
}

// startServer runs a whole chunkup process (every role) on a real Redis and MinIO until
// the test ends, and returns its gRPC address and an S3 client for the MinIO.
func startServer(t *testing.T) (addr string, s3c *s3.Client) {
	t.Helper()
	r := testenv.StartRedis(t)
	m := testenv.StartMinIO(t)
	ctx := testenv.Context(t, time.Minute)
	a, err := app.New(ctx, app.Config{
		GRPCAddr: "127.0.0.1:0", HTTPAddr: "off", RedisURL: r.URL(),
		S3: m.S3Config(), Bucket: bucket, ShutdownTimeout: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatalf("start chunkup: %v", err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("chunkup run: %v", err)
		}
	})
	return a.GRPCAddr(), m.Client(t)
}

// writeRandomFile writes n random bytes to a file named name in a temporary directory.
func writeRandomFile(t *testing.T, name string, n int) (path string, data []byte) {
	t.Helper()
	data = make([]byte, n)
	_, _ = rand.Read(data)
	path = filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, data
}

// parseUpload parses one line of --json output, checking that it uses the proto field
// names and has the keys named. (protojson leaves out fields with zero values, so an
// aborted upload has no "size" or "etag".)
func parseUpload(t *testing.T, line string, keys ...string) *chunkupv1.Upload {
	t.Helper()
	var fields map[string]any
	if err := json.Unmarshal([]byte(line), &fields); err != nil {
		t.Fatalf("output %q is not one JSON object: %v", line, err)
	}
	for _, k := range append([]string{"upload_id", "state", "bucket", "key"}, keys...) {
		if _, ok := fields[k]; !ok {
			t.Errorf("output %s has no %q", line, k)
		}
	}
	up := &chunkupv1.Upload{}
	if err := protojson.Unmarshal([]byte(line), up); err != nil {
		t.Fatalf("output %q is not an Upload: %v", line, err)
	}
	return up
}

// requireObject checks that MinIO holds exactly data at key.
func requireObject(t *testing.T, s3c *s3.Client, key string, data []byte) {
	t.Helper()
	ctx := testenv.Context(t, time.Minute)
	out, err := s3c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("get object %s: %v", key, err)
	}
	defer out.Body.Close()
	h := sha256.New()
	n, err := io.Copy(h, out.Body)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprintf("%x", h.Sum(nil)), fmt.Sprintf("%x", sha256.Sum256(data)); got != want {
		t.Fatalf("object %s: %d bytes with sha256 %s, want %d bytes with sha256 %s", key, n, got, len(data), want)
	}
}

func requireCompleted(t *testing.T, up *chunkupv1.Upload, name string, size int) {
	t.Helper()
	switch {
	case up.State != chunkupv1.UploadState_UPLOAD_STATE_COMPLETED:
		t.Fatalf("upload %s is %v (%s), want COMPLETED", up.UploadId, up.State, up.Error)
	case up.Size != int64(size):
		t.Fatalf("upload %s has size %d, want %d", up.UploadId, up.Size, size)
	case up.Bucket != bucket:
		t.Fatalf("upload %s is in bucket %q, want %q", up.UploadId, up.Bucket, bucket)
	case up.Key != "uploads/"+up.UploadId+"/"+name:
		t.Fatalf("upload %s has key %q, want uploads/ID/%s", up.UploadId, up.Key, name)
	case up.Etag == "":
		t.Fatalf("upload %s has no etag", up.UploadId)
	}
}

// TestCommandsAgainstServer runs upload, status and abort against a real process on a
// real Redis and MinIO, and checks the objects in MinIO.
func TestCommandsAgainstServer(t *testing.T) {
	clearEnv(t)
	addr, s3c := startServer(t)
	file, data := writeRandomFile(t, "three.bin", 3<<20)

	code, stdout, stderr := runCLI(t, "upload", "--server", addr, "--json", file)
	if code != exitOK {
		t.Fatalf("upload exited %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	up := parseUpload(t, strings.TrimSpace(stdout), "size", "etag")
	requireCompleted(t, up, "three.bin", len(data))
	requireObject(t, s3c, up.Key, data)

	t.Run("status --json", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, "status", "--server", addr, "--json", up.UploadId)
		if code != exitOK {
			t.Fatalf("status exited %d\nstderr: %s", code, stderr)
		}
		got := parseUpload(t, strings.TrimSpace(stdout), "size", "etag")
		if got.UploadId != up.UploadId || got.State != up.State || got.Key != up.Key ||
			got.Size != up.Size || got.Etag != up.Etag || got.Crc32C != up.Crc32C {
			t.Fatalf("status says %v\nupload said %v", got, up)
		}
	})

	t.Run("status text", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, "status", "--server", addr, up.UploadId)
		if code != exitOK {
			t.Fatalf("status exited %d\nstderr: %s", code, stderr)
		}
		want := fmt.Sprintf("%s COMPLETED s3://%s/%s size=%d etag=%s\n", up.UploadId, bucket, up.Key, len(data), up.Etag)
		if stdout != want {
			t.Fatalf("status printed %q, want %q", stdout, want)
		}
	})

	t.Run("status of an unknown upload", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, "status", "--server", addr, "abcdefghijklmnopqrstuvwxyz")
		if code != exitFailure || stdout != "" {
			t.Fatalf("exit %d, stdout %q; want %d and nothing", code, stdout, exitFailure)
		}
		if !strings.Contains(stderr, "NotFound") || !strings.Contains(stderr, "abcdefghijklmnopqrstuvwxyz") {
			t.Fatalf("stderr %q does not say that the upload was not found", stderr)
		}
	})

	t.Run("status of a malformed id", func(t *testing.T) {
		code, _, stderr := runCLI(t, "status", "--server", addr, "../etc/passwd")
		if code != exitFailure || !strings.Contains(stderr, "InvalidArgument") {
			t.Fatalf("exit %d, stderr %q; want %d and InvalidArgument", code, stderr, exitFailure)
		}
	})

	t.Run("abort a completed upload", func(t *testing.T) {
		code, _, stderr := runCLI(t, "abort", "--server", addr, up.UploadId)
		if code != exitFailure || !strings.Contains(stderr, "FailedPrecondition") {
			t.Fatalf("exit %d, stderr %q; want %d and FailedPrecondition", code, stderr, exitFailure)
		}
	})

	t.Run("abort an active upload", func(t *testing.T) {
		c, err := client.Dial(addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		ctx := testenv.Context(t, time.Minute)
		created, err := c.API().CreateUpload(ctx, &chunkupv1.CreateUploadRequest{Name: "never.bin"})
		if err != nil {
			t.Fatal(err)
		}
		id := created.Upload.UploadId
		code, stdout, stderr := runCLI(t, "abort", "--server", addr, "--json", id)
		if code != exitOK {
			t.Fatalf("abort exited %d\nstderr: %s", code, stderr)
		}
		got := parseUpload(t, strings.TrimSpace(stdout), "error")
		if got.UploadId != id || got.State != chunkupv1.UploadState_UPLOAD_STATE_ABORTED || got.Error == "" {
			t.Fatalf("abort printed %v, want %s ABORTED with a reason", got, id)
		}
		// Aborting again is a no-op.
		if code, _, stderr := runCLI(t, "abort", "--server", addr, id); code != exitOK {
			t.Fatalf("second abort exited %d\nstderr: %s", code, stderr)
		}
	})

	t.Run("upload two files", func(t *testing.T) {
		small, smallData := writeRandomFile(t, "small.txt", 10)
		big, bigData := writeRandomFile(t, "nine.bin", 9<<20) // two chunks: a multipart upload
		code, stdout, stderr := runCLI(t, "upload", "--server", addr, "--json", "--content-type", "application/octet-stream", small, big)
		if code != exitOK {
			t.Fatalf("upload exited %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
		}
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		if len(lines) != 2 {
			t.Fatalf("upload printed %d lines, want one per file:\n%s", len(lines), stdout)
		}
		for i, f := range []struct {
			name string
			data []byte
		}{{"small.txt", smallData}, {"nine.bin", bigData}} {
			got := parseUpload(t, lines[i], "size", "etag")
			requireCompleted(t, got, f.name, len(f.data))
			if got.ContentType != "application/octet-stream" {
				t.Errorf("upload %s has content type %q", got.UploadId, got.ContentType)
			}
			requireObject(t, s3c, got.Key, f.data)
		}
	})

	t.Run("resume with another file", func(t *testing.T) {
		fileB, _ := writeRandomFile(t, "other.bin", len(data))
		code, stdout, stderr := runCLI(t, "upload", "--server", addr, "--resume", up.UploadId, fileB)
		if code != exitFailure || stdout != "" || !strings.Contains(stderr, "not the one in upload "+up.UploadId) {
			t.Fatalf("resume of a completed upload with another file: exit %d, stdout %q, stderr %q; want %d and a message that the file is not the upload's", code, stdout, stderr, exitFailure)
		}
		requireObject(t, s3c, up.Key, data)
		if code, _, stderr := runCLI(t, "upload", "--server", addr, "--resume", up.UploadId, file); code != exitOK {
			t.Fatalf("resume of a completed upload with its own file: exit %d, stderr %q", code, stderr)
		}
	})

	t.Run("upload a missing file", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "missing.bin")
		code, stdout, stderr := runCLI(t, "upload", "--server", addr, missing)
		if code != exitFailure || stdout != "" || !strings.Contains(stderr, "missing.bin") {
			t.Fatalf("exit %d, stdout %q, stderr %q; want %d and a message naming the file", code, stdout, stderr, exitFailure)
		}
	})
}
