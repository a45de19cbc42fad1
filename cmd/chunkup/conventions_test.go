package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/chunkup/chunkup/app"
	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/testenv"
)

// TestCLIConventions: --version and version, help COMMAND and COMMAND -h with the
// command's own help, a bad flag answered in one line that points to -h (exit 2).
func TestCLIConventions(t *testing.T) {
	clearEnv(t)
	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		stdout   []string // parts of stdout
		stderr   []string // parts of stderr
		oneLine  bool     // stderr is exactly one line
		notInOut string   // not in stdout nor stderr
	}{
		{"--version", []string{"--version"}, exitOK, []string{"chunkup ", runtime.Version()}, nil, false, ""},
		{"version", []string{"version"}, exitOK, []string{"chunkup ", runtime.Version()}, nil, false, ""},
		{"version: an argument", []string{"version", "x"}, exitUsage, nil, []string{"version takes no arguments"}, true, ""},
		{"help get", []string{"help", "get"}, exitOK,
			[]string{"usage: chunkup get [flags] UPLOAD_ID|KEY", "Download an object", "-offset"}, nil, false, "commands:"},
		{"help upload", []string{"help", "upload"}, exitOK, []string{"usage: chunkup upload", "Upload files", "-recursive"}, nil, false, "commands:"},
		{"help ocr status", []string{"help", "ocr", "status"}, exitOK,
			[]string{"usage: chunkup ocr status", "Print a document's OCR", "-text"}, nil, false, "commands:"},
		{"help ocr", []string{"help", "ocr"}, exitOK, []string{"usage: chunkup ocr COMMAND", "dead requeue"}, nil, false, ""},
		{"help ocr dead", []string{"help", "ocr", "dead"}, exitOK, []string{"usage: chunkup ocr COMMAND", "dead requeue"}, nil, false, ""},
		{"help ocr dead list", []string{"help", "ocr", "dead", "list"}, exitOK, []string{"usage: chunkup ocr dead list", "List dead-lettered jobs"}, nil, false, ""},
		{"help version", []string{"help", "version"}, exitOK, []string{"usage: chunkup version", "Print chunkup's version"}, nil, false, ""},
		{"help help", []string{"help", "help"}, exitOK, []string{"usage: chunkup COMMAND", "help COMMAND"}, nil, false, ""},
		{"help: unknown command", []string{"help", "frob"}, exitUsage, nil, []string{`unknown command "frob"`, "chunkup help"}, true, ""},
		{"help: two commands", []string{"help", "get", "upload"}, exitUsage, nil, []string{"help takes one command"}, true, ""},
		{"get -h", []string{"get", "-h"}, exitOK, nil, []string{"usage: chunkup get", "Download an object", "-length"}, false, "commands:"},
		{"status --help", []string{"status", "--help"}, exitOK, nil, []string{"usage: chunkup status", "Print an upload's state"}, false, ""},
		{"upload --bogus", []string{"upload", "--bogus"}, exitUsage, nil,
			[]string{"chunkup: upload: unknown flag --bogus (see 'chunkup upload -h')"}, true, ""},
		{"get -x", []string{"get", "-x", "k"}, exitUsage, nil, []string{"get: unknown flag -x (see 'chunkup get -h')"}, true, ""},
		{"ocr status --bogus", []string{"ocr", "status", "--bogus", "d"}, exitUsage, nil,
			[]string{"ocr status: unknown flag --bogus (see 'chunkup ocr status -h')"}, true, ""},
		{"a bad value", []string{"upload", "--jobs", "many", "f"}, exitUsage, nil,
			[]string{`invalid value "many" for flag --jobs`, "(see 'chunkup upload -h')"}, true, ""},
		{"a missing value", []string{"status", "--server"}, exitUsage, nil, []string{"flag needs an argument: --server"}, true, ""},
		{"a bad boolean", []string{"upload", "--if-absent=maybe", "f"}, exitUsage, nil, []string{"for --if-absent"}, true, ""},
		{"serve: a bad size", []string{"serve", "--chunk-size", "8XB"}, exitUsage, nil, []string{"--chunk-size", "is not a size"}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, tc.args...)
			if code != tc.code {
				t.Fatalf("chunkup %q exited %d, want %d\nstdout: %s\nstderr: %s", tc.args, code, tc.code, stdout, stderr)
			}
			for _, want := range tc.stdout {
				if !strings.Contains(stdout, want) {
					t.Errorf("stdout %q does not contain %q", stdout, want)
				}
			}
			for _, want := range tc.stderr {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr %q does not contain %q", stderr, want)
				}
			}
			if tc.oneLine && strings.Count(stderr, "\n") != 1 {
				t.Errorf("stderr is %d lines, want one:\n%s", strings.Count(stderr, "\n"), stderr)
			}
			if tc.notInOut != "" && strings.Contains(stdout+stderr, tc.notInOut) {
				t.Errorf("the output has %q (the general help?):\n%s%s", tc.notInOut, stdout, stderr)
			}
		})
	}
}

// TestVersionLine: the module version and the commit the toolchain recorded.
func TestVersionLine(t *testing.T) {
	goLine := func(rest string) string { return rest + runtime.GOOS + "/" + runtime.GOARCH + ")" }
	vcs := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"a release", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.4.0"}},
			goLine("chunkup v1.4.0 (no commit recorded; go1.26.8 ")},
		{"a checkout, stamped", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261127030000-5c7ccec1e0ab"},
			Settings: vcs("vcs", "git", "vcs.revision", "5c7ccec1e0ab17", "vcs.time", "2026-11-27T03:00:00Z", "vcs.modified", "false")},
			goLine("chunkup v0.0.0-20261127030000-5c7ccec1e0ab (commit 5c7ccec1e0ab17, 2026-11-27T03:00:00Z; go1.26.8 ")},
		{"a checkout with changes", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
			Settings: vcs("vcs.revision", "5c7ccec", "vcs.time", "2026-11-27T03:00:00Z", "vcs.modified", "true")},
			goLine("chunkup (devel) (commit 5c7ccec, 2026-11-27T03:00:00Z, modified; go1.26.8 ")},
		{"no version, no commit (go run, -buildvcs=false)", &debug.BuildInfo{GoVersion: "go1.26.8"},
			goLine("chunkup (devel) (no commit recorded; go1.26.8 ")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := versionLine(tc.bi, true); got != tc.want {
				t.Fatalf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
	if got := versionLine(nil, false); got != "chunkup (devel) (no build information)" {
		t.Fatalf("without build information: %q", got)
	}
}

// TestServerTarget: --server HOST means chunkup's port, 7070; a port or a gRPC target
// given is kept.
func TestServerTarget(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"localhost", "localhost:7070"},
		{"chunkup.example.com", "chunkup.example.com:7070"},
		{"10.0.0.5", "10.0.0.5:7070"},
		{"::1", "[::1]:7070"},
		{"[::1]", "[::1]:7070"},
		{"localhost:", "localhost:7070"},
		{"localhost:7070", "localhost:7070"},
		{"127.0.0.1:9000", "127.0.0.1:9000"},
		{"[::1]:443", "[::1]:443"},
		{"dns:///chunkup.example.com", "dns:///chunkup.example.com:7070"},
		{"dns:///chunkup.example.com:9000", "dns:///chunkup.example.com:9000"},
		{"dns://8.8.8.8:53/chunkup.example.com", "dns://8.8.8.8:53/chunkup.example.com:7070"},
		{"dns:chunkup.example.com", "dns:chunkup.example.com:7070"},
		{"unix:/run/chunkup.sock", "unix:/run/chunkup.sock"},
		{"unix:///run/chunkup.sock", "unix:///run/chunkup.sock"},
		{"passthrough:///localhost:9000", "passthrough:///localhost:9000"},
		{"", ""},
	} {
		if got := serverTarget(tc.in); got != tc.want {
			t.Errorf("serverTarget(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestServerWithoutPort: `chunkup status --server localhost ID` reaches the server on
// chunkup's port. (The test's server listens on a free port, which stands for 7070:
// another chunkup on this machine may hold 7070.)
func TestServerWithoutPort(t *testing.T) {
	clearEnv(t)
	addr, _ := startServer(t)
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	saved := defaultPort
	defaultPort = port
	t.Cleanup(func() { defaultPort = saved })
	file, _ := writeRandomFile(t, "small.bin", 12)
	code, stdout, stderr := runCLI(t, "upload", "--server", "localhost", "--json", file)
	if code != exitOK {
		t.Fatalf("upload --server localhost exited %d: %s", code, stderr)
	}
	up := parseUploads(t, stdout)[0]
	code, stdout, stderr = runCLI(t, "status", "--server", "localhost", up.UploadId)
	if code != exitOK || !strings.HasPrefix(stdout, up.UploadId+" COMPLETED") {
		t.Fatalf("status --server localhost exited %d: %s%s", code, stdout, stderr)
	}
	t.Setenv("CHUNKUP_SERVER", "127.0.0.1")
	if code, stdout, stderr = runCLI(t, "status", up.UploadId); code != exitOK {
		t.Fatalf("status with CHUNKUP_SERVER=127.0.0.1 exited %d: %s%s", code, stdout, stderr)
	}
}

// TestGetFileMode: get writes a new file with mode 0666 less the umask, as cp does, and
// a file it replaces keeps its mode.
func TestGetFileMode(t *testing.T) {
	clearEnv(t)
	addr, _ := startServer(t)
	file, data := writeRandomFile(t, "mode.bin", 100)
	code, stdout, stderr := runCLI(t, "upload", "--server", addr, "--json", file)
	if code != exitOK {
		t.Fatalf("upload exited %d: %s", code, stderr)
	}
	id := parseUploads(t, stdout)[0].UploadId
	dir := t.TempDir()
	for _, tc := range []struct {
		umask    int
		existing os.FileMode // 0: no file there before
		want     os.FileMode
	}{
		{0o022, 0, 0o644},
		{0o027, 0, 0o640},
		{0o077, 0, 0o600},
		{0o002, 0, 0o664},
		{0o022, 0o600, 0o600},
		{0o077, 0o640, 0o640},
	} {
		dest := filepath.Join(dir, "out.bin")
		_ = os.Remove(dest)
		if tc.existing != 0 {
			if err := os.WriteFile(dest, []byte("old"), tc.existing); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dest, tc.existing); err != nil {
				t.Fatal(err)
			}
		}
		old := syscall.Umask(tc.umask)
		code, _, stderr := runCLI(t, "get", "--server", addr, id, dest)
		syscall.Umask(old)
		if code != exitOK {
			t.Fatalf("get exited %d: %s", code, stderr)
		}
		requireFile(t, dest, data)
		fi, err := os.Stat(dest)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != tc.want {
			t.Errorf("umask %03o, existing file %03o: get wrote mode %03o, want %03o", tc.umask, tc.existing, got, tc.want)
		}
	}
}

// TestInterruptedUpload sends SIGINT to `chunkup upload` while the server holds part of
// the file: it exits 130 and says that running the same command again resumes, which
// the same command then does.
func TestInterruptedUpload(t *testing.T) {
	isolateState(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := testenv.StartRedis(t)
	m := testenv.StartMinIO(t)
	// Without workers and with a small staged-bytes budget the upload stalls after
	// about two chunks, until workers drain Redis.
	api := app.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "off", RedisURL: r.URL(), S3: m.S3Config(), Bucket: bucket,
		Roles: []string{app.RoleAPI}, ShutdownTimeout: 5 * time.Second}
	api.Upload.ChunkSize, api.Upload.StagedBytesBudget, api.Upload.BudgetWait = 5<<20, 12<<20, 10*time.Minute
	a := runApp(t, api)
	file, data := writeRandomFile(t, "interrupted.bin", 8*5<<20)
	bin := testenv.BuildBinary(t, "github.com/chunkup/chunkup/cmd/chunkup")
	args := []string{"upload", "--server", a.GRPCAddr(), "--progress", "lines", file}

	p := testenv.StartProcess(t, bin, args, nil)
	started := regexp.MustCompile(`interrupted\.bin: upload ([a-z0-9]+) started`)
	var id string
	for deadline := time.Now().Add(time.Minute); id == ""; time.Sleep(10 * time.Millisecond) {
		if m := started.FindStringSubmatch(p.Stderr()); m != nil {
			id = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("no upload id on stderr: %q", p.Stderr())
		}
	}
	_, c := dialTest(t, a.GRPCAddr())
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		held, err := c.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(held.ReceivedChunks) >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server holds no chunk after a minute")
		}
	}
	if err := p.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("upload still running 30s after SIGINT; stderr:\n%s", p.Stderr())
	}
	if code := p.ExitCode(); code != 130 {
		t.Errorf("upload exited %d after SIGINT, want 130; stderr:\n%s", code, p.Stderr())
	}
	stderr := p.Stderr()
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if last := lines[len(lines)-1]; last != "chunkup: interrupted: run the same command again to resume" {
		t.Errorf("the last line on stderr is %q, want the interruption and how to resume:\n%s", last, stderr)
	}
	if strings.Contains(stderr, "context canceled") || strings.Contains(stderr, "did not complete") {
		t.Errorf("stderr reports the interruption as a failure:\n%s", stderr)
	}

	workers := api
	workers.Roles, workers.GRPCAddr = []string{app.RoleWorker, app.RoleCompleter}, ""
	runApp(t, workers)
	code, stdout, again := runCLI(t, args...)
	if code != exitOK || !strings.Contains(again, "resuming upload "+id) {
		t.Fatalf("the same command again exited %d; want it to resume %s:\n%s", code, id, again)
	}
	fields := strings.Fields(stdout)
	if len(fields) < 3 || fields[0] != id || fields[1] != "COMPLETED" {
		t.Fatalf("the same command again printed %q; want upload %s COMPLETED", stdout, id)
	}
	requireObject(t, m.Client(t), strings.TrimPrefix(fields[2], "s3://"+bucket+"/"), data)
}

// TestProgressWording: a small file's last line does not count chunks in S3 (it is
// stored once its upload completes), counts are singular for one, and an empty file's
// bar ends at 100 %.
func TestProgressWording(t *testing.T) {
	t.Run("lines", func(t *testing.T) {
		var out bytes.Buffer
		jobs := []uploadJob{{name: "small.txt", size: 12}, {name: "big.bin", size: 20 << 20}}
		d := newProgressDisplay("lines", &out, jobs, false)
		small := d.track(0, jobs[0])
		small.start(&chunkupv1.Upload{ExpectedSize: 12})
		small.update(client.Progress{BytesAcked: 12, Size: 12})
		small.done(true)
		big := d.track(1, jobs[1])
		big.start(&chunkupv1.Upload{ExpectedSize: 20 << 20})
		big.update(client.Progress{BytesAcked: 16 << 20, Size: 20 << 20, ChunksUploaded: 1})
		big.update(client.Progress{BytesAcked: 20 << 20, Size: 20 << 20, ChunksUploaded: 3})
		big.done(true)
		d.finish()
		for _, want := range []string{
			"small.txt: 100% (12 of 12 bytes acknowledged)\n",
			"big.bin:  80% (16777216 of 20971520 bytes acknowledged; 1 chunk in S3)\n",
			"big.bin: 100% (20971520 of 20971520 bytes acknowledged; 3 chunks in S3)\n",
		} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("no line %q in:\n%s", want, out.String())
			}
		}
	})
	t.Run("bars", func(t *testing.T) {
		var out bytes.Buffer
		jobs := []uploadJob{{name: "empty.txt", size: 0}, {name: "small.txt", size: 12}}
		d := newProgressDisplay("bars", &out, jobs, false)
		for i, j := range jobs {
			track := d.track(i, j)
			track.start(&chunkupv1.Upload{ExpectedSize: j.size})
			track.update(client.Progress{BytesAcked: j.size, Size: j.size})
			track.done(true)
		}
		d.finish()
		text := out.String()
		for _, name := range []string{"empty.txt", "small.txt", "total"} {
			i := strings.LastIndex(text, name)
			if i < 0 {
				t.Fatalf("no bar of %s:\n%s", name, text)
			}
			line, _, _ := strings.Cut(text[i:], "\n")
			if !strings.Contains(line, "100 %") {
				t.Errorf("the last frame's bar of %s is not at 100 %%: %q", name, line)
			}
		}
	})
	for n, want := range map[int64]string{0: "0 pages", 1: "1 page", 2: "2 pages"} {
		if got := plural(n, "page"); got != want {
			t.Errorf("plural(%d, page) = %q, want %q", n, got, want)
		}
	}
}

// TestDevTryCommand: the banner's Try: lines run the CLI as dev was started, and under
// go run with go run, saying how to install it.
func TestDevTryCommand(t *testing.T) {
	for _, tc := range []struct{ arg0, cli, install string }{
		{"chunkup", "chunkup", ""},
		{"bin/chunkup", "bin/chunkup", ""},
		{"/usr/local/bin/chunkup", "/usr/local/bin/chunkup", ""},
		{"/tmp/go-build1234/b001/exe/chunkup", "go run ./cmd/chunkup", "go install ./cmd/chunkup"},
	} {
		cli, install := cliCommand(tc.arg0)
		if cli != tc.cli || !strings.Contains(install, tc.install) || (tc.install == "") != (install == "") {
			t.Errorf("cliCommand(%q) = %q, %q; want %q and a line with %q", tc.arg0, cli, install, tc.cli, tc.install)
		}
	}
}

// TestDevBanner: dev's Try: lines run the binary dev was started as, and its log names
// the roles it runs (not roles=[]).
func TestDevBanner(t *testing.T) {
	_, bin, _, d := devTest(t)
	if want := "Try:   " + bin + " upload --server " + d.grpc + " FILE"; !strings.Contains(d.Stdout(), want) {
		t.Errorf("the banner lacks %q:\n%s", want, d.Stdout())
	}
	roles := regexp.MustCompile(`"chunkup running".*roles="\[([a-z ]+)\]"`)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		m := roles.FindStringSubmatch(d.Stderr())
		if m != nil {
			for _, r := range []string{app.RoleAPI, app.RoleWorker, app.RoleCompleter, app.RolePublisher, app.RoleCleanup} {
				if !strings.Contains(" "+m[1]+" ", " "+r+" ") {
					t.Errorf("dev's log names roles %q, without %s", m[1], r)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no 'chunkup running' line naming the roles in dev's log:\n%s", d.Stderr())
		}
	}
}

// TestProgressOnTerminal uploads a small file, an empty file and two large ones on a
// terminal (tmux's, 100 × 40) and reads the screen back: a bar per file at 100 %, in
// the order of the arguments, and the total, each drawn once. Then get -r brings them
// back on another terminal: its total bar ends at 100 % with every file, once, and the
// files are exact.
func TestProgressOnTerminal(t *testing.T) {
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		t.Fatalf("tmux not found (%v): make deps installs it", err)
	}
	clearEnv(t)
	addr, _ := startServer(t)
	bin := testenv.BuildBinary(t, "github.com/chunkup/chunkup/cmd/chunkup")
	dir := t.TempDir()
	names := []string{"small.txt", "empty.txt", "big1.bin", "big2.bin"}
	for i, n := range []int{12, 0, 24 << 20, 20 << 20} {
		if err := os.WriteFile(filepath.Join(dir, names[i]), bytes.Repeat([]byte{byte(i)}, n), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sock := filepath.Join(t.TempDir(), "tmux.sock")
	cmd := fmt.Sprintf("%s upload --server %s --prefix term %s >%s; echo EXIT=$?", bin, addr, strings.Join(names, " "), filepath.Join(t.TempDir(), "stdout"))
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(tmux, append([]string{"-S", sock, "-f", "/dev/null"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	run("new-session", "-d", "-x", "100", "-y", "40", "-c", dir, "sh", "-c", cmd+"; sleep 600")
	t.Cleanup(func() { _ = exec.Command(tmux, "-S", sock, "kill-server").Run() })
	var screen string
	for deadline := time.Now().Add(2 * time.Minute); !strings.Contains(screen, "EXIT="); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the upload did not end within 2 minutes; the screen:\n%s", screen)
		}
		screen = run("capture-pane", "-p", "-S", "-100")
	}
	t.Logf("the screen:\n%s", screen)
	if !strings.Contains(screen, "EXIT=0") {
		t.Fatalf("upload failed; the screen:\n%s", screen)
	}
	last := -1
	for _, name := range append(names, "total") {
		re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` .*\[.*\] +100 %`)
		all := re.FindAllStringIndex(screen, -1)
		if len(all) != 1 {
			t.Errorf("the bar of %s is on the screen %d times at 100 %%, want once", name, len(all))
			continue
		}
		if all[0][0] <= last {
			t.Errorf("the bar of %s is not below the bars before it", name)
		}
		last = all[0][0]
	}
	if !regexp.MustCompile(`(?m)^empty\.txt .*\[=+\]`).MatchString(screen) {
		t.Errorf("the empty file's bar is not full")
	}

	back := filepath.Join(t.TempDir(), "back")
	run("new-session", "-d", "-s", "get", "-x", "100", "-y", "40", "-c", dir, "sh", "-c",
		fmt.Sprintf("%s get -r --server %s term/ %s; echo GETEXIT=$?; sleep 600", bin, addr, back))
	screen = ""
	for deadline := time.Now().Add(2 * time.Minute); !strings.Contains(screen, "GETEXIT="); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("get -r did not end within 2 minutes; the screen:\n%s", screen)
		}
		// The visible screen only: tmux moves a screen cleared from its top into
		// its history (scroll-on-clear), and the bars here start at the top.
		screen = run("capture-pane", "-p", "-t", "get")
	}
	t.Logf("get -r's screen:\n%s", screen)
	if !strings.Contains(screen, "GETEXIT=0") {
		t.Fatalf("get -r failed; the screen:\n%s", screen)
	}
	if all := regexp.MustCompile(`(?m)^total .*\[.*\] +100 % .*4/4 files`).FindAllString(screen, -1); len(all) != 1 {
		t.Errorf("get -r's total bar is on the screen %d times at 100 %% with 4/4 files, want once", len(all))
	}
	for _, name := range names {
		want, _ := os.ReadFile(filepath.Join(dir, name))
		if got, err := os.ReadFile(filepath.Join(back, name)); err != nil || !bytes.Equal(got, want) {
			t.Errorf("get -r brought %s back with %d bytes (%v), want %d", name, len(got), err, len(want))
		}
	}
}

// stalledReads is an UploadService whose ReadObject sends nothing until its caller
// goes away; reading tells when a call came.
type stalledReads struct {
	chunkupv1.UnimplementedUploadServiceServer
	reading chan struct{}
}

func (s *stalledReads) ReadObject(_ *chunkupv1.ReadObjectRequest, stream grpc.ServerStreamingServer[chunkupv1.ReadObjectResponse]) error {
	select {
	case s.reading <- struct{}{}:
	default:
	}
	<-stream.Context().Done()
	return stream.Context().Err()
}

// TestInterruptedGet sends SIGINT to `chunkup get` while it waits for the object: it
// exits 130, says so in one line, and leaves no file behind.
func TestInterruptedGet(t *testing.T) {
	clearEnv(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	reads := &stalledReads{reading: make(chan struct{}, 1)}
	chunkupv1.RegisterUploadServiceServer(srv, reads)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)

	dir := t.TempDir()
	bin := testenv.BuildBinary(t, "github.com/chunkup/chunkup/cmd/chunkup")
	p := testenv.StartProcess(t, bin, []string{"get", "--server", l.Addr().String(), "--key", "some/object.bin", filepath.Join(dir, "object.bin")}, nil)
	select {
	case <-reads.reading:
	case <-time.After(time.Minute):
		t.Fatalf("get did not call ReadObject within a minute; stderr:\n%s", p.Stderr())
	}
	if err := p.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("get still running 30s after SIGINT")
	}
	if code := p.ExitCode(); code != 130 {
		t.Errorf("get exited %d after SIGINT, want 130; stderr:\n%s", code, p.Stderr())
	}
	if want := "chunkup: interrupted: the download did not finish (no FILE was written); run the same command again\n"; p.Stderr() != want {
		t.Errorf("stderr %q, want %q", p.Stderr(), want)
	}
	if left, _ := os.ReadDir(dir); len(left) > 0 {
		t.Errorf("the interrupted get left %v", left)
	}
}
