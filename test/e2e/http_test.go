package e2e

import (
	"bytes"
	"crypto/sha1"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/testdocs"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/s3store"
	"github.com/chunkup/chunkup/server"
	"github.com/chunkup/chunkup/test/harness"
	"github.com/chunkup/chunkup/upload"
)

// The HTTP door end to end: real clients (tus-js-client in Node, curl, headless
// Chromium on the dev page, net/http) against chunkup processes on a real Redis and
// MinIO; every object is read back from MinIO and compared with what was sent.

// serveChunk is the chunk size of `chunkup serve` processes started by the harness.
const serveChunk = 5 * MiB

// TestHTTPTusJSClientResumes: tus-js-client (Node, from npm) uploads 50 MB to `chunkup
// serve` with an API key, is killed in the middle of its request, and a new run resumes
// the upload from the offset the server reports. The object is exact, and GetUpload
// shows the same upload (its id in the upload's URL, the file name tus-js-client sent).
func TestHTTPTusJSClientResumes(t *testing.T) {
	e := newEnv(t)
	const key = "http-door-test-key"
	node := e.serveProcess(t, nil, "serve", "api,worker,completer,cleanup", "--api-keys", "acme:"+server.HashAPIKey(key))
	d := doorOf(t, node.HTTPAddr, "Authorization", "Bearer "+key)
	data := randomBytes(50_000_000, 170)
	file := writeFile(t, "fifty.bin", data)

	// The door takes the API's credentials: none is 401.
	expectHTTP(t, doorOf(t, node.HTTPAddr).do("POST", "/files/", nil, "Tus-Resumable", "1.0.0", "Upload-Length", "5"), http.StatusUnauthorized)

	killAt := len(data) / 2
	first := runTusJS(t, "TUS_FILE="+file, "TUS_ENDPOINT=http://"+node.HTTPAddr+"/files/", "TUS_API_KEY="+key,
		"TUS_KILL_AT="+strconv.Itoa(killAt))
	if !first.killed || first.url == "" || first.done != "" {
		t.Fatalf("first run: %+v; want it killed after its upload's URL was known", first)
	}
	// The server keeps every byte it received: the whole chunks, and the partial chunk
	// after them as the upload's tail. (It may still be finishing the broken request:
	// the offset it reports is durable either way, and reaches the last byte.)
	want := int64(killAt)
	waitFor(t, "the server to store the bytes it received", func() bool { return d.offset(first.url) == want })

	second := runTusJS(t, "TUS_FILE="+file, "TUS_UPLOAD_URL="+first.url, "TUS_API_KEY="+key)
	if second.done != first.url || second.error != "" {
		t.Fatalf("resumed run: %+v; want it done with %s", second, first.url)
	}
	c := harness.Dial(t, node.GRPCAddr, client.WithAPIKey(key))
	up := waitCompleted(t, c, idOf(first.url))
	e.requireExact(t, up, data)
	if up.Name != "fifty.bin" || up.Tenant != "acme" || up.Metadata["filetype"] != "application/octet-stream" {
		t.Fatalf("upload %v: want the name and metadata tus-js-client sent, in acme's namespace", up)
	}
}

// TestHTTPCurl: the curl commands of README.md and docs/http-uploads.md ("With curl
// and from a web page"). A small file in one request (creation-with-upload); 30 MB in
// three PATCH requests with a HEAD before each, the server keeping whole chunks; a wrong
// Upload-Offset is 409 and a bad checksum 460, and neither changes the upload.
func TestHTTPCurl(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is not on PATH: run `make deps`")
	}
	e := newEnv(t)
	a := e.start(t, e.config())
	c := e.client(t, a)
	base := "http://" + a.HTTPAddr() + "/files/"
	d := doorOf(t, a.HTTPAddr())

	t.Run("creation-with-upload", func(t *testing.T) {
		notes := []byte("hello world\n")
		file := writeFile(t, "notes.txt", notes)
		res, _, _ := curl(t, base, "-H", "Tus-Resumable: 1.0.0", "-H", "Upload-Length: 12",
			"-H", "Upload-Metadata: filename "+base64.StdEncoding.EncodeToString([]byte("notes.txt")),
			"-H", "Content-Type: "+tusCT, "--data-binary", "@"+file)
		if res.code != http.StatusCreated || res.header.Get("Upload-Offset") != "12" || res.header.Get("Repr-Digest") != "crc32c=:8P9ykg==:" {
			t.Fatalf("creation with upload: %d %v", res.code, res.header)
		}
		up := waitCompleted(t, c, idOf(res.header.Get("Location")))
		e.requireExact(t, up, notes)
		if up.Name != "notes.txt" {
			t.Fatalf("name %q", up.Name)
		}
	})

	t.Run("three patches", func(t *testing.T) {
		data := randomBytes(30_000_000, 171)
		file := writeFile(t, "big.bin", data)
		res, _, _ := curl(t, "-X", "POST", base, "-H", "Tus-Resumable: 1.0.0", "-H", "Upload-Length: 30000000")
		if res.code != http.StatusCreated {
			t.Fatalf("create: %d", res.code)
		}
		url := "http://" + a.HTTPAddr() + res.header.Get("Location")
		head := func() int64 {
			res, _, _ := curl(t, "-I", url, "-H", "Tus-Resumable: 1.0.0")
			return headerInt(t, res.header, "Upload-Offset")
		}
		// As docs/http-uploads.md does it: the file's bytes from the offset, through a pipe
		// (so curl sends them chunked, without a Content-Length).
		patch := func(off int64, n string) headerBlock {
			res, _, body := curlShell(t, `tail -c +$(($2 + 1)) "$1" | head -c "$3" | curl -sS -i -T - -X PATCH "$4" `+
				`-H 'Tus-Resumable: 1.0.0' -H 'Content-Type: application/offset+octet-stream' -H "Upload-Offset: $2"`,
				file, strconv.FormatInt(off, 10), n, url)
			if res.code/100 != 2 && res.code != http.StatusConflict {
				t.Fatalf("PATCH from %d: %d %s", off, res.code, body)
			}
			return res
		}
		var offsets []int64
		for _, n := range []string{"10000000", "10000000", "30000000"} {
			off := head()
			offsets = append(offsets, off)
			if res := patch(off, n); res.code != http.StatusNoContent {
				t.Fatalf("PATCH from %d: %d", off, res.code)
			}
		}
		if want := []int64{0, 10_000_000, 20_000_000}; !slices.Equal(offsets, want) {
			t.Fatalf("offsets before each PATCH %v, want %v: every byte of each PATCH kept", offsets, want)
		}
		if off := head(); off != int64(len(data)) {
			t.Fatalf("final offset %d", off)
		}
		e.requireExact(t, waitCompleted(t, c, idOf(url)), data)
	})

	t.Run("wrong offset and bad checksum change nothing", func(t *testing.T) {
		data := randomBytes(2*chunk+100, 172)
		path := d.create(len(data))
		url := "http://" + a.HTTPAddr() + path
		first := writeFile(t, "first.bin", data[:chunk])
		res, _, _ := curl(t, "-X", "PATCH", url, "-H", "Tus-Resumable: 1.0.0", "-H", "Content-Type: "+tusCT,
			"-H", "Upload-Offset: 0", "--data-binary", "@"+first)
		if res.code != http.StatusNoContent || res.header.Get("Upload-Offset") != strconv.Itoa(chunk) {
			t.Fatalf("first chunk: %d %v", res.code, res.header)
		}
		before := getUpload(t, c, idOf(path))

		second := writeFile(t, "second.bin", data[chunk:2*chunk])
		res, _, body := curl(t, "-X", "PATCH", url, "-H", "Tus-Resumable: 1.0.0", "-H", "Content-Type: "+tusCT,
			"-H", "Upload-Offset: 5", "--data-binary", "@"+second)
		if res.code != http.StatusConflict || res.header.Get("Upload-Offset") != strconv.Itoa(chunk) {
			t.Fatalf("wrong offset: %d %v %s, want 409 telling the offset", res.code, res.header, body)
		}
		other := sha1.Sum(data[:chunk])
		res, _, body = curl(t, "-X", "PATCH", url, "-H", "Tus-Resumable: 1.0.0", "-H", "Content-Type: "+tusCT,
			"-H", "Upload-Offset: "+strconv.Itoa(chunk), "-H", "Upload-Checksum: sha1 "+base64.StdEncoding.EncodeToString(other[:]),
			"--data-binary", "@"+second)
		if res.code != 460 {
			t.Fatalf("bad checksum: %d %s, want 460", res.code, body)
		}
		after := getUpload(t, c, idOf(path))
		if !slices.Equal(after.ReceivedChunks, before.ReceivedChunks) || after.ReceivedBytes != before.ReceivedBytes || d.offset(path) != chunk {
			t.Fatalf("a refused PATCH changed the upload: %v -> %v", before, after)
		}
		// The right checksum is taken.
		sum := sha1.Sum(data[chunk:])
		rest := writeFile(t, "rest.bin", data[chunk:])
		res, _, body = curl(t, "-X", "PATCH", url, "-H", "Tus-Resumable: 1.0.0", "-H", "Content-Type: "+tusCT,
			"-H", "Upload-Offset: "+strconv.Itoa(chunk), "-H", "Upload-Checksum: sha1 "+base64.StdEncoding.EncodeToString(sum[:]),
			"--data-binary", "@"+rest)
		if res.code != http.StatusNoContent {
			t.Fatalf("good checksum: %d %s", res.code, body)
		}
		e.requireExact(t, waitCompleted(t, c, idOf(path)), data)
	})

	t.Run("IETF creation with the 104 announcing the upload", func(t *testing.T) {
		notes := []byte("hello draft\n")
		file := writeFile(t, "draft.txt", notes)
		res, interim, body := curl(t, base, "-H", "Upload-Draft-Interop-Version: 8", "-H", "Upload-Complete: ?1",
			"-H", `Content-Disposition: inline; filename="draft.txt"`, "-H", "Content-Type: text/plain", "--data-binary", "@"+file)
		if res.code != http.StatusCreated || res.header.Get("Upload-Complete") != "?1" {
			t.Fatalf("IETF creation: %d %v %s", res.code, res.header, body)
		}
		i := slices.IndexFunc(interim, func(h headerBlock) bool { return h.code == 104 })
		if i < 0 || interim[i].header.Get("Location") != res.header.Get("Location") {
			t.Fatalf("interim responses %+v: want a 104 with the upload's Location", interim)
		}
		up := waitCompleted(t, c, idOf(res.header.Get("Location")))
		e.requireExact(t, up, notes)
		if up.Name != "draft.txt" || up.ContentType != "text/plain" {
			t.Fatalf("name %q, content type %q", up.Name, up.ContentType)
		}
	})
}

// TestHTTPCredentials: the door takes the API's credentials (API keys in either header,
// JWTs), keeps tenants apart as gRPC does, announces and enforces --max-upload-size,
// and counts each request against the tenant's rate limit (429 past it).
func TestHTTPCredentials(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.Auth = server.AuthConfig{APIKeys: map[string]string{server.HashAPIKey("acme-key"): "acme"}, JWTSecret: jwtSecret}
	cfg.Upload.MaxUploadSize = 3 * chunk
	cfg.RatePerTenant, cfg.RateBurst = 1, 12
	a := e.start(t, cfg)
	acme := doorOf(t, a.HTTPAddr(), "X-Api-Key", "acme-key")
	other := doorOf(t, a.HTTPAddr(), "Authorization", "Bearer "+token(t, "other"))

	expectHTTP(t, doorOf(t, a.HTTPAddr(), "X-Api-Key", "guess").do("POST", "/files/", nil, "Tus-Resumable", "1.0.0", "Upload-Length", "5"), http.StatusUnauthorized)
	data := []byte("acme's file")
	path := acme.create(len(data))
	expectHTTP(t, acme.do("PATCH", path, bytes.NewReader(data), "Tus-Resumable", "1.0.0", "Content-Type", tusCT, "Upload-Offset", "0"), http.StatusNoContent)
	expectHTTP(t, other.do("HEAD", path, nil, "Tus-Resumable", "1.0.0"), http.StatusNotFound)
	expectHTTP(t, other.do("PATCH", path, bytes.NewReader(data), "Tus-Resumable", "1.0.0", "Content-Type", tusCT, "Upload-Offset", "0"), http.StatusNotFound)
	expectHTTP(t, other.do("DELETE", path, nil, "Tus-Resumable", "1.0.0"), http.StatusNotFound)
	up := waitCompleted(t, e.client(t, a, client.WithAPIKey("acme-key")), idOf(path))
	e.requireExact(t, up, data)
	if !strings.HasPrefix(up.Key, "acme/") {
		t.Fatalf("key %s outside acme's namespace", up.Key)
	}

	r := other.do("OPTIONS", "/files/", nil)
	if r.Header.Get("Tus-Max-Size") != strconv.Itoa(3*chunk) {
		t.Fatalf("Tus-Max-Size %q", r.Header.Get("Tus-Max-Size"))
	}
	expectHTTP(t, other.do("POST", "/files/", nil, "Tus-Resumable", "1.0.0", "Upload-Length", strconv.Itoa(3*chunk+1)), http.StatusRequestEntityTooLarge)

	var limited reply
	for range 40 {
		if limited = other.do("HEAD", path, nil, "Tus-Resumable", "1.0.0"); limited.StatusCode == http.StatusTooManyRequests {
			break
		}
	}
	expectHTTP(t, limited, http.StatusTooManyRequests)
	if limited.Header.Get("Retry-After") == "" {
		t.Fatal("429 without Retry-After")
	}
	// Another tenant's bucket is its own.
	expectHTTP(t, acme.do("HEAD", path, nil, "Tus-Resumable", "1.0.0"), http.StatusOK)
}

// TestHTTPDefaultMaxSize: without --max-upload-size the service still has a limit (S3's
// 10,000 parts of --max-chunk-size), and the door announces it as it enforces it, so
// that a client can tell before it sends anything.
func TestHTTPDefaultMaxSize(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	a := e.start(t, cfg)
	d := doorOf(t, a.HTTPAddr())
	limit := int64(upload.MaxParts) * 64 * MiB // 10,000 parts of the default --max-chunk-size
	want := strconv.FormatInt(limit, 10)

	r := d.do("OPTIONS", "/files/", nil)
	expectHTTP(t, r, http.StatusOK)
	if got := r.Header.Get("Tus-Max-Size"); got != want {
		t.Fatalf("Tus-Max-Size %q, want %s", got, want)
	}
	if got := r.Header.Get("Upload-Limit"); !strings.Contains(got, "max-size="+want) {
		t.Fatalf("Upload-Limit %q, want max-size=%s", got, want)
	}
	// What is announced is what is taken.
	path := d.create(int(limit))
	expectHTTP(t, d.do("DELETE", path, nil, "Tus-Resumable", "1.0.0"), http.StatusNoContent)
	expectHTTP(t, d.do("POST", "/files/", nil, "Tus-Resumable", "1.0.0", "Upload-Length", strconv.FormatInt(limit+1, 10)), http.StatusRequestEntityTooLarge)
}

// TestHTTPReplicas: two `chunkup serve` replicas, no affinity. tus-js-client begins
// an upload on one and is killed in the middle of it; a new run resumes it on the
// other, with tus, or with the IETF protocol. Both objects are exact.
func TestHTTPReplicas(t *testing.T) {
	e := newEnv(t)
	one := e.serveProcess(t, nil, "one", "api,worker,completer,cleanup")
	two := e.serveProcess(t, nil, "two", "api,worker,completer")
	c := dial(t, two.GRPCAddr)
	for i, protocol := range []string{"tus-v1", "ietf-draft-05"} {
		t.Run("resumed with "+protocol, func(t *testing.T) {
			data := randomBytes(20_000_000+i, uint64(180+i))
			file := writeFile(t, "replica.bin", data)
			first := runTusJS(t, "TUS_FILE="+file, "TUS_ENDPOINT=http://"+one.HTTPAddr+"/files/", "TUS_KILL_AT=9000000")
			if !first.killed || first.url == "" || !strings.HasPrefix(first.url, "http://"+one.HTTPAddr+"/files/") {
				t.Fatalf("first run: %+v", first)
			}
			onTwo := "http://" + two.HTTPAddr + "/files/" + idOf(first.url)
			waitFor(t, "replica one to store the bytes it received", func() bool { return doorOf(t, two.HTTPAddr).offset(onTwo) == 9000000 })
			second := runTusJS(t, "TUS_FILE="+file, "TUS_UPLOAD_URL="+onTwo, "TUS_PROTOCOL="+protocol)
			if second.done != onTwo {
				t.Fatalf("resumed on the other replica: %+v", second)
			}
			e.requireExact(t, waitCompleted(t, c, idOf(onTwo)), data)
		})
	}
	// The second resume spoke the draft: replica two counted its appends so.
	r := doorOf(t, two.HTTPAddr).do("GET", "/metrics", nil)
	var patches []string
	for line := range strings.Lines(string(r.body)) {
		if strings.HasPrefix(line, "chunkup_http_requests_total{") && strings.Contains(line, `method="PATCH"`) {
			patches = append(patches, strings.TrimSpace(line))
		}
	}
	if !slices.ContainsFunc(patches, func(l string) bool {
		return strings.HasPrefix(l, `chunkup_http_requests_total{code="200",method="PATCH",protocol="ietf"}`)
	}) {
		t.Fatalf("replica two counted no IETF append completing an upload; its PATCH series: %q", patches)
	}
}

// appendInFlight starts a PATCH of data to the upload at path through door a, sends
// its first chunk and a few bytes more, and waits until door b reports that chunk
// staged: the request holds the upload's lock then, and waits for the rest of its
// body, which the caller writes to (and closes) pw. Its reply comes on first.
func appendInFlight(t *testing.T, a, b *httpDoor, path string, data []byte) (first chan reply, pw *io.PipeWriter) {
	t.Helper()
	pr, pw := io.Pipe()
	first = make(chan reply, 1)
	go func() {
		first <- a.do("PATCH", path, pr, "Tus-Resumable", "1.0.0", "Content-Type", tusCT, "Upload-Offset", "0")
	}()
	if _, err := pw.Write(data[:chunk+10]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first chunk to be staged", func() bool { return b.offset(path) == chunk })
	return first, pw
}

// TestHTTPUnknownLength: uploads whose length the client tells only at the end. tus
// creation-defer-length, the length in the last PATCH with the last bytes, and in an
// empty PATCH after every byte arrived in whole chunks already stored in S3 (the
// declared size completes the upload by itself); and an IETF creation whose chunked
// body, of no announced length, ends the upload.
func TestHTTPUnknownLength(t *testing.T) {
	e := newEnv(t)
	a := e.start(t, e.config())
	c := e.client(t, a)
	d := doorOf(t, a.HTTPAddr())
	deferred := func() string {
		r := d.do("POST", "/files/", nil, "Tus-Resumable", "1.0.0", "Upload-Defer-Length", "1")
		expectHTTP(t, r, http.StatusCreated)
		return r.Header.Get("Location")
	}
	patch := func(path string, off int, body []byte, kv ...string) reply {
		return d.do("PATCH", path, bytes.NewReader(body), append([]string{"Tus-Resumable", "1.0.0", "Content-Type", tusCT,
			"Upload-Offset", strconv.Itoa(off)}, kv...)...)
	}

	t.Run("length with the last bytes", func(t *testing.T) {
		data := randomBytes(2*chunk+777, 194)
		path := deferred()
		expectHTTP(t, patch(path, 0, data[:chunk+5]), http.StatusNoContent) // the 5 bytes past the chunk are kept
		r := patch(path, chunk+5, data[chunk+5:], "Upload-Length", strconv.Itoa(len(data)))
		expectHTTP(t, r, http.StatusNoContent)
		if headerInt(t, r.Header, "Upload-Offset") != int64(len(data)) {
			t.Fatalf("offset %s", r.Header.Get("Upload-Offset"))
		}
		e.requireExact(t, waitCompleted(t, c, idOf(path)), data)
	})

	t.Run("length after the bytes", func(t *testing.T) {
		data := randomBytes(2*chunk, 195)
		path := deferred()
		expectHTTP(t, patch(path, 0, data), http.StatusNoContent)
		waitFor(t, "both parts in S3", func() bool { return getUpload(t, c, idOf(path)).UploadedChunks == 2 })
		if up := getUpload(t, c, idOf(path)); up.State != chunkupv1.UploadState_UPLOAD_STATE_ACTIVE || up.TotalChunks != 0 {
			t.Fatalf("before its length is known: %v", up)
		}
		expectHTTP(t, patch(path, len(data), nil, "Upload-Length", strconv.Itoa(len(data))), http.StatusNoContent)
		e.requireExact(t, waitCompleted(t, c, idOf(path)), data)
	})

	t.Run("IETF body of unknown length", func(t *testing.T) {
		data := randomBytes(chunk+99, 196)
		// An io.Reader that is not a *bytes.Reader goes chunked, without Content-Length.
		r := d.do("POST", "/files/", io.MultiReader(bytes.NewReader(data)), "Upload-Draft-Interop-Version", "8", "Upload-Complete", "?1")
		expectHTTP(t, r, http.StatusCreated)
		if r.Header.Get("Upload-Complete") != "?1" || headerInt(t, r.Header, "Upload-Offset") != int64(len(data)) {
			t.Fatalf("IETF creation: %v", r.Header)
		}
		e.requireExact(t, waitCompleted(t, c, idOf(r.Header.Get("Location"))), data)
	})
}

// TestHTTPConcurrentAppends: while a request appends to an upload, another one to the
// same upload, on the same replica or another, is refused (tus 423, IETF 409, both with
// Retry-After); many requests racing with the whole body each end 204, 409 or 423; and
// the object is exact either way.
func TestHTTPConcurrentAppends(t *testing.T) {
	e := newEnv(t)
	a := e.start(t, e.config())
	b := e.start(t, e.config("api"))
	c := e.client(t, a)
	da, db := doorOf(t, a.HTTPAddr()), doorOf(t, b.HTTPAddr())

	t.Run("refused while another appends", func(t *testing.T) {
		data := randomBytes(3*chunk+100, 190)
		path := da.create(len(data))
		first, pw := appendInFlight(t, da, db, path, data)
		r := db.do("PATCH", path, bytes.NewReader(data[chunk:]), "Tus-Resumable", "1.0.0", "Content-Type", tusCT, "Upload-Offset", strconv.Itoa(chunk))
		expectHTTP(t, r, http.StatusLocked)
		// The refusal says when to come back and from where.
		if r.Header.Get("Retry-After") == "" || r.Header.Get("Upload-Offset") != strconv.Itoa(chunk) {
			t.Fatalf("423: %v, want Retry-After and Upload-Offset %d", r.Header, chunk)
		}
		r = db.do("PATCH", path, bytes.NewReader(data[chunk:]), "Upload-Draft-Interop-Version", "8", "Upload-Complete", "?1",
			"Content-Type", "application/partial-upload", "Upload-Offset", strconv.Itoa(chunk))
		expectHTTP(t, r, http.StatusConflict)
		if r.Header.Get("Retry-After") == "" || r.Header.Get("Content-Type") != "application/problem+json" ||
			r.Header.Get("Upload-Offset") != strconv.Itoa(chunk) || r.Header.Get("Upload-Complete") != "?0" {
			t.Fatalf("IETF refusal: %v, want Retry-After, problem+json, Upload-Offset %d and Upload-Complete ?0", r.Header, chunk)
		}
		if _, err := pw.Write(data[chunk+10:]); err != nil {
			t.Fatal(err)
		}
		pw.Close()
		expectHTTP(t, <-first, http.StatusNoContent)
		e.requireExact(t, waitCompleted(t, c, idOf(path)), data)
	})

	t.Run("racing", func(t *testing.T) {
		data := randomBytes(2*chunk+5, 191)
		path := da.create(len(data))
		codes := make([]int, 8)
		var wg sync.WaitGroup
		for i := range codes {
			d := da
			if i%2 == 1 {
				d = db
			}
			wg.Go(func() {
				codes[i] = d.do("PATCH", path, bytes.NewReader(data), "Tus-Resumable", "1.0.0", "Content-Type", tusCT, "Upload-Offset", "0").StatusCode
			})
		}
		wg.Wait()
		ok := 0
		for _, code := range codes {
			switch code {
			case http.StatusNoContent:
				ok++
			case http.StatusConflict, http.StatusLocked:
			default:
				t.Fatalf("a racing PATCH got %d (all: %v)", code, codes)
			}
		}
		if ok != 1 {
			t.Fatalf("%d racing PATCHes succeeded (%v), want exactly one", ok, codes)
		}
		e.requireExact(t, waitCompleted(t, c, idOf(path)), data)
	})
}

// TestHTTPShutdownDrains: a replica shutting down stops an HTTP append after the chunk
// it is staging, keeps the bytes after it as the upload's tail, answers 503 with the
// durable offset, and the client resumes on another replica.
func TestHTTPShutdownDrains(t *testing.T) {
	e := newEnv(t)
	a := e.start(t, e.config("api"))
	b := e.start(t, e.config())
	da, db := doorOf(t, a.HTTPAddr()), doorOf(t, b.HTTPAddr())
	data := randomBytes(3*chunk+7, 192)
	path := da.create(len(data))
	first, pw := appendInFlight(t, da, db, path, data)
	stopped := make(chan struct{})
	go func() { a.Stop(); close(stopped) }()
	r := <-first
	pw.Close()
	<-stopped
	expectHTTP(t, r, http.StatusServiceUnavailable)
	// Every byte it received is kept: the chunk, and the 10 bytes after it as the tail.
	if r.Header.Get("Retry-After") == "" || headerInt(t, r.Header, "Upload-Offset") != chunk+10 {
		t.Fatalf("drained PATCH: %v", r.Header)
	}
	r = db.do("PATCH", path, bytes.NewReader(data[chunk+10:]), "Tus-Resumable", "1.0.0", "Content-Type", tusCT, "Upload-Offset", strconv.Itoa(chunk+10))
	expectHTTP(t, r, http.StatusNoContent)
	e.requireExact(t, waitCompleted(t, e.client(t, b), idOf(path)), data)
}

// TestHTTPUploadIsAChunkupUpload: an upload through the HTTP door is a chunkup upload
// like any other: WatchUpload follows it to COMPLETED, GetUpload and `chunkup status`
// show it, Kafka carries its UploadCompleted event, and OCR reads it. An upload aborted
// over HTTP (DELETE) is ABORTED for gRPC, with its event; a completed one cannot be.
func TestHTTPUploadIsAChunkupUpload(t *testing.T) {
	e := newEnv(t)
	k := testenv.StartKafka(t, topic)
	a := e.start(t, withOCR(withKafka(e.config(), k)))
	c := e.client(t, a)
	d := doorOf(t, a.HTTPAddr())
	png := testdocs.PNG("INVOICE 4242", "HTTP DOOR")
	meta := "filename " + base64.StdEncoding.EncodeToString([]byte("scan.png")) + ",filetype " +
		base64.StdEncoding.EncodeToString([]byte("image/png")) + ",source " + base64.StdEncoding.EncodeToString([]byte("web"))
	path := d.create(len(png), "Upload-Metadata", meta)
	id := idOf(path)

	progress := make(chan []*chunkupv1.UploadProgress, 1)
	watching := make(chan struct{})
	go func() {
		var got []*chunkupv1.UploadProgress
		_, err := c.Watch(ctx(t), id, func(p *chunkupv1.UploadProgress) {
			if len(got) == 0 {
				close(watching)
			}
			got = append(got, p)
		})
		if err != nil {
			t.Errorf("watch: %v", err)
		}
		progress <- got
	}()
	<-watching
	r := d.do("PATCH", path, bytes.NewReader(png), "Tus-Resumable", "1.0.0", "Content-Type", tusCT, "Upload-Offset", "0")
	expectHTTP(t, r, http.StatusNoContent)
	got := <-progress
	if last := got[len(got)-1]; last.State != chunkupv1.UploadState_UPLOAD_STATE_COMPLETED || last.Size != int64(len(png)) {
		t.Fatalf("the watch ended with %v", last)
	}

	up := getUpload(t, c, id)
	e.requireExact(t, up, png)
	if up.Name != "scan.png" || up.ContentType != "image/png" || up.Metadata["source"] != "web" || up.CorrelationId == "" {
		t.Fatalf("upload %v: want the tus metadata", up)
	}
	out, err := exec.CommandContext(ctx(t), harness.Binary(t), "status", "--server", a.GRPCAddr(), id).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), id+" COMPLETED s3://"+bucket+"/"+up.Key+" size="+strconv.Itoa(len(png))) {
		t.Fatalf("chunkup status: %v\n%s", err, out)
	}
	d2 := waitDecision(t, documents(t, a.GRPCAddr()), id)
	if d2.Ocr == nil || d2.Ocr.Words < 2 || d2.CorrelationId != up.CorrelationId {
		t.Fatalf("document %v", d2)
	}

	// DELETE: a completed upload cannot be aborted; an active one is.
	expectHTTP(t, d.do("DELETE", path, nil, "Tus-Resumable", "1.0.0"), http.StatusConflict)
	other := d.create(100)
	expectHTTP(t, d.do("DELETE", other, nil, "Tus-Resumable", "1.0.0"), http.StatusNoContent)
	expectHTTP(t, d.do("HEAD", other, nil, "Tus-Resumable", "1.0.0"), http.StatusGone)
	if up := getUpload(t, c, idOf(other)); up.State != chunkupv1.UploadState_UPLOAD_STATE_ABORTED {
		t.Fatalf("aborted over HTTP: %v", up)
	}
	waitFor(t, "the events on Kafka", func() bool {
		evs := allEvents(t, k)
		return len(eventsFor(evs, id, "chunkup.v1.UploadCompleted")) == 1 && len(eventsFor(evs, idOf(other), "chunkup.v1.UploadAborted")) == 1
	})

	// GET shows the upload as JSON, for the page.
	r = d.do("GET", path, nil)
	var j struct {
		ID, State string
		Offset    int64
	}
	if err := json.Unmarshal(r.body, &j); err != nil || j.ID != id || j.State != "COMPLETED" || j.Offset != int64(len(png)) {
		t.Fatalf("GET: %s %v", r.body, err)
	}
}

// TestHTTPBrowserPage: `chunkup dev` serves the upload page at /; headless Chromium
// (Debian's, driven by puppeteer-core) opens it, two files are chosen in it, both
// upload through the door, and both objects are exact. Dev keeps its other endpoints.
func TestHTTPBrowserPage(t *testing.T) {
	chromium, err := testenv.ChromiumBinary()
	if err != nil {
		t.Fatal(err)
	}
	bin := harness.Binary(t)
	port := func() string { return fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)) }
	httpAddr, s3Addr := port(), port()
	dev := testenv.StartProcess(t, bin, []string{"dev", "--data", t.TempDir(), "--grpc-addr", port(), "--http-addr", httpAddr,
		"--s3-addr", s3Addr, "--kafka-addr", port(), "--redis", "spawn"}, nil)
	testenv.WaitReady(t, dev, httpAddr)
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, err := http.Get("http://" + httpAddr + p)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("dev %s: %v %v", p, resp, err)
		}
		resp.Body.Close()
	}

	files := map[string][]byte{"small.txt": []byte("a small file from the browser\n"), "large.bin": randomBytes(12*MiB+321, 193)}
	var paths []string
	for name, b := range files {
		paths = append(paths, writeFile(t, name, b))
	}
	out := runNode(t, "page-upload.cjs", []string{"PAGE_URL=http://" + httpAddr + "/", "CHROMIUM=" + chromium, "PROFILE_DIR=" + t.TempDir()}, paths, false)
	var rows []struct{ Name, State, Detail, ID, Key string }
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("page-upload.cjs printed %q: %v", out, err)
	}
	if len(rows) != len(files) {
		t.Fatalf("rows %+v", rows)
	}
	s3c, err := s3store.NewClient(ctx(t), s3store.Config{Endpoint: "http://" + s3Addr, AccessKey: "chunkup-dev", SecretKey: "chunkup-dev"})
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range rows {
		want, ok := files[row.Name]
		if !ok || row.State != "COMPLETED" || row.Key != "uploads/"+row.ID+"/"+row.Name {
			t.Fatalf("row %+v", row)
		}
		got := harness.Object(t, ctx(t), s3c, "chunkup", row.Key)
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: the object has %d bytes, differing from the %d of the file", row.Name, len(got), len(want))
		}
	}
}
