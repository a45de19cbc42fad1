package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/testenv"
)

// What the HTTP door's end-to-end tests share: a plain net/http client of the door,
// curl, and tus-js-client and headless Chromium run by Node.

const tusCT = "application/offset+octet-stream"

// httpDoor is a process's HTTP door, reached with net/http as any HTTP client would.
type httpDoor struct {
	t    testing.TB
	base string   // http://host:port
	kv   []string // header fields every request carries (credentials)
}

func doorOf(t testing.TB, httpAddr string, kv ...string) *httpDoor {
	return &httpDoor{t: t, base: "http://" + httpAddr, kv: kv}
}

// reply is a response and its whole body.
type reply struct {
	*http.Response
	body []byte
}

// do sends a request with the header fields kv (name, value pairs) to path (or to an
// absolute URL) and reads the whole response. A *bytes.Reader body is sent with its
// length; any other body is chunked.
func (d *httpDoor) do(method, path string, body io.Reader, kv ...string) reply {
	d.t.Helper()
	url := path
	if !strings.HasPrefix(path, "http") {
		url = d.base + path
	}
	req, err := http.NewRequestWithContext(ctx(d.t), method, url, body)
	if err != nil {
		d.t.Fatal(err)
	}
	if b, ok := body.(*bytes.Reader); ok {
		req.ContentLength = int64(b.Len())
	}
	all := append(append([]string{}, d.kv...), kv...)
	for i := 0; i+1 < len(all); i += 2 {
		req.Header.Set(all[i], all[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		d.t.Fatalf("%s %s: read the body: %v", method, url, err)
	}
	return reply{res, b}
}

// create makes a tus upload of size bytes and returns its path (/files/ID).
func (d *httpDoor) create(size int, kv ...string) string {
	d.t.Helper()
	r := d.do("POST", "/files/", nil, append([]string{"Tus-Resumable", "1.0.0", "Upload-Length", strconv.Itoa(size)}, kv...)...)
	expectHTTP(d.t, r, http.StatusCreated)
	loc := r.Header.Get("Location")
	if !strings.HasPrefix(loc, "/files/") {
		d.t.Fatalf("Location %q", loc)
	}
	return loc
}

// offset asks for an upload's offset (tus HEAD).
func (d *httpDoor) offset(path string) int64 {
	d.t.Helper()
	r := d.do("HEAD", path, nil, "Tus-Resumable", "1.0.0")
	expectHTTP(d.t, r, http.StatusOK)
	return headerInt(d.t, r.Header, "Upload-Offset")
}

func headerInt(t testing.TB, h http.Header, name string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(h.Get(name), 10, 64)
	if err != nil {
		t.Fatalf("%s %q: %v", name, h.Get(name), err)
	}
	return n
}

func expectHTTP(t testing.TB, r reply, code int) {
	t.Helper()
	if r.StatusCode != code {
		t.Fatalf("%s %s: status %d, want %d; body: %s", r.Request.Method, r.Request.URL.Path, r.StatusCode, code, r.body)
	}
}

// idOf is the upload id in an upload's path or URL.
func idOf(url string) string { return url[strings.LastIndexByte(url, '/')+1:] }

// waitCompleted waits until upload id is COMPLETED (completion follows the last chunk
// asynchronously) and returns it.
func waitCompleted(t testing.TB, c *client.Client, id string) *chunkupv1.Upload {
	t.Helper()
	var up *chunkupv1.Upload
	waitFor(t, "upload "+id+" to complete", func() bool {
		up = getUpload(t, c, id)
		if up.State == chunkupv1.UploadState_UPLOAD_STATE_FAILED {
			t.Fatalf("upload %s failed: %s", id, up.Error)
		}
		return up.State == chunkupv1.UploadState_UPLOAD_STATE_COMPLETED
	})
	return up
}

// writeFile writes data to a file of the test's and returns its path.
func writeFile(t testing.TB, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// headerBlock is one response in curl -i output (interim 1xx responses come first).
type headerBlock struct {
	code   int
	header http.Header
}

// curl runs curl -sS -i with args, as a user would from a shell, and returns the final
// response's status and header fields, every interim response before it, and the body.
func curl(t testing.TB, args ...string) (final headerBlock, interim []headerBlock, body string) {
	t.Helper()
	return curlShell(t, "curl -sS -i \"$@\"", args...)
}

// curlShell runs script with bash (its arguments in "$@"): a pipeline ending in
// curl -i, like the commands of docs/http-uploads.md, and parses curl's output. Without pipefail, as
// in an interactive shell: head closing the pipe early kills tail with SIGPIPE, and the
// pipeline's status is curl's.
func curlShell(t testing.TB, script string, args ...string) (final headerBlock, interim []headerBlock, body string) {
	t.Helper()
	cmd := exec.CommandContext(ctx(t), "bash", append([]string{"-eu", "-c", script, "bash"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %q: %v\n%s", script, args, err, stderr.String())
	}
	r := bufio.NewReader(bytes.NewReader(out))
	for {
		status, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("curl output ended before a final response:\n%s", out)
		}
		f := strings.Fields(status)
		if len(f) < 2 || !strings.HasPrefix(f[0], "HTTP/") {
			t.Fatalf("curl output: %q is not a status line:\n%s", status, out)
		}
		code, _ := strconv.Atoi(f[1])
		hb := headerBlock{code: code, header: http.Header{}}
		for {
			line, err := r.ReadString('\n')
			line = strings.TrimRight(line, "\r\n")
			if line == "" || err != nil {
				break
			}
			k, v, _ := strings.Cut(line, ":")
			hb.header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
		}
		if code >= 200 {
			rest, _ := io.ReadAll(r)
			return hb, interim, string(rest)
		}
		interim = append(interim, hb)
	}
}

// tusEvent is a line tus-upload.cjs prints.
type tusEvent struct {
	URL    string `json:"url"`
	Killed int64  `json:"killed"`
	Done   string `json:"done"`
	Error  string `json:"error"`
}

// tusResult is what one run of tus-upload.cjs did.
type tusResult struct {
	url, done, error string
	killed           bool
}

// runTusJS uploads with tus-js-client in Node (testdata/tus-upload.cjs, configured by
// env: see the script) and reports what it printed. A run that kills itself is not a
// failure; one that exits otherwise unsuccessfully is.
func runTusJS(t testing.TB, env ...string) tusResult {
	t.Helper()
	out := runNode(t, "tus-upload.cjs", env, nil, true)
	var res tusResult
	for line := range strings.Lines(out) {
		var ev tusEvent
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("tus-upload.cjs printed %q: %v", line, err)
		}
		switch {
		case ev.URL != "":
			res.url = ev.URL
		case ev.Killed > 0:
			res.killed = true
		case ev.Done != "":
			res.done = ev.Done
		case ev.Error != "":
			res.error = ev.Error
		}
	}
	return res
}

// runNode runs testdata/script with Node, the tests' Node packages on NODE_PATH, and
// returns its stdout. Unless mayBeKilled, it must exit 0; with it, SIGKILL is an
// expected end too.
func runNode(t testing.TB, script string, env, args []string, mayBeKilled bool) string {
	t.Helper()
	node, err := testenv.NodeBinary()
	if err != nil {
		t.Fatal(err)
	}
	modules := testenv.NodeModules(t)
	path, err := filepath.Abs(filepath.Join("testdata", script))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx(t), node, append([]string{path}, args...)...)
	cmd.Env = append(append(os.Environ(), "NODE_PATH="+modules), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if stderr.Len() > 0 {
		t.Logf("%s stderr:\n%s", script, stderr.String())
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case mayBeKilled && errors.As(err, &ee) && ee.ProcessState.String() == "signal: killed":
	default:
		t.Fatalf("node %s: %v\nstdout:\n%s", script, err, stdout.String())
	}
	return stdout.String()
}
