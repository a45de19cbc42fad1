package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/chunkup/chunkup/app"
	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/internal/testdocs"
	"github.com/chunkup/chunkup/internal/testenv"
)

// TestDevMode starts `chunkup dev` as a user would, uploads a file with
// `chunkup upload --json`, reads the UploadCompleted event from the dev Kafka address,
// finds the object's bytes under --data, and resumes a half-sent upload with
// `chunkup upload --resume`.
func TestDevMode(t *testing.T) {
	ctx, bin, data, d := devTest(t)
	grpcAddr, kafkaAddr := d.grpc, d.kafka

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
	// The embedded store keeps no checksums: stat gives the CRC32C its upload recorded.
	var statOut bytes.Buffer
	stat := exec.CommandContext(ctx, bin, "stat", "--server", grpcAddr, up.Key)
	stat.Stdout, stat.Stderr = &statOut, &statOut
	if err := stat.Run(); err != nil || !strings.Contains(statOut.String(), fmt.Sprintf("crc32c:        %08x", crc.Checksum(content))) {
		t.Fatalf("stat %s (%v):\n%s\nwant the upload's CRC32C %08x", up.Key, err, statOut.String(), crc.Checksum(content))
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

	// Direct uploads: the embedded store checks no checksum, so the object's CRC32C is
	// read from the object, not taken from the client; an empty file (one empty part,
	// which gofakes3 alone refuses) works too.
	empty := filepath.Join(t.TempDir(), "empty.bin")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		file string
		data []byte
	}{{file, content}, {empty, nil}} {
		d := cliUpload(t, ctx, bin, "upload", "--server", grpcAddr, "--json", "--direct", tc.file)
		if d.State != chunkupv1.UploadState_UPLOAD_STATE_COMPLETED || !d.Direct || d.GetCrc32C() != crc.Checksum(tc.data) {
			t.Fatalf("direct upload of %d bytes: %v, want a COMPLETED direct upload with the file's CRC32C", len(tc.data), d)
		}
		stored, err := os.ReadFile(filepath.Join(data, "s3", "buckets", d.Bucket, d.Key))
		if err != nil || !bytes.Equal(stored, tc.data) {
			t.Fatalf("the direct upload's object differs from the file (%v)", err)
		}
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

// TestDevOCR: `chunkup dev` with Tesseract installed says in its banner that OCR is on,
// and OCRs a PNG uploaded with no extra flags: `chunkup ocr watch` follows it to a
// decision and `chunkup ocr status --text` prints its words, from dev's address.
func TestDevOCR(t *testing.T) {
	ctx, bin, _, d := devTest(t)
	if !strings.Contains(d.Stdout(), "  OCR    on: tesseract at ") {
		t.Fatalf("dev's banner does not say OCR is on:\n%s", d.Stdout())
	}
	file := filepath.Join(t.TempDir(), "receipt.png")
	if err := os.WriteFile(file, testdocs.PNG("RECEIPT 8642", "THANK YOU"), 0o600); err != nil {
		t.Fatal(err)
	}
	up := cliUpload(t, ctx, bin, "upload", "--server", d.grpc, "--json", file)
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("chunkup %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	watched := run("ocr", "watch", "--server", d.grpc, "--json", up.UploadId)
	lines := strings.Split(strings.TrimSpace(watched), "\n")
	var last chunkupv1.Document
	if err := protojson.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatal(err)
	}
	switch last.Status {
	case chunkupv1.DocumentStatus_DOCUMENT_STATUS_AUTO_APPROVED, chunkupv1.DocumentStatus_DOCUMENT_STATUS_NEEDS_REVIEW,
		chunkupv1.DocumentStatus_DOCUMENT_STATUS_AUTO_REJECTED:
	default:
		t.Fatalf("ocr watch ended on %v, want a decision", &last)
	}
	text := run("ocr", "status", "--server", d.grpc, "--text", up.UploadId)
	for _, w := range []string{"RECEIPT", "8642", "THANK"} {
		if !strings.Contains(text, w) {
			t.Fatalf("ocr status --text lacks %q:\n%s", w, text)
		}
	}
}

// TestDevOCRBanner: the banner says why OCR is off, and how to turn it on.
func TestDevOCRBanner(t *testing.T) {
	for _, tc := range []struct {
		mode, path, want string
	}{
		{"auto", "no-such-tesseract", "off: tesseract is not on PATH; install it"},
		{"false", "tesseract", "off (--ocr=false)"},
		{"true", "no-such-tesseract", "on, but tesseract is not on PATH"},
	} {
		o := app.OCRConfig{}
		o.Tesseract.Path, o.Tesseract.PdftoppmPath = tc.path, "pdftoppm"
		line, err := devOCR(tc.mode, &o)
		if err != nil || !strings.HasPrefix(line, tc.want) || o.Enabled != strings.HasPrefix(tc.want, "on") {
			t.Errorf("devOCR(%s, %s) = %q, %v, enabled %v; want %q", tc.mode, tc.path, line, err, o.Enabled, tc.want)
		}
	}
	if _, err := devOCR("maybe", &app.OCRConfig{}); err == nil {
		t.Error("devOCR accepted --ocr maybe")
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
	finals := parseUploads(t, stdout.String())
	if len(finals) != 1 {
		t.Fatalf("chunkup %v printed %d final uploads, want 1", args, len(finals))
	}
	return finals[0]
}

// devTest builds chunkup and starts `chunkup dev` on a data directory of the test's
// own, with a context for the test.
func devTest(t *testing.T) (ctx context.Context, bin, data string, d devProcess) {
	t.Helper()
	isolateState(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	bin = testenv.BuildBinary(t, "github.com/chunkup/chunkup/cmd/chunkup")
	data = t.TempDir()
	return ctx, bin, data, startDev(t, bin, data)
}

// devProcess is a `chunkup dev` started by startDev, and its addresses.
type devProcess struct {
	*testenv.Process
	grpc, http, s3, kafka string
}

// devArgs are the arguments of a `chunkup dev` on data with free ports.
func devArgs(t *testing.T, data string) (args []string, d devProcess) {
	t.Helper()
	port := func() string { return fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)) }
	d = devProcess{grpc: port(), http: port(), s3: port(), kafka: port()}
	return []string{"dev", "--data", data, "--grpc-addr", d.grpc, "--http-addr", d.http,
		"--s3-addr", d.s3, "--kafka-addr", d.kafka, "--redis", "spawn"}, d
}

// startDev starts `chunkup dev` on data and waits until it is ready.
func startDev(t *testing.T, bin, data string) devProcess {
	t.Helper()
	args, d := devArgs(t, data)
	d.Process = testenv.StartProcess(t, bin, args, nil)
	testenv.WaitReady(t, d.Process, d.http)
	return d
}

// procStat reads a process's state letter and parent pid from /proc; ok is false when
// there is no such process.
func procStat(pid int) (state byte, ppid int, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, false
	}
	// pid (comm) S ppid ...: the fields follow the last ')', as comm may hold anything.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 2 {
		return 0, 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	return f[0][0], ppid, true
}

// alive reports whether pid is a process that has not exited (a zombie has).
func alive(pid int) bool {
	state, _, ok := procStat(pid)
	return ok && state != 'Z' && state != 'X'
}

// children lists the live processes whose parent is pid.
func children(t *testing.T, pid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var kids []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, ppid, ok := procStat(p); ok && ppid == pid && alive(p) {
			kids = append(kids, p)
		}
	}
	return kids
}

// requireGone waits until none of pids is alive, and fails the test if one still is
// after a minute.
func requireGone(t *testing.T, why string, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: process %d is still running", why, pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestDevSecondInstance starts `chunkup dev` twice on one data directory: the second
// exits 1 at once, with one line naming the first's pid and no panic, without starting
// a second redis-server; the first still completes an upload.
func TestDevSecondInstance(t *testing.T) {
	ctx, bin, data, first := devTest(t)

	args, _ := devArgs(t, data)
	second := testenv.StartProcess(t, bin, args, nil)
	if code := second.ExitCode(); code != exitFailure {
		t.Fatalf("second dev on the same data directory exited %d, want %d\nstderr: %s", code, exitFailure, second.Stderr())
	}
	stderr := strings.TrimSpace(second.Stderr())
	want := fmt.Sprintf("in use by process %d", first.Pid())
	if strings.Contains(stderr, "\n") || !strings.Contains(stderr, want) || !strings.Contains(stderr, "--data") {
		t.Fatalf("second dev said %q; want one line with %q and what to do (--data)", stderr, want)
	}
	if kids := children(t, first.Pid()); len(kids) != 1 {
		t.Fatalf("first dev has children %v; want its one redis-server", kids)
	}

	file, content := writeRandomFile(t, "after.bin", 6<<20)
	up := cliUpload(t, ctx, bin, "upload", "--server", first.grpc, "--json", file)
	stored, err := os.ReadFile(filepath.Join(data, "s3", "buckets", up.Bucket, up.Key))
	if up.State != chunkupv1.UploadState_UPLOAD_STATE_COMPLETED || err != nil || !bytes.Equal(stored, content) {
		t.Fatalf("upload to the first dev: %v; object: %v", up, err)
	}
}

// TestDevStartErrors starts `chunkup dev` where it cannot run: it exits 1 with one line
// that says what is wrong and which flag changes it, and starts nothing.
func TestDevStartErrors(t *testing.T) {
	clearEnv(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	busy := taken.Addr().String()
	notADir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"gRPC address in use", []string{"--grpc-addr", busy}, "--grpc-addr " + busy + " is in use"},
		{"HTTP address in use", []string{"--http-addr", busy}, "--http-addr " + busy + " is in use"},
		{"S3 address in use", []string{"--s3-addr", busy}, "--s3-addr " + busy + " is in use"},
		{"Kafka address in use", []string{"--kafka-addr", busy}, "--kafka-addr " + busy + " is in use"},
		{"Redis address in use", []string{"--redis-addr", busy}, "--redis-addr " + busy + " is in use"},
		{"data directory is a file", []string{"--data", notADir}, notADir},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args, _ := devArgs(t, t.TempDir())
			code, stdout, stderr := runCLI(t, append(args, tc.args...)...)
			if code != exitFailure || stdout != "" {
				t.Fatalf("exit %d, stdout %q; want %d and nothing\nstderr: %s", code, stdout, exitFailure, stderr)
			}
			if lines := strings.Split(strings.TrimSpace(stderr), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "chunkup: ") || !strings.Contains(lines[0], tc.want) {
				t.Fatalf("stderr %q; want one line containing %q", stderr, tc.want)
			}
		})
	}
}

// TestDevKilled kills `chunkup dev` with SIGKILL: the redis-server it spawned goes too.
func TestDevKilled(t *testing.T) {
	bin := testenv.BuildBinary(t, "github.com/chunkup/chunkup/cmd/chunkup")
	d := startDev(t, bin, t.TempDir())
	kids := children(t, d.Pid())
	if len(kids) == 0 {
		t.Fatal("chunkup dev has no child process: it did not spawn redis-server")
	}
	if err := syscall.Kill(d.Pid(), syscall.SIGKILL); err != nil { // dev alone, not its group
		t.Fatal(err)
	}
	requireGone(t, "after chunkup dev was killed", append(kids, d.Pid())...)
}

// TestDevParentKilled runs `chunkup dev` under a shell, as `go run` does, and kills the
// shell with SIGKILL: dev notices, shuts down and stops its redis-server.
func TestDevParentKilled(t *testing.T) {
	bin := testenv.BuildBinary(t, "github.com/chunkup/chunkup/cmd/chunkup")
	args, d := devArgs(t, t.TempDir())
	shell := testenv.StartProcess(t, "/bin/sh", append([]string{"-c", `"$0" "$@" & echo "dev pid $!"; wait`, bin}, args...), nil)
	testenv.WaitReady(t, shell, d.http)
	var devPid int
	if _, err := fmt.Sscanf(shell.Stdout(), "dev pid %d", &devPid); err != nil {
		t.Fatalf("shell output %q: %v", shell.Stdout(), err)
	}
	t.Cleanup(func() { // should this test fail, dev is an orphan that the shell's group kill misses
		if alive(devPid) {
			_ = syscall.Kill(devPid, syscall.SIGKILL)
		}
	})
	kids := children(t, devPid)
	if len(kids) == 0 {
		t.Fatal("chunkup dev has no child process: it did not spawn redis-server")
	}
	if err := syscall.Kill(shell.Pid(), syscall.SIGKILL); err != nil { // the shell alone
		t.Fatal(err)
	}
	requireGone(t, "after the shell that started chunkup dev was killed", append(kids, devPid)...)
}
