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
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

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
	isolateState(t)
}

// isolateState gives upload's resume state a directory of the test's own (processes the
// test starts inherit it).
func isolateState(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("CHUNKUP_STATE_DIR", dir)
	return dir
}

func TestUsage(t *testing.T) {
	clearEnv(t)
	dir := t.TempDir()
	for _, name := range []string{"a", "b"} {
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "x.txt"), []byte(name), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	fileA, fileB := filepath.Join(dir, "a", "x.txt"), filepath.Join(dir, "b", "x.txt")
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

		{"serve: unknown flag", nil, []string{"serve", "--bogus"}, exitUsage, "", "serve: unknown flag --bogus (see 'chunkup serve -h')"},
		{"serve: chunk size under 5 MiB", nil, []string{"serve", "--chunk-size", "1MiB"}, exitUsage, "", "chunk size must be between 5 MiB and 5 GiB"},
		{"serve: chunk size over 5 GiB", nil, []string{"serve", "--chunk-size", "6GiB", "--max-chunk-size", "6GiB"}, exitUsage, "", "between 5 MiB and 5 GiB"},
		{"serve: chunk size over the max", nil, []string{"serve", "--chunk-size", "16MiB", "--max-chunk-size", "8MiB"}, exitUsage, "", "must not exceed max chunk size"},
		{"serve: not a size", nil, []string{"serve", "--chunk-size", "8XB"}, exitUsage, "", "is not a size"},
		{"serve: unknown role", nil, []string{"serve", "--roles", "api,bogus"}, exitUsage, "", `unknown role "bogus"`},
		{"serve: bad log level", nil, []string{"serve", "--log-level", "loud"}, exitUsage, "", "use debug, info, warn or error"},
		{"serve: bad log format", nil, []string{"serve", "--log-format", "xml"}, exitUsage, "", "use text or json"},
		{"serve: bad redis url", nil, []string{"serve", "--redis-url", "ftp://nowhere"}, exitUsage, "", "redis url"},
		{"serve: lease too short", nil, []string{"serve", "--lease", "1ms"}, exitUsage, "", "lease must be at least"},
		{"serve: direct offer under 5 MiB", nil, []string{"serve", "--direct-above", "1MiB"}, exitUsage, "", "serve: --direct-above 1.0 MiB: it must be at least 5 MiB, S3's smallest part"},
		{"serve: direct offer with the direct door off", nil, []string{"serve", "--direct-above", "64MiB", "--direct-prefix", "off"}, exitUsage, "", "offer none (leave out --direct-above)"},
		{"serve: a sign role that is no ARN", nil, []string{"serve", "--s3-sign-role", "bogus"}, exitUsage, "", `the role that signs direct uploads, "bogus", is no ARN`},
		{"serve: URLs outliving a role's session", nil, []string{"serve", "--direct-url-ttl", "12h"}, exitUsage, "", "--direct-url-ttl 12h0m0s with --s3-sign-role auto: signed URLs valid for 12h0m0s cannot be signed by a role: its session must outlast the URLs by 15m"},
		{"serve: an empty sign role", nil, []string{"serve", "--s3-sign-role", ""}, exitUsage, "", "--s3-sign-role ($CHUNKUP_S3_SIGN_ROLE) is empty: give a role's ARN, auto, or off"},
		{"serve: URLs valid for no time", nil, []string{"serve", "--direct-url-ttl", "0"}, exitUsage, "", "--direct-url-ttl ($CHUNKUP_DIRECT_URL_TTL) 0: give how long a signed URL is valid"},
		{"dev: direct offer under 5 MiB", nil, []string{"dev", "--direct-above", "1MiB"}, exitUsage, "", "dev: --direct-above 1.0 MiB: it must be at least 5 MiB"},
		{"serve: a boolean flag's value apart", nil, []string{"serve", "--ocr", "false"}, exitUsage, "", "--ocr takes its value after =: --ocr=false"},
		{"serve: arguments", nil, []string{"serve", "extra"}, exitUsage, "", "serve takes no arguments"},
		{"serve: bad environment twin", map[string]string{"CHUNKUP_WORKER_CONCURRENCY": "many"}, []string{"serve"}, exitUsage, "", "$CHUNKUP_WORKER_CONCURRENCY"},
		{"serve -h", nil, []string{"serve", "-h"}, exitOK, "", "CHUNKUP_GRPC_ADDR"},

		{"upload: no file", nil, []string{"upload"}, exitUsage, "", "upload needs at least one FILE"},
		{"upload: a flag after the files", nil, []string{"upload", fileA, "--key", "k"}, exitUsage, "", "no file is named --key: flags go before the files"},
		{"upload: --key with two files", nil, []string{"upload", "--key", "k", "a", "b"}, exitUsage, "", "--key applies to one file only"},
		{"upload -h", nil, []string{"upload", "-h"}, exitOK, "", "CHUNKUP_SERVER"},
		{"upload -h: connecting", nil, []string{"upload", "-h"}, exitOK, "", "must answer within 1s"},
		{"upload -h: retries", nil, []string{"upload", "-h"}, exitOK, "", "Retries: once connected"},
		{"upload -h: resuming", nil, []string{"upload", "-h"}, exitOK, "", "CHUNKUP_STATE_DIR"},
		{"upload: -r without DIR", nil, []string{"upload", "-r"}, exitUsage, "", "upload -r needs at least one DIR"},
		{"upload: a directory without -r", nil, []string{"upload", dir}, exitUsage, "", "is a directory: upload -r"},
		{"upload: standard input twice", nil, []string{"upload", "-", "-"}, exitUsage, "", "standard input) is named twice"},
		{"upload: --key with -r", nil, []string{"upload", "-r", "--key", "k", dir}, exitUsage, "", "--key applies to one file only"},
		{"upload: --key and --prefix", nil, []string{"upload", "--key", "k", "--prefix", "p", fileA}, exitUsage, "", "--key and --prefix"},
		{"upload: --resume with -r", nil, []string{"upload", "-r", "--resume", "id", dir}, exitUsage, "", "--resume applies to one file only"},
		{"upload: --resume and --no-resume", nil, []string{"upload", "--resume", "id", "--no-resume", fileA}, exitUsage, "", "--resume and --no-resume"},
		{"upload: --metadata without =", nil, []string{"upload", "--metadata", "k", fileA}, exitUsage, "", `"k": want KEY=VALUE`},
		{"upload: --metadata without a key", nil, []string{"upload", "--metadata", "=v", fileA}, exitUsage, "", "want KEY=VALUE"},
		{"upload: --metadata key twice", nil, []string{"upload", "--metadata", "k=1", "--metadata", "k=2", fileA}, exitUsage, "", `metadata key "k" given twice`},
		{"upload: two files, one key", nil, []string{"upload", "--prefix", "p", fileA, fileB}, exitUsage, "", `would both be stored at key "p/x.txt"`},
		{"status -h", nil, []string{"status", "-h"}, exitOK, "", "must answer within 1s"},
		{"events -h", nil, []string{"events", "-h"}, exitOK, "", `(default "127.0.0.1:7073")`},
		{"completion: no shell", nil, []string{"completion"}, exitUsage, "", "completion needs one shell"},
		{"completion: unknown shell", nil, []string{"completion", "tcsh"}, exitUsage, "", `unknown shell "tcsh"`},
		{"help lists completion", nil, []string{"help"}, exitOK, "completion", ""},
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

// TestUnreachable runs every command that talks to a server, or to Kafka, against an
// address where nothing listens and one where a listener never answers: each fails
// with one line that says it cannot reach it (an upload does not retry silently).
func TestUnreachable(t *testing.T) {
	clearEnv(t)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := closed.Addr().String()
	closed.Close()
	file, _ := writeRandomFile(t, "f.bin", 10)
	id := "abcdefghijklmnopqrstuvwxyz"
	for _, where := range []struct{ name, addr string }{{"nothing listens", refused}, {"no answer", silentListener(t)}} {
		for _, args := range [][]string{
			{"status", "--server", where.addr, id},
			{"abort", "--server", where.addr, id},
			{"watch", "--server", where.addr, id},
			{"upload", "--server", where.addr, file},
			{"ocr", "status", "--server", where.addr, id},
			{"events", "--brokers", where.addr, "--count", "1"},
		} {
			t.Run(where.name+": "+args[0], func(t *testing.T) {
				code, stdout, stderr := runCLI(t, args...)
				if code != exitFailure || stdout != "" {
					t.Fatalf("exit %d, stdout %q; want %d and nothing\nstderr: %s", code, stdout, exitFailure, stderr)
				}
				if line := strings.TrimSpace(stderr); strings.Contains(line, "\n") || !strings.Contains(line, "cannot reach") || !strings.Contains(line, where.addr) {
					t.Fatalf("stderr %q; want one line saying that %s cannot be reached", stderr, where.addr)
				}
			})
		}
	}
}

// silentListener accepts connections and never answers, until the test ends.
func silentListener(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

// startServer runs a whole chunkup process (every role) on a real Redis and MinIO until
// the test ends, and returns its gRPC address and an S3 client for the MinIO.
func startServer(t *testing.T) (addr string, s3c *s3.Client) {
	t.Helper()
	r := testenv.StartRedis(t)
	m := testenv.StartMinIO(t)
	a := runApp(t, app.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "off", RedisURL: r.URL(),
		S3: m.S3Config(), Bucket: bucket, ShutdownTimeout: 5 * time.Second})
	return a.GRPCAddr(), m.Client(t)
}

// runApp runs a chunkup process in this test process until the test ends.
func runApp(t *testing.T, cfg app.Config) *app.App {
	t.Helper()
	ctx := testenv.Context(t, time.Minute)
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	a, err := app.New(ctx, cfg)
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
	return a
}

// dialTest connects the SDK to addr, with a context, until the test ends.
func dialTest(t *testing.T, addr string) (context.Context, *client.Client) {
	t.Helper()
	c, err := client.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return testenv.Context(t, time.Minute), c
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
	// Compact, always: protojson adds spaces at random, which a script matching the
	// output would trip on.
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(line)); err != nil || compact.String() != line {
		t.Errorf("output %s is not compact JSON", line)
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

// parseUploads parses the output of upload --json: for each upload a line when it
// starts (ACTIVE) and one when it ends, after every start. It returns the final
// uploads, in the order printed, checking that they have the keys named.
func parseUploads(t *testing.T, stdout string, keys ...string) []*chunkupv1.Upload {
	t.Helper()
	lines := map[string]int{}
	var finals []*chunkupv1.Upload
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		up := parseUpload(t, line)
		lines[up.UploadId]++
		switch lines[up.UploadId] {
		case 1:
			if up.State != chunkupv1.UploadState_UPLOAD_STATE_ACTIVE || len(finals) > 0 {
				t.Fatalf("upload %s starts with %v, after %d final uploads; want ACTIVE, before any\n%s", up.UploadId, up.State, len(finals), stdout)
			}
		case 2:
			finals = append(finals, parseUpload(t, line, keys...))
		default:
			t.Fatalf("upload %s printed %d times:\n%s", up.UploadId, lines[up.UploadId], stdout)
		}
	}
	if len(finals) != len(lines) {
		t.Fatalf("%d uploads started, %d ended:\n%s", len(lines), len(finals), stdout)
	}
	return finals
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

	code, stdout, stderr := runCLI(t, "upload", "--server", addr, "--json", "--metadata", "owner=ops", "--metadata", "note=a=b", file)
	if code != exitOK {
		t.Fatalf("upload exited %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	up := parseUploads(t, stdout, "size", "etag")[0]
	requireCompleted(t, up, "three.bin", len(data))
	requireObject(t, s3c, up.Key, data)
	if want := map[string]string{"owner": "ops", "note": "a=b"}; !maps.Equal(up.Metadata, want) {
		t.Errorf("upload has metadata %v, want %v", up.Metadata, want)
	}

	t.Run("health of each service", func(t *testing.T) {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, service := range []string{"", "chunkup.v1.UploadService", "chunkup.v1.DocumentService"} {
			r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
			if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("health of %q: %v, %v; want SERVING", service, r, err)
			}
		}
	})

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

	t.Run("status of an active upload", func(t *testing.T) {
		ctx, c := dialTest(t, addr)
		created, err := c.API().CreateUpload(ctx, &chunkupv1.CreateUploadRequest{Name: "half.bin", ExpectedSize: proto.Int64(9 << 20)})
		if err != nil {
			t.Fatal(err)
		}
		stream, err := c.API().UploadChunk(ctx)
		if err != nil {
			t.Fatal(err)
		}
		first := make([]byte, created.Upload.ChunkSize)
		if err := stream.Send(&chunkupv1.UploadChunkRequest{UploadId: created.Upload.UploadId, ChunkNumber: 1, Data: first}); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
		_ = stream.CloseSend()
		code, stdout, stderr := runCLI(t, "status", "--server", addr, created.Upload.UploadId)
		want := regexp.MustCompile(fmt.Sprintf(`^%s ACTIVE s3://%s/%s received 1/2 chunks \(%d of %d bytes\), stored [01] \((0|%d) bytes\)\n$`,
			created.Upload.UploadId, bucket, regexp.QuoteMeta(created.Upload.Key), len(first), 9<<20, len(first)))
		if code != exitOK || !want.MatchString(stdout) {
			t.Fatalf("status exited %d, printed %q; want %s\nstderr: %s", code, stdout, want, stderr)
		}
	})

	t.Run("ls", func(t *testing.T) {
		ctx, c := dialTest(t, addr)
		created, err := c.API().CreateUpload(ctx, &chunkupv1.CreateUploadRequest{Name: "listed.bin"})
		if err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := runCLI(t, "ls", "--uploads", "--server", addr, "--json")
		if code != exitOK {
			t.Fatalf("ls exited %d\nstderr: %s", code, stderr)
		}
		found := false
		for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
			if up := parseUpload(t, line); up.UploadId == created.Upload.UploadId {
				found = up.State == chunkupv1.UploadState_UPLOAD_STATE_ACTIVE
			}
		}
		if !found {
			t.Fatalf("ls printed %q, without the active upload %s", stdout, created.Upload.UploadId)
		}
	})

	t.Run("abort an active upload", func(t *testing.T) {
		ctx, c := dialTest(t, addr)
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
		finals := parseUploads(t, stdout, "size", "etag")
		if len(finals) != 2 {
			t.Fatalf("upload printed %d final uploads, want one per file:\n%s", len(finals), stdout)
		}
		for i, f := range []struct {
			name string
			data []byte
		}{{"small.txt", smallData}, {"nine.bin", bigData}} {
			got := finals[i]
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

// TestDescribeMismatch: a resume with another input says so once ("chunkup:" is the
// command's), and what to do.
func TestDescribeMismatch(t *testing.T) {
	err := fmt.Errorf("upload: %w", &client.MismatchError{UploadID: "u1", Reason: "chunk 1 differs"})
	got := describe(err)
	if strings.Contains(got, "chunkup:") || !strings.Contains(got, "upload u1 (chunk 1 differs)") || !strings.Contains(got, "upload it as a new upload") {
		t.Errorf("describe(%v) = %q", err, got)
	}
}

// A direct upload's line says how many parts it has only when it knows, and speaks of
// the server's check only while there is one to come.
func TestUploadLineDirect(t *testing.T) {
	for _, tc := range []struct {
		state chunkupv1.UploadState
		total uint32
		want  string
	}{
		{chunkupv1.UploadState_UPLOAD_STATE_ACTIVE, 3, "u ACTIVE s3://b/k direct to S3 (3 parts, 20000000 bytes in all): the client puts its parts into S3, and the server checks them when it completes"},
		{chunkupv1.UploadState_UPLOAD_STATE_ACTIVE, 0, "u ACTIVE s3://b/k direct to S3 (20000000 bytes in all): the client puts its parts into S3, and the server checks them when it completes"},
		{chunkupv1.UploadState_UPLOAD_STATE_COMPLETING, 3, "u COMPLETING s3://b/k direct to S3 (3 parts, 20000000 bytes in all): the server checked its parts and is completing the object"},
		{chunkupv1.UploadState_UPLOAD_STATE_FAILED, 0, "u FAILED s3://b/k direct to S3 (20000000 bytes in all): part 2 was reported with another ETag"},
		{chunkupv1.UploadState_UPLOAD_STATE_ABORTED, 3, "u ABORTED s3://b/k direct to S3 (3 parts, 20000000 bytes in all)"},
	} {
		up := &chunkupv1.Upload{UploadId: "u", State: tc.state, Bucket: "b", Key: "k", Direct: true, TotalChunks: tc.total, ExpectedSize: 20000000}
		if tc.state == chunkupv1.UploadState_UPLOAD_STATE_FAILED {
			up.Error = "part 2 was reported with another ETag"
		}
		if got := uploadLine(up); got != tc.want {
			t.Errorf("%v:\n got %s\nwant %s", tc.state, got, tc.want)
		}
	}
}
