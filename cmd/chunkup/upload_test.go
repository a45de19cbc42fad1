package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chunkup/chunkup/app"
	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/testenv"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// writeTree writes files (relative path → content) under a new directory named name,
// and returns the directory.
func writeTree(t *testing.T, name string, files map[string][]byte) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), name)
	for rel, data := range files {
		path := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestUploadTree uploads a tree with nested folders, empty files, an empty folder and a
// link to a file: every file's object is exact under PREFIX/DIR/RELATIVE/PATH, and a
// summary closes the run.
func TestUploadTree(t *testing.T) {
	clearEnv(t)
	addr, s3c := startServer(t)
	files := map[string][]byte{
		"top.txt":              []byte("top"),
		"empty.txt":            nil,
		"a/one.bin":            bytes.Repeat([]byte{1}, 9<<20), // two chunks
		"a/b/c/deep.txt":       []byte("deep"),
		"a/b/c/also-empty.txt": nil,
	}
	root := writeTree(t, "photos", files)
	if err := os.MkdirAll(filepath.Join(root, "nothing", "here"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "top.txt"), filepath.Join(root, "link.txt")); err != nil {
		t.Fatal(err)
	}
	files["link.txt"] = files["top.txt"]

	for _, tc := range []struct {
		name   string
		args   []string
		prefix string
	}{
		{"default prefix", nil, "uploads/"},
		{"--prefix without a slash", []string{"--prefix", "backups/2026"}, "backups/2026/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"upload", "--server", addr, "--json", "-r", "--jobs", "3"}, tc.args...)
			code, stdout, stderr := runCLI(t, append(args, root)...)
			if code != exitOK {
				t.Fatalf("upload -r exited %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
			}
			finals := parseUploads(t, stdout, "etag")
			if len(finals) != len(files) {
				t.Fatalf("%d uploads for %d files:\n%s", len(finals), len(files), stdout)
			}
			byKey := map[string]*chunkupv1.Upload{}
			for _, up := range finals {
				byKey[up.Key] = up
			}
			for rel, data := range files {
				key := tc.prefix + "photos/" + rel
				up := byKey[key]
				if up == nil || up.State != chunkupv1.UploadState_UPLOAD_STATE_COMPLETED || up.Size != int64(len(data)) {
					t.Fatalf("no completed upload of %d bytes at %s: %v", len(data), key, up)
				}
				requireObject(t, s3c, key, data)
			}
			if want := fmt.Sprintf("uploaded %d of %d files", len(files), len(files)); !strings.Contains(stderr, want) {
				t.Errorf("stderr has no summary %q:\n%s", want, stderr)
			}
		})
	}
}

// TestProgressDisplay drives the display as uploads do, the files starting in the
// reverse order of the arguments: the bars keep the arguments' order above the total,
// and a resumed upload's progress starts where the server is.
func TestProgressDisplay(t *testing.T) {
	jobs := []uploadJob{{name: "first.bin", size: 30 << 20}, {name: "second.bin", size: 10}, {name: "third.bin", size: 0}}
	resumedAt := int64(20 << 20) // first.bin: the server holds two of its chunks
	for _, mode := range []string{"bars", "lines"} {
		t.Run(mode, func(t *testing.T) {
			var out bytes.Buffer
			d := newProgressDisplay(mode, &out, jobs, false)
			for i := len(jobs) - 1; i >= 0; i-- {
				j := jobs[i]
				track := d.track(i, j)
				up := &chunkupv1.Upload{UploadId: j.name, ExpectedSize: j.size}
				if i == 0 {
					up.ReceivedBytes = resumedAt
				}
				track.start(up)
				// The SDK counts the chunks the server holds as it reads past them.
				for acked := int64(0); acked < j.size; acked += min(8<<20, j.size) {
					track.update(client.Progress{BytesAcked: acked, Size: j.size})
				}
				track.update(client.Progress{BytesAcked: j.size, Size: j.size})
				track.done(true)
			}
			d.finish()
			text := out.String()
			if mode == "bars" {
				last := -1
				for _, name := range []string{"first.bin", "second.bin", "third.bin", "total"} {
					i := strings.LastIndex(text, name)
					if i <= last {
						t.Fatalf("the last frame does not draw %s after the bars before it:\n%s", name, text)
					}
					last = i
				}
				return
			}
			line := regexp.MustCompile(`first\.bin: +\d+% \((\d+) of`).FindStringSubmatch(text)
			if line == nil {
				t.Fatalf("no progress line of first.bin:\n%s", text)
			}
			if n, _ := strconv.ParseInt(line[1], 10, 64); n < resumedAt {
				t.Fatalf("the resumed upload's progress starts at %d bytes; the server held %d:\n%s", n, resumedAt, text)
			}
		})
	}
}

// metric reads a sample from a chunkup process's /metrics, e.g.
// chunkup_chunks_staged_total{outcome="new"}; 0 when it has none.
func metric(t *testing.T, httpAddr, sample string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), sample+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return 0
}

// TestResumeAfterKill kills the CLI (SIGKILL) in the middle of an upload and runs it
// again with the same arguments: it resumes the same upload without being told, its
// bar starts where the server is, no chunk the server held is sent again, and the
// object is exact.
//
// The server runs the api role only, with a staged-bytes budget of a few chunks, so the
// first run stalls with part of the file acknowledged; workers start before the second.
func TestResumeAfterKill(t *testing.T) {
	stateDir := isolateState(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := testenv.StartRedis(t)
	m := testenv.StartMinIO(t)
	api := app.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", RedisURL: r.URL(), S3: m.S3Config(), Bucket: bucket,
		Roles: []string{app.RoleAPI}, ShutdownTimeout: 5 * time.Second}
	api.Upload.ChunkSize, api.Upload.StagedBytesBudget, api.Upload.BudgetWait = 5<<20, 12<<20, 10*time.Minute
	a := runApp(t, api)
	const chunks = 8
	file, data := writeRandomFile(t, "resumed.bin", chunks*5<<20)
	bin := testenv.BuildBinary(t, "github.com/chunkup/chunkup/cmd/chunkup")
	args := []string{"upload", "--server", a.GRPCAddr(), "--progress", "lines", file}

	first := testenv.StartProcess(t, bin, args, nil)
	started := regexp.MustCompile(`resumed\.bin: upload ([a-z0-9]+) started`)
	var id string
	deadline := time.Now().Add(time.Minute)
	for id == "" {
		if m := started.FindStringSubmatch(first.Stderr()); m != nil {
			id = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("no upload id on stderr: %q", first.Stderr())
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, c := dialTest(t, a.GRPCAddr())
	var held *chunkupv1.Upload
	var err error
	for held == nil || len(held.ReceivedChunks) < 2 {
		if held, err = c.Get(ctx, id); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server holds %v after a minute", held.ReceivedChunks)
		}
		time.Sleep(10 * time.Millisecond)
	}
	first.Kill()
	if held, err = c.Get(ctx, id); err != nil || len(held.ReceivedChunks) == chunks {
		t.Fatalf("after the kill the server holds %v (%v); want part of the file", held.GetReceivedChunks(), err)
	}

	workers := api
	workers.Roles, workers.GRPCAddr, workers.HTTPAddr = []string{app.RoleWorker, app.RoleCompleter}, "", "off"
	runApp(t, workers)
	var stdout, stderr bytes.Buffer
	again := exec.CommandContext(ctx, bin, args...)
	again.Stdout, again.Stderr = &stdout, &stderr
	if err := again.Run(); err != nil {
		t.Fatalf("second run: %v\nstderr: %s", err, stderr.String())
	}
	if want := "resuming upload " + id; !strings.Contains(stderr.String(), want) {
		t.Errorf("second run's stderr does not say %q:\n%s", want, stderr.String())
	}
	fields := strings.Fields(stdout.String())
	if len(fields) < 3 || fields[0] != id || fields[1] != "COMPLETED" {
		t.Fatalf("second run printed %q; want upload %s COMPLETED", stdout.String(), id)
	}
	requireObject(t, m.Client(t), strings.TrimPrefix(fields[2], "s3://"+bucket+"/"), data)

	// Its progress starts where the server was, not at 0.
	progress := regexp.MustCompile(`resumed\.bin: +\d+% \((\d+) of`).FindStringSubmatch(stderr.String())
	if progress == nil {
		t.Fatalf("no progress line in the second run's stderr:\n%s", stderr.String())
	}
	if n, _ := strconv.ParseInt(progress[1], 10, 64); n < held.ReceivedBytes {
		t.Errorf("the resumed progress starts at %d bytes; the server held %d", n, held.ReceivedBytes)
	}
	// Every chunk was staged once: none of those held was sent again.
	newChunks := metric(t, a.HTTPAddr(), `chunkup_chunks_staged_total{outcome="new"}`)
	repeats := metric(t, a.HTTPAddr(), `chunkup_chunks_staged_total{outcome="duplicate"}`)
	if newChunks != chunks || repeats != 0 {
		t.Errorf("the server staged %v chunks and got %v again; want each of the %d once", newChunks, repeats, chunks)
	}
	// A completed upload is forgotten: nothing is left to resume.
	state, err := os.ReadFile(filepath.Join(stateDir, "uploads.json"))
	if err != nil || strings.Contains(string(state), id) {
		t.Errorf("the state still lists %s (%v):\n%s", id, err, state)
	}
}

// TestCompletion sources the bash script and completes command lines with it; the zsh
// and fish scripts name every command and flag.
func TestCompletion(t *testing.T) {
	clearEnv(t)
	code, script, stderr := runCLI(t, "completion", "bash")
	if code != exitOK {
		t.Fatalf("completion bash exited %d: %s", code, stderr)
	}
	path := filepath.Join(t.TempDir(), "chunkup.bash")
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		line string // completed at its end
		want []string
	}{
		{"chunkup ", []string{"serve", "dev", "upload", "status", "abort", "watch", "events", "apikey", "ocr", "completion"}},
		{"chunkup up", []string{"upload"}},
		{"chunkup upload --m", []string{"--metadata"}},
		{"chunkup upload --server 127.0.0.1:7070 --p", []string{"--parallel", "--prefix", "--progress"}},
		{"chunkup upload -", []string{"-r", "--recursive", "--no-resume", "--json", "--jobs"}},
		{"chunkup events --", []string{"--brokers", "--count", "--group", "--topic"}},
		{"chunkup dev --e", []string{"--exit-with-parent"}},
		{"chunkup ocr ", []string{"status", "watch", "reprocess", "stats", "dead", "purge"}},
		{"chunkup ocr dead ", []string{"list", "requeue"}},
		{"chunkup ocr dead requeue --", []string{"--all", "--server", "--api-key"}},
		{"chunkup ocr purge --", []string{"--yes", "--server"}},
		{"chunkup ocr status --", []string{"--text", "--json"}},
		{"chunkup completion ", []string{"bash", "zsh", "fish"}},
	} {
		t.Run(tc.line, func(t *testing.T) {
			words := strings.Fields(tc.line)
			if strings.HasSuffix(tc.line, " ") {
				words = append(words, "")
			}
			quoted := make([]string, len(words))
			for i, w := range words {
				quoted[i] = zshQuote(w)
			}
			cmd := exec.Command("bash", "-c", fmt.Sprintf(`source %s; COMP_WORDS=(%s); COMP_CWORD=%d; _chunkup; printf '%%s\n' "${COMPREPLY[@]}"`,
				zshQuote(path), strings.Join(quoted, " "), len(words)-1))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("bash: %v\n%s", err, out)
			}
			got := strings.Fields(string(out))
			for _, w := range tc.want {
				if !slices.Contains(got, w) {
					t.Errorf("completing %q offers %v; want %s among them", tc.line, got, w)
				}
			}
		})
	}
	for _, shell := range []string{"zsh", "fish"} {
		t.Run(shell, func(t *testing.T) {
			code, script, stderr := runCLI(t, "completion", shell)
			if code != exitOK {
				t.Fatalf("completion %s exited %d: %s", shell, code, stderr)
			}
			for _, n := range completionTree(context.Background()) {
				if !strings.Contains(script, n.path) {
					t.Errorf("the %s script does not know %s", shell, n.path)
				}
				for _, f := range n.flags {
					if !strings.Contains(script, f.Name) {
						t.Errorf("the %s script does not know %s's flag %s", shell, n.path, f.Name)
					}
				}
			}
		})
	}
}

// TestAutomaticResume records, for a file, uploads that cannot go on, then uploads the
// file: each time a new upload starts (saying why when the recorded one ended), the
// object is exact, and nothing is left in the state.
func TestAutomaticResume(t *testing.T) {
	clearEnv(t)
	addr, s3c := startServer(t)
	ctx, c := dialTest(t, addr)
	file, data := writeRandomFile(t, "again.bin", 100)
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	created, err := c.API().CreateUpload(ctx, &chunkupv1.CreateUploadRequest{Name: "again.bin"})
	if err != nil {
		t.Fatal(err)
	}
	aborted := created.Upload.UploadId
	if _, err := c.Abort(ctx, aborted, "test"); err != nil {
		t.Fatal(err)
	}
	entry := resumeEntry{Path: file, Size: fi.Size(), ModTime: fi.ModTime().UTC(), Server: addr}
	for _, tc := range []struct {
		name   string
		entry  func(resumeEntry) resumeEntry
		args   []string
		stderr string
	}{
		{"the upload was aborted", func(e resumeEntry) resumeEntry { e.UploadID = aborted; return e }, nil,
			"upload " + aborted + " is ABORTED; starting a new one"},
		{"the upload is gone", func(e resumeEntry) resumeEntry { e.UploadID = "abcdefghijklmnopqrstuvwxyz"; return e }, nil,
			"upload abcdefghijklmnopqrstuvwxyz is gone"},
		{"the file changed", func(e resumeEntry) resumeEntry { e.UploadID, e.Size = aborted, 99; return e }, nil, ""},
		{"another key", func(e resumeEntry) resumeEntry { e.UploadID, e.Key = aborted, "elsewhere"; return e }, nil, ""},
		{"--no-resume", func(e resumeEntry) resumeEntry { e.UploadID = aborted; return e }, []string{"--no-resume"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state, err := openResumeState()
			if err != nil {
				t.Fatal(err)
			}
			recorded := tc.entry(entry)
			if err := state.record(recorded); err != nil {
				t.Fatal(err)
			}
			args := append([]string{"upload", "--server", addr, "--json"}, tc.args...)
			code, stdout, stderr := runCLI(t, append(args, file)...)
			if code != exitOK || !strings.Contains(stderr, tc.stderr) {
				t.Fatalf("upload exited %d; stderr %q, want %q in it", code, stderr, tc.stderr)
			}
			if tc.stderr == "" && strings.Contains(stderr, "starting a new one") {
				t.Fatalf("stderr %q: the recorded upload is not this file's, to this place, to resume", stderr)
			}
			up := parseUploads(t, stdout)[0]
			if up.UploadId == recorded.UploadID {
				t.Fatalf("upload continued %s", up.UploadId)
			}
			requireObject(t, s3c, up.Key, data)
			if err := state.drop(recorded.UploadID); err != nil { // what the case left behind
				t.Fatal(err)
			}
			if id, _, err := state.lookup(entry); err != nil || id != "" {
				t.Fatalf("the state still holds upload %q (%v) for the file", id, err)
			}
		})
	}
}

// TestUploadIfAbsent: `upload --if-absent` writes a free key, and refuses one that is
// taken, saying so, exiting 1, and leaving the object as it was; without the flag the
// key is replaced, as S3 does.
func TestUploadIfAbsent(t *testing.T) {
	clearEnv(t)
	addr, s3c := startServer(t)
	first, second := []byte("the first file"), []byte("another file, same key")
	dir := writeTree(t, "in", map[string][]byte{"first.txt": first, "second.txt": second})
	upload := func(file string, extra ...string) (int, string) {
		t.Helper()
		args := append([]string{"upload", "--server", addr, "--key", "docs/report.txt"}, extra...)
		code, _, stderr := runCLI(t, append(args, filepath.Join(dir, file))...)
		return code, stderr
	}
	if code, stderr := upload("first.txt", "--if-absent"); code != exitOK {
		t.Fatalf("upload --if-absent to a free key exited %d: %s", code, stderr)
	}
	requireObject(t, s3c, "docs/report.txt", first)
	code, stderr := upload("second.txt", "--if-absent")
	if code != exitFailure || !strings.Contains(stderr, "docs/report.txt") || !strings.Contains(stderr, "exists") {
		t.Fatalf("upload --if-absent to a taken key exited %d, want %d with a message naming the key:\n%s", code, exitFailure, stderr)
	}
	requireObject(t, s3c, "docs/report.txt", first)
	if code, stderr := upload("second.txt"); code != exitOK {
		t.Fatalf("upload without --if-absent exited %d: %s", code, stderr)
	}
	requireObject(t, s3c, "docs/report.txt", second)
}

// TestChangedFileAndItsOldUpload: ls on a server without uploads says there are none.
// The state holds an interrupted upload of a file that
// has changed since (another size and modification time). Uploading the file again
// says so, aborts the old upload (its bytes would otherwise wait on the server until it
// expires) and uploads the file as it is now; with --keep-stale the old upload stays
// and the CLI says how to discard it. Either way the state forgets it.
func TestChangedFileAndItsOldUpload(t *testing.T) {
	addr, s3c := startServer(t)
	ctx, c := dialTest(t, addr)
	// Nothing in progress yet: ls says so (on stderr; stdout stays empty for scripts).
	if code, stdout, stderr := runCLI(t, "ls", "--uploads", "--server", addr); code != exitOK || stdout != "" || !strings.Contains(stderr, "no uploads in progress") {
		t.Fatalf("ls without uploads: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	for _, tc := range []struct {
		name      string
		flags     []string
		wantSaid  string
		wantState chunkupv1.UploadState
	}{
		{"aborted", nil, "changed since upload %s began; aborted it", chunkupv1.UploadState_UPLOAD_STATE_ABORTED},
		{"kept", []string{"--keep-stale"}, "changed since upload %s began; keeping it", chunkupv1.UploadState_UPLOAD_STATE_ACTIVE},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stateDir := isolateState(t)
			file, data := writeRandomFile(t, "changed.bin", 3<<20)
			old, err := c.API().CreateUpload(ctx, &chunkupv1.CreateUploadRequest{Name: "changed.bin"})
			if err != nil {
				t.Fatal(err)
			}
			id := old.Upload.UploadId
			entry := resumeEntry{Path: file, Size: 5 << 20, ModTime: time.Now().Add(-time.Hour).UTC(), Server: addr, UploadID: id}
			st, _ := json.Marshal(map[string][]resumeEntry{"uploads": {entry}})
			if err := os.WriteFile(filepath.Join(stateDir, "uploads.json"), st, 0o600); err != nil {
				t.Fatal(err)
			}

			code, stdout, stderr := runCLI(t, append(append([]string{"upload", "--server", addr, "--progress", "none"}, tc.flags...), file)...)
			if code != exitOK {
				t.Fatalf("upload exited %d: %s", code, stderr)
			}
			if want := fmt.Sprintf(tc.wantSaid, id); !strings.Contains(stderr, want) {
				t.Errorf("stderr does not say %q:\n%s", want, stderr)
			}
			fields := strings.Fields(stdout)
			if len(fields) < 3 || fields[0] == id || fields[1] != "COMPLETED" {
				t.Fatalf("upload printed %q; want a new upload COMPLETED", stdout)
			}
			requireObject(t, s3c, strings.TrimPrefix(fields[2], "s3://"+bucket+"/"), data)
			if up, err := c.Get(ctx, id); err != nil || up.State != tc.wantState {
				t.Errorf("the old upload is %v (%v); want %v", up.GetState(), err, tc.wantState)
			}
			if b, _ := os.ReadFile(filepath.Join(stateDir, "uploads.json")); strings.Contains(string(b), id) {
				t.Errorf("the state still lists %s:\n%s", id, b)
			}
		})
	}
}

// TestSameSizeAndTimeOtherBytes: the state's upload of a file whose size and time are
// unchanged but whose bytes are not (the CLI finds it checking the chunks the server
// holds) is refused, nothing mixed, and aborted as a changed file's is, so that its
// bytes do not wait on the server; the next run uploads the file anew.
func TestSameSizeAndTimeOtherBytes(t *testing.T) {
	addr, s3c := startServer(t)
	ctx, c := dialTest(t, addr)
	isolateState(t)
	file, data, id := interrupted(t, c, addr, "edited.bin", 9<<20, &chunkupv1.CreateUploadRequest{}, false)
	up, err := c.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	other := slices.Clone(data[:up.ChunkSize])
	other[1000] ^= 0xff // edited in place, its size and time kept
	stream, err := c.API().UploadChunk(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&chunkupv1.UploadChunkRequest{UploadId: id, ChunkNumber: 1, Data: other}); err != nil {
		t.Fatal(err)
	}
	if ack, err := stream.Recv(); err != nil || ack.ChunkNumber != 1 {
		t.Fatalf("chunk 1 of the other bytes: %v %v", ack, err)
	}
	_ = stream.CloseSend()

	code, _, stderr := runCLI(t, "upload", "--server", addr, "--progress", "none", file)
	if code != exitFailure || !strings.Contains(stderr, "the input is not the one in upload "+id) ||
		!strings.Contains(stderr, "edited.bin is not the file upload "+id+" began with; aborted it (8.0 MiB on the server); run the same command again to upload the file anew (--keep-stale keeps such uploads)\n") {
		t.Fatalf("upload exited %d, want %d saying the input is another and the old upload aborted:\n%s", code, exitFailure, stderr)
	}
	if up, err := c.Get(ctx, id); err != nil || up.State != chunkupv1.UploadState_UPLOAD_STATE_ABORTED || !strings.Contains(up.Error, "not the one the upload began with") {
		t.Fatalf("the old upload is %v, %q (%v); want ABORTED saying why", up.GetState(), up.GetError(), err)
	}
	code, stdout, stderr := runCLI(t, "upload", "--server", addr, "--progress", "none", file)
	fields := strings.Fields(stdout)
	if code != exitOK || len(fields) < 3 || fields[0] == id || fields[1] != "COMPLETED" {
		t.Fatalf("second upload exited %d: %q %s; want a new upload COMPLETED", code, stdout, stderr)
	}
	requireObject(t, s3c, strings.TrimPrefix(fields[2], "s3://"+bucket+"/"), data)
}

// TestServerGoneMidUpload: when the server goes away mid-upload and stays away past
// the SDK's retries, the CLI's failure says what to do: its upload keeps what the server
// has, and the same command resumes it once the server is back (to an exact object).
func TestServerGoneMidUpload(t *testing.T) {
	addr, s3c := startServer(t)
	stateDir := isolateState(t)
	saved := sdkDefaults
	sdkDefaults = []client.Option{client.WithRetry(2, 10*time.Millisecond, 20*time.Millisecond)}
	t.Cleanup(func() { sdkDefaults = saved })
	proxy := testenv.StartProxy(t, addr)
	file, data := writeRandomFile(t, "far.bin", 200<<20)

	// Cut the server off once the upload is recorded (begun), long before its 200 MiB
	// are through.
	recorded := make(chan string, 1)
	go func() {
		defer close(recorded)
		for ctx := testenv.Context(t, time.Minute); ctx.Err() == nil; {
			b, _ := os.ReadFile(filepath.Join(stateDir, "uploads.json"))
			if m := regexp.MustCompile(`"upload_id":\s*"([a-z2-7]{26})"`).FindSubmatch(b); m != nil {
				proxy.Close()
				recorded <- string(m[1])
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	code, _, stderr := runCLI(t, "upload", "--server", proxy.Addr, "--progress", "none", file)
	id := <-recorded
	if id == "" {
		t.Fatal("the upload was never recorded in the state")
	}
	if want := "upload " + id + " keeps what the server has: once it is back, run the same command again to resume it"; code != exitFailure || !strings.Contains(stderr, "Unavailable") || !strings.Contains(stderr, want) {
		t.Fatalf("upload exited %d, want %d saying %q:\n%s", code, exitFailure, want, stderr)
	}
	// The server is back where it was: the same command resumes the upload.
	testenv.StartProxyOn(t, proxy.Addr, addr)
	code, stdout, stderr := runCLI(t, "upload", "--server", proxy.Addr, "--progress", "none", file)
	if code != exitOK || !strings.Contains(stderr, "resuming upload "+id) || !strings.HasPrefix(stdout, id+" COMPLETED") {
		t.Fatalf("the same command again exited %d: %q, stderr %q; want upload %s resumed and COMPLETED", code, stdout, stderr, id)
	}
	requireObject(t, s3c, strings.TrimPrefix(strings.Fields(stdout)[2], "s3://"+bucket+"/"), data)
}

// TestUploadEmptyTree: upload -r of a folder that holds no file (folders only) says so
// and uploads nothing, without needing a server.
func TestUploadEmptyTree(t *testing.T) {
	clearEnv(t)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, "upload", "--server", "127.0.0.1:1", "-r", dir)
	if code != exitOK || stdout != "" || !strings.Contains(stderr, "no files under "+dir) {
		t.Fatalf("upload -r of an empty tree: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// TestSmallFilesNotRecorded: files the SDK sends in one message leave nothing to resume,
// so a run of them does not write the state file at all (each would have cost its lock,
// read and two writes).
func TestSmallFilesNotRecorded(t *testing.T) {
	addr, _ := startServer(t)
	stateDir := isolateState(t)
	a, _ := writeRandomFile(t, "a.bin", 4<<10)
	b, _ := writeRandomFile(t, "b.bin", 5<<20)
	code, stdout, stderr := runCLI(t, "upload", "--server", addr, "--progress", "none", "--jobs", "2", a, b)
	if code != exitOK || strings.Count(stdout, "COMPLETED") != 2 {
		t.Fatalf("upload: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	if _, err := os.Stat(filepath.Join(stateDir, "uploads.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the state file after uploads of small files: %v, want none written", err)
	}
}

// TestDirectOffered: a server that offers direct uploads from 6 MiB (--direct-above)
// gets a larger file from `chunkup upload` as a direct upload, a smaller one through
// itself, and a larger one with --through-server through itself; every object holds its
// file's bytes. A client written from the .proto sees the same choice in
// CreateUploadResponse.upload.direct, and direct_checksums with an offer not made is no
// error.
func TestDirectOffered(t *testing.T) {
	clearEnv(t)
	isolateState(t)
	r := testenv.StartRedis(t)
	m := testenv.StartMinIO(t)
	cfg := app.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "off", RedisURL: r.URL(),
		S3: m.S3Config(), Bucket: bucket, ShutdownTimeout: 5 * time.Second}
	cfg.Upload.DirectAbove = 6 << 20
	addr := runApp(t, cfg).GRPCAddr()
	s3c := m.Client(t)

	for _, tc := range []struct {
		name       string
		size       int
		extra      []string
		wantDirect bool
	}{
		{"above the offer", 13<<20 + 5, nil, true},
		{"at the offer", 6 << 20, nil, true},
		{"below the offer", 6<<20 - 1, nil, false},
		{"one message", 1 << 20, nil, false},
		{"above, declined", 13<<20 + 5, []string{"--through-server"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file, data := writeRandomFile(t, "f.bin", tc.size)
			args := append([]string{"upload", "--server", addr, "--json"}, tc.extra...)
			code, stdout, stderr := runCLI(t, append(args, file)...)
			if code != exitOK {
				t.Fatalf("upload exited %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
			}
			up := parseUploads(t, stdout, "size", "etag")[0]
			requireCompleted(t, up, "f.bin", len(data))
			requireObject(t, s3c, up.Key, data)
			if up.Direct != tc.wantDirect {
				t.Errorf("the upload of %d bytes is direct: %v, want %v", tc.size, up.Direct, tc.wantDirect)
			}
		})
	}

	t.Run("a direct upload resumed at the defaults", func(t *testing.T) {
		_, c := dialTest(t, addr)
		file, data, old := interrupted(t, c, addr, "resumed.bin", 11<<20, &chunkupv1.CreateUploadRequest{DirectIfOffered: true, DirectChecksums: true}, true)
		code, stdout, stderr := runCLI(t, "upload", "--server", addr, "--json", file)
		if code != exitOK {
			t.Fatalf("upload exited %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
		}
		up := parseUploads(t, stdout, "size", "etag")[0]
		if up.UploadId != old || !up.Direct {
			t.Fatalf("the CLI finished %s (direct %v), want it to go on with direct upload %s", up.UploadId, up.Direct, old)
		}
		requireObject(t, s3c, up.Key, data)
	})

	t.Run("a direct upload resumed with --through-server", func(t *testing.T) {
		ctx, c := dialTest(t, addr)
		file, data, old := interrupted(t, c, addr, "again.bin", 7<<20, &chunkupv1.CreateUploadRequest{Direct: true}, true)
		size := int64(7 << 20)
		code, stdout, stderr := runCLI(t, "upload", "--server", addr, "--json", "--through-server", file)
		if code != exitOK || !strings.Contains(stderr, "upload "+old+" went direct to S3; aborted it") {
			t.Fatalf("upload exited %d; stderr %q, want it to say the direct upload was aborted", code, stderr)
		}
		up := parseUploads(t, stdout, "size", "etag")[0]
		if up.UploadId == old || up.Direct {
			t.Fatalf("--through-server went on with %s (direct %v), want a new upload through the server", up.UploadId, up.Direct)
		}
		requireObject(t, s3c, up.Key, data)
		if got, err := c.Get(ctx, old); err != nil || got.State != chunkupv1.UploadState_UPLOAD_STATE_ABORTED {
			t.Fatalf("the direct upload is %v (%v), want ABORTED", got.GetState(), err)
		}
		again, err := c.API().CreateUpload(ctx, &chunkupv1.CreateUploadRequest{Name: "again.bin", ExpectedSize: &size, Direct: true})
		if err != nil {
			t.Fatal(err)
		}
		if code, _, stderr := runCLI(t, "upload", "--server", addr, "--resume", again.Upload.UploadId, "--through-server", file); code == exitOK || !strings.Contains(stderr, "leave out --resume") {
			t.Fatalf("--resume of a direct upload with --through-server exited %d (%q), want a failure saying what to leave out", code, stderr)
		}
		if code, _, stderr := runCLI(t, "upload", "--server", addr, "--direct", "--through-server", file); code != exitUsage || !strings.Contains(stderr, "contradict") {
			t.Fatalf("--direct --through-server exited %d (%q), want %d saying they contradict each other", code, stderr, exitUsage)
		}
	})

	t.Run("from the proto", func(t *testing.T) {
		ctx, c := dialTest(t, addr)
		for _, tc := range []struct {
			size       int64
			wantDirect bool
		}{{8 << 20, true}, {5 << 20, false}} {
			res, err := c.API().CreateUpload(ctx, &chunkupv1.CreateUploadRequest{Name: "p.bin",
				ExpectedSize: &tc.size, DirectIfOffered: true, DirectChecksums: true})
			if err != nil {
				t.Fatalf("create of %d bytes taking an offer: %v", tc.size, err)
			}
			if res.Upload.Direct != tc.wantDirect {
				t.Errorf("create of %d bytes taking an offer made a direct upload: %v, want %v", tc.size, res.Upload.Direct, tc.wantDirect)
			}
			if _, err := c.API().AbortUpload(ctx, &chunkupv1.AbortUploadRequest{UploadId: res.Upload.UploadId}); err != nil {
				t.Fatal(err)
			}
		}
	})

	// Without --json, the CLI says which way each file goes, and status says of an active
	// direct upload that its parts are S3's to count.
	t.Run("the CLI says it went direct", func(t *testing.T) {
		file, _ := writeRandomFile(t, "said.bin", 7<<20)
		code, _, stderr := runCLI(t, "upload", "--server", addr, "--progress", "none", file)
		if code != exitOK || !regexp.MustCompile(`said\.bin: upload [a-z0-9]+ started, direct to S3`).MatchString(stderr) {
			t.Fatalf("upload exited %d; stderr %q, want it to say the upload started direct to S3", code, stderr)
		}
		file, _ = writeRandomFile(t, "said2.bin", 7<<20)
		code, _, stderr = runCLI(t, "upload", "--server", addr, "--progress", "none", "--through-server", file)
		if code != exitOK || !strings.Contains(stderr, "started\n") || strings.Contains(stderr, "direct to S3") {
			t.Fatalf("upload --through-server exited %d; stderr %q, want it started without a word of direct", code, stderr)
		}
		_, c := dialTest(t, addr)
		_, _, id := interrupted(t, c, addr, "active.bin", 11<<20, &chunkupv1.CreateUploadRequest{Direct: true}, true)
		code, stdout, stderr := runCLI(t, "status", "--server", addr, id)
		if code != exitOK || !strings.Contains(stdout, id+" ACTIVE") || !strings.Contains(stdout, "direct to S3 (2 parts, 11534336 bytes in all)") {
			t.Fatalf("status exited %d; stdout %q (stderr %q), want the active upload said to go direct to S3 in 2 parts", code, stdout, stderr)
		}
	})

	// --direct does not throw away what an interrupted upload through the server holds:
	// it goes on that way, and the CLI says so.
	t.Run("--direct resuming an upload through the server", func(t *testing.T) {
		_, c := dialTest(t, addr)
		file, data, id := interrupted(t, c, addr, "through.bin", 13<<20, &chunkupv1.CreateUploadRequest{}, false)
		code, stdout, stderr := runCLI(t, "upload", "--server", addr, "--json", "--direct", file)
		if code != exitOK || !strings.Contains(stderr, "upload "+id+" began through the server and goes on that way") {
			t.Fatalf("upload --direct exited %d; stderr %q, want it to say the upload goes on through the server", code, stderr)
		}
		up := parseUploads(t, stdout, "size", "etag")[0]
		if up.UploadId != id || up.Direct {
			t.Fatalf("upload --direct finished %s (direct %v), want %s through the server", up.UploadId, up.Direct, id)
		}
		requireObject(t, s3c, up.Key, data)
	})

	// Interrupted after its direct upload completed (before the CLI forgot it): with
	// --through-server the file is not sent again, since nothing more goes to the store.
	t.Run("a completed direct upload with --through-server", func(t *testing.T) {
		file, data := writeRandomFile(t, "done.bin", 7<<20)
		code, stdout, stderr := runCLI(t, "upload", "--server", addr, "--json", file)
		if code != exitOK {
			t.Fatalf("upload exited %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
		}
		first := parseUploads(t, stdout, "size", "etag")[0]
		if !first.Direct {
			t.Fatalf("the upload of 7 MiB at an offer from 6 MiB is not direct")
		}
		fi, err := os.Stat(file)
		if err != nil {
			t.Fatal(err)
		}
		state, err := openResumeState()
		if err != nil {
			t.Fatal(err)
		}
		if err := state.record(resumeEntry{Path: file, Size: fi.Size(), ModTime: fi.ModTime().UTC(), Server: addr, UploadID: first.UploadId}); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr = runCLI(t, "upload", "--server", addr, "--json", "--through-server", file)
		if code != exitOK {
			t.Fatalf("upload --through-server exited %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
		}
		// Its first line shows it COMPLETED already, not ACTIVE as a new upload's does.
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		for _, line := range lines {
			if up := parseUpload(t, line); up.UploadId != first.UploadId || up.State != chunkupv1.UploadState_UPLOAD_STATE_COMPLETED {
				t.Fatalf("--through-server printed upload %s %v (direct %v), want the completed %s back\n%s", up.UploadId, up.State, up.Direct, first.UploadId, stdout)
			}
		}
		if len(lines) != 2 {
			t.Fatalf("%d lines, want the upload as resumed and as it ended:\n%s", len(lines), stdout)
		}
		requireObject(t, s3c, first.Key, data)
	})

	// At the smallest offer, a file of 5 MiB still goes in one message (cheaper than a
	// multipart upload of one part, docs/direct-uploads.md), a byte more goes direct.
	t.Run("at the smallest offer", func(t *testing.T) {
		low := cfg
		low.Upload.DirectAbove = 5 << 20
		lowAddr := runApp(t, low).GRPCAddr()
		for _, tc := range []struct {
			size       int
			wantDirect bool
		}{{5 << 20, false}, {5<<20 + 1, true}} {
			file, data := writeRandomFile(t, "five.bin", tc.size)
			code, stdout, stderr := runCLI(t, "upload", "--server", lowAddr, "--json", file)
			if code != exitOK {
				t.Fatalf("upload of %d bytes exited %d\nstdout: %s\nstderr: %s", tc.size, code, stdout, stderr)
			}
			up := parseUploads(t, stdout, "size", "etag")[0]
			requireObject(t, s3c, up.Key, data)
			if up.Direct != tc.wantDirect {
				t.Errorf("the upload of %d bytes at an offer from 5 MiB is direct: %v, want %v", tc.size, up.Direct, tc.wantDirect)
			}
		}
	})

	// A client retrying its create may reach another server behind the same address,
	// one that offers otherwise (during a rolling change of --direct-above): it gets its
	// upload back, not a conflict over the kind it did not choose.
	t.Run("a repeated create at a server with another offer", func(t *testing.T) {
		other := cfg
		other.Upload.DirectAbove = 0
		otherAddr := runApp(t, other).GRPCAddr()
		ctx, c := dialTest(t, addr)
		_, oc := dialTest(t, otherAddr)
		size := int64(8 << 20)
		for _, tc := range []struct {
			name         string
			first, again *client.Client
			wantDirect   bool
		}{
			{"made direct, repeated where none is offered", c, oc, true},
			{"made through the server, repeated where one is offered", oc, c, false},
		} {
			req := &chunkupv1.CreateUploadRequest{Name: "r.bin", ExpectedSize: &size, DirectIfOffered: true,
				DirectChecksums: true, ClientNodeId: "retry-" + strings.ReplaceAll(tc.name, " ", "-")}
			first, err := tc.first.API().CreateUpload(ctx, req)
			if err != nil {
				t.Fatalf("%s: first create: %v", tc.name, err)
			}
			again, err := tc.again.API().CreateUpload(ctx, req)
			if err != nil {
				t.Fatalf("%s: repeated create: %v", tc.name, err)
			}
			if again.Upload.UploadId != first.Upload.UploadId || again.Upload.Direct != tc.wantDirect {
				t.Errorf("%s: repeated create got %s (direct %v), want %s (direct %v)", tc.name,
					again.Upload.UploadId, again.Upload.Direct, first.Upload.UploadId, tc.wantDirect)
			}
			// Without direct_if_offered the kind is the client's choice, and another is a conflict.
			req.DirectIfOffered, req.DirectChecksums, req.Direct = false, false, !tc.wantDirect
			if _, err := c.API().CreateUpload(ctx, req); status.Code(err) != codes.AlreadyExists || !strings.Contains(err.Error(), "direct") {
				t.Errorf("%s: a repeat asking for the other kind: %v, want ALREADY_EXISTS naming direct", tc.name, err)
			}
		}
	})
}

// interrupted writes a file of size random bytes named name, creates an upload of it
// with req (its name and size filled in) and records it in the CLI's state as an upload
// the CLI began, as if the CLI had been interrupted. It returns the file, its bytes and
// the upload's id; with wantDirect the upload must be direct, else not.
func interrupted(t *testing.T, c *client.Client, addr, name string, size int, req *chunkupv1.CreateUploadRequest, wantDirect bool) (string, []byte, string) {
	t.Helper()
	file, data := writeRandomFile(t, name, size)
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	n := fi.Size()
	req.Name, req.ExpectedSize = name, &n
	created, err := c.API().CreateUpload(testenv.Context(t, time.Minute), req)
	if err != nil || created.Upload.Direct != wantDirect {
		t.Fatalf("create: %v (direct %v), want direct %v", err, created.GetUpload().GetDirect(), wantDirect)
	}
	state, err := openResumeState()
	if err != nil {
		t.Fatal(err)
	}
	if err := state.record(resumeEntry{Path: file, Size: n, ModTime: fi.ModTime().UTC(), Server: addr, UploadID: created.Upload.UploadId}); err != nil {
		t.Fatal(err)
	}
	return file, data, created.Upload.UploadId
}
