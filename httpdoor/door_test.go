package httpdoor

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// env is a door over an in-memory core behind a real HTTP server, so interim (1xx)
// responses, chunked bodies and broken connections are what a client really sees.
type env struct {
	t    *testing.T
	core *memCore
	door *Handler
	srv  *httptest.Server
}

func newEnv(t *testing.T, chunkSize int64, cfg Config) *env {
	t.Helper()
	core := newMemCore(chunkSize)
	door, err := New(core, cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(door.cfg.Prefix, door)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	e := &env{t: t, core: core, door: door, srv: srv}
	t.Cleanup(func() {
		if n := door.bufs.inUse(); n != 0 {
			t.Errorf("%d bytes of chunk buffers were not given back", n)
		}
	})
	return e
}

// reply is a response with its body and the interim responses before it.
type reply struct {
	*http.Response
	body    []byte
	interim []interim
}

type interim struct {
	code   int
	header textproto.MIMEHeader
}

// do sends a request with the given header fields (name, value pairs) and reads the
// whole response.
func (e *env) do(method, path string, body io.Reader, kv ...string) reply {
	e.t.Helper()
	r, err := e.try(method, path, body, kv...)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// try is do, returning the error of a request that got no response.
func (e *env) try(method, path string, body io.Reader, kv ...string) (reply, error) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	var infos []interim
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		mu.Lock()
		defer mu.Unlock()
		infos = append(infos, interim{code, h})
		return nil
	}})
	url := path
	if !strings.HasPrefix(path, "http") {
		url = e.srv.URL + path
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if b, ok := body.(*bytes.Reader); ok {
		req.ContentLength = int64(b.Len())
	}
	for i := 0; i+1 < len(kv); i += 2 {
		req.Header.Add(kv[i], kv[i+1]) // a name given twice is sent as two lines
	}
	res, err := e.srv.Client().Do(req)
	if err != nil {
		return reply{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return reply{}, err
	}
	mu.Lock()
	defer mu.Unlock()
	return reply{Response: res, body: b, interim: infos}, nil
}

func (r reply) offset(t *testing.T) int64 {
	t.Helper()
	n, err := strconv.ParseInt(r.Header.Get("Upload-Offset"), 10, 64)
	if err != nil {
		t.Fatalf("Upload-Offset %q: %v (status %d, %s)", r.Header.Get("Upload-Offset"), err, r.StatusCode, r.body)
	}
	return n
}

func expectStatus(t *testing.T, r reply, code int) {
	t.Helper()
	if r.StatusCode != code {
		t.Fatalf("status %d, want %d; body: %s", r.StatusCode, code, r.body)
	}
}

func randomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)}))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func idOf(t *testing.T, r reply) string {
	t.Helper()
	loc := r.Header.Get("Location")
	id, ok := strings.CutPrefix(loc, "/files/")
	if !ok || id == "" {
		t.Fatalf("Location %q is not an upload URL (status %d, %s)", loc, r.StatusCode, r.body)
	}
	return id
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func checkObject(t *testing.T, c *memCore, id string, want []byte) {
	t.Helper()
	got, state := c.object(id)
	if state != StateCompleted {
		t.Fatalf("upload %s is %s, want COMPLETED", id, state)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("object has %d bytes, differs from the %d sent", len(got), len(want))
	}
}

const tusCT = "application/offset+octet-stream"

func TestTusCreationWithUpload(t *testing.T) {
	e := newEnv(t, 64<<10, Config{})
	data := []byte("hello, world\n")
	r := e.do("POST", "/files/", bytes.NewReader(data),
		"Tus-Resumable", "1.0.0", "Upload-Length", strconv.Itoa(len(data)), "Content-Type", tusCT,
		"Upload-Metadata", "filename "+b64("notes.txt")+",filetype "+b64("text/plain")+",is_confidential")
	expectStatus(t, r, http.StatusCreated)
	if r.offset(t) != int64(len(data)) || r.Header.Get("Tus-Resumable") != "1.0.0" {
		t.Fatalf("headers %v", r.Header)
	}
	if len(r.interim) != 0 {
		t.Fatalf("a tus client got interim responses %v", r.interim)
	}
	id := idOf(t, r)
	checkObject(t, e.core, id, data)
	up, _ := e.core.Get(context.Background(), id)
	if up.Name != "notes.txt" || up.ContentType != "text/plain" || up.Metadata["is_confidential"] != "" || len(up.Metadata) != 3 {
		t.Fatalf("upload %+v", up)
	}

	h := e.do("HEAD", "/files/"+id, nil, "Tus-Resumable", "1.0.0")
	expectStatus(t, h, http.StatusOK)
	if h.offset(t) != int64(len(data)) || h.Header.Get("Upload-Length") != "13" || h.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("HEAD headers %v", h.Header)
	}
	if got := h.Header.Get("Upload-Metadata"); got != "filename "+b64("notes.txt")+",filetype "+b64("text/plain")+",is_confidential" {
		t.Fatalf("Upload-Metadata echoed as %q", got)
	}
	if got, want := h.Header.Get("Repr-Digest"), formatReprCRC32C(crc32.Checksum(data, castagnoli)); got != want {
		t.Fatalf("Repr-Digest %q, want %q", got, want)
	}

	// The same in one request with an empty file: complete at once.
	r = e.do("POST", "/files/", nil, "Tus-Resumable", "1.0.0", "Upload-Length", "0")
	expectStatus(t, r, http.StatusCreated)
	checkObject(t, e.core, idOf(t, r), nil)
}

// A 30 MB upload in three PATCH requests of 10 MB, each sent from the offset a HEAD
// reports: every byte of each is kept (whole 8 MiB chunks, and the rest as the tail of
// the next chunk).
func TestTusThreePatches(t *testing.T) {
	const size = 30_000_000
	e := newEnv(t, 8<<20, Config{})
	data := randomBytes(size, 1)
	r := e.do("POST", "/files/", nil, "Tus-Resumable", "1.0.0", "Upload-Length", strconv.Itoa(size))
	expectStatus(t, r, http.StatusCreated)
	if r.Header.Get("Upload-Expires") == "" {
		t.Fatal("no Upload-Expires on creation")
	}
	id := idOf(t, r)
	wantOffsets := []int64{10_000_000, 20_000_000, size}
	for i := range 3 {
		h := e.do("HEAD", "/files/"+id, nil, "Tus-Resumable", "1.0.0")
		expectStatus(t, h, http.StatusOK)
		off := h.offset(t)
		end := min(off+10_000_000, size)
		if i == 2 {
			end = size
		}
		p := e.do("PATCH", "/files/"+id, bytes.NewReader(data[off:end]),
			"Tus-Resumable", "1.0.0", "Content-Type", tusCT, "Upload-Offset", strconv.FormatInt(off, 10))
		expectStatus(t, p, http.StatusNoContent)
		if got := p.offset(t); got != wantOffsets[i] {
			t.Fatalf("PATCH %d: offset %d, want %d", i+1, got, wantOffsets[i])
		}
		if i < 2 && p.Header.Get("Upload-Expires") == "" {
			t.Fatalf("PATCH %d: no Upload-Expires", i+1)
		}
	}
	checkObject(t, e.core, id, data)
}

func TestOffsetMismatchChangesNothing(t *testing.T) {
	for _, p := range []string{"tus", "ietf"} {
		t.Run(p, func(t *testing.T) {
			const C = 1 << 16
			e := newEnv(t, C, Config{})
			data := randomBytes(3*C, 2)
			r := e.do("POST", "/files/", nil, "Tus-Resumable", "1.0.0", "Upload-Length", strconv.Itoa(len(data)))
			id := idOf(t, r)
			p1 := e.do("PATCH", "/files/"+id, bytes.NewReader(data[:C]), "Tus-Resumable", "1.0.0", "Content-Type", tusCT, "Upload-Offset", "0")
			expectStatus(t, p1, http.StatusNoContent)
			before := e.core.stageCount()

			var bad reply
			if p == "tus" {
				bad = e.do("PATCH", "/files/"+id, bytes.NewReader(data[2*C:]), "Tus-Resumable", "1.0.0", "Content-Type", tusCT, "Upload-Offset", strconv.Itoa(2*C))
			} else {
				bad = e.do("PATCH", "/files/"+id, bytes.NewReader(data[2*C:]), "Upload-Draft-Interop-Version", "8",
					"Content-Type", "application/partial-upload", "Upload-Offset", strconv.Itoa(2*C), "Upload-Complete", "?1")
			}
			expectStatus(t, bad, http.StatusConflict)
			if bad.offset(t) != C {
				t.Fatalf("409 says offset %d, want %d", bad.offset(t), C)
			}
			if p == "ietf" {
				var pb struct {
					Type             string
					Expected, Provid int64
				}
				var raw map[string]any
				if err := json.Unmarshal(bad.body, &raw); err != nil || bad.Header.Get("Content-Type") != "application/problem+json" {
					t.Fatalf("problem body %s: %v", bad.body, err)
				}
				pb.Type, _ = raw["type"].(string)
				if pb.Type != problemMismatchingOffset || raw["expected-offset"] != float64(C) || raw["provided-offset"] != float64(2*C) || bad.Header.Get("Upload-Complete") != "?0" {
					t.Fatalf("problem %s, headers %v", bad.body, bad.Header)
				}
			}
			if e.core.stageCount() != before {
				t.Fatal("a refused PATCH staged a chunk")
			}
			got, _ := e.core.object(id)
			if !bytes.Equal(got, data[:C]) {
				t.Fatal("the upload changed")
			}
		})
	}
}

func TestChecksums(t *testing.T) {
	const C = 1 << 16
	data := randomBytes(2*C+100, 3)
	sha := sha1.Sum(data[:2*C])
	crcB := func(b []byte) string {
		s := crc32.Checksum(b, castagnoli)
		return base64.StdEncoding.EncodeToString([]byte{byte(s >> 24), byte(s >> 16), byte(s >> 8), byte(s)})
	}
	wrong := append([]byte{}, data[:2*C]...)
	wrong[C+5] ^= 1
	tests := []struct {
		name   string
		body   []byte
		kv     []string
		status int
		staged bool
	}{
		{"tus sha1 good", data[:2*C], []string{"Upload-Checksum", "sha1 " + base64.StdEncoding.EncodeToString(sha[:])}, 204, true},
		{"tus sha1 bad", wrong, []string{"Upload-Checksum", "sha1 " + base64.StdEncoding.EncodeToString(sha[:])}, 460, false},
		{"tus crc32c good", data[:2*C], []string{"Upload-Checksum", "crc32c " + crcB(data[:2*C])}, 204, true},
		{"tus crc32c bad", wrong, []string{"Upload-Checksum", "crc32c " + crcB(data[:2*C])}, 460, false},
		{"tus unknown algorithm", data[:2*C], []string{"Upload-Checksum", "whirlpool AAAA"}, 400, false},
		{"tus over the checksum limit", data[:2*C], []string{"Upload-Checksum", "crc32c " + crcB(data[:2*C])}, 413, false},
		{"tus over the checksum limit, chunked", data[:2*C], []string{"Upload-Checksum", "crc32c " + crcB(data[:2*C])}, 413, false},
		{"ietf content-digest good", data[:2*C], []string{"Content-Digest", "crc32c=:" + crcB(data[:2*C]) + ":"}, 204, true},
		{"ietf content-digest bad", wrong, []string{"Content-Digest", "sha=:" + base64.StdEncoding.EncodeToString(sha[:]) + ":"}, 400, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{}
			if strings.Contains(tc.name, "limit") {
				cfg.MaxChecksumBody = C
			}
			e := newEnv(t, C, cfg)
			id := idOf(t, e.do("POST", "/files/", nil, "Tus-Resumable", "1.0.0", "Upload-Length", strconv.Itoa(len(data))))
			kv := []string{"Tus-Resumable", "1.0.0", "Content-Type", tusCT, "Upload-Offset", "0"}
			if strings.HasPrefix(tc.name, "ietf") {
				kv = []string{"Upload-Draft-Interop-Version", "6", "Content-Type", "application/partial-upload", "Upload-Offset", "0", "Upload-Complete", "?0"}
			}
			var body io.Reader = bytes.NewReader(tc.body)
			if strings.HasSuffix(tc.name, "chunked") {
				body = io.MultiReader(body) // no length: chunked
			}
			r := e.do("PATCH", "/files/"+id, body, append(kv, tc.kv...)...)
			expectStatus(t, r, tc.status)
			got, _ := e.core.object(id)
			if tc.staged != (len(got) == 2*C) || !tc.staged && len(got) != 0 {
				t.Fatalf("staged %d bytes (want staged: %v)", len(got), tc.staged)
			}
			if tc.staged && !bytes.Equal(got, data[:2*C]) {
				t.Fatal("staged bytes differ")
			}
		})
	}
}

func TestDeferredLength(t *testing.T) {
	const C = 1 << 16
	for _, tc := range []struct {
		name string
		size int
	}{{"ends inside a chunk", 2*C + 777}, {"ends on a chunk boundary", 2 * C}, {"empty", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, C, Config{})
			data := randomBytes(tc.size, 4)
			r := e.do("POST", "/files/", nil, "Tus-Resumable", "1.0.0", "Upload-Defer-Length", "1")
			expectStatus(t, r, http.StatusCreated)
			id := idOf(t, r)
			h := e.do("HEAD", "/files/"+id, nil, "Tus-Resumable", "1.0.0")
			if h.Header.Get("Upload-Defer-Length") != "1" || h.Header.Get("Upload-Length") != "" {
				t.Fatalf("HEAD of a deferred upload: %v", h.Header)
			}
			// Whole chunks first, without the length: they are staged, not as the last.
			off := 0
			if tc.size >= C {
				p := e.do("PATCH", "/files/"+id, bytes.NewReader(data[:2*C]), "Tus-Resumable", "1.0.0", "Content-Type", tusCT, "Upload-Offset", "0")
				expectStatus(t, p, http.StatusNoContent)
				off = int(p.offset(t))
				if off != 2*C {
					t.Fatalf("offset %d", off)
				}
			}
			// Then the rest (possibly nothing) with the length.
			p := e.do("PATCH", "/files/"+id, bytes.NewReader(data[off:]), "Tus-Resumable", "1.0.0", "Content-Type", tusCT,
				"Upload-Offset", strconv.Itoa(off), "Upload-Length", strconv.Itoa(tc.size))
			expectStatus(t, p, http.StatusNoContent)
			if p.offset(t) != int64(tc.size) {
				t.Fatalf("offset %d, want %d", p.offset(t), tc.size)
			}
			checkObject(t, e.core, id, data)
			h = e.do("HEAD", "/files/"+id, nil, "Tus-Resumable", "1.0.0")
			if h.Header.Get("Upload-Length") != strconv.Itoa(tc.size) || h.Header.Get("Upload-Defer-Length") != "" {
				t.Fatalf("HEAD after completion: %v", h.Header)
			}
			// The length cannot change.
			p = e.do("PATCH", "/files/"+id, bytes.NewReader(nil), "Tus-Resumable", "1.0.0", "Content-Type", tusCT,
				"Upload-Offset", strconv.Itoa(tc.size), "Upload-Length", strconv.Itoa(tc.size+1))
			expectStatus(t, p, http.StatusBadRequest)
		})
	}
}

func TestTermination(t *testing.T) {
	e := newEnv(t, 1<<16, Config{})
	for _, kv := range [][]string{{"Tus-Resumable", "1.0.0"}, {"Upload-Draft-Interop-Version", "8"}} {
		id := idOf(t, e.do("POST", "/files/", nil, "Tus-Resumable", "1.0.0", "Upload-Length", "100"))
		expectStatus(t, e.do("DELETE", "/files/"+id, nil, kv...), http.StatusNoContent)
		expectStatus(t, e.do("DELETE", "/files/"+id, nil, kv...), http.StatusNoContent) // a repeat
		expectStatus(t, e.do("HEAD", "/files/"+id, nil, kv...), http.StatusGone)
		r := e.do("PATCH", "/files/"+id, bytes.NewReader(make([]byte, 100)), "Tus-Resumable", "1.0.0", "Content-Type", tusCT, "Upload-Offset", "0")
		expectStatus(t, r, http.StatusGone)
		if _, state := e.core.object(id); state != StateAborted {
			t.Fatalf("state %s", state)
		}
	}
	expectStatus(t, e.do("HEAD", "/files/nosuch", nil, "Tus-Resumable", "1.0.0"), http.StatusNotFound)
	// Through X-HTTP-Method-Override, for clients that cannot send DELETE.
	id := idOf(t, e.do("POST", "/files/", nil, "Tus-Resumable", "1.0.0", "Upload-Length", "100"))
	expectStatus(t, e.do("POST", "/files/"+id, nil, "Tus-Resumable", "1.0.0", "X-HTTP-Method-Override", "DELETE"), http.StatusNoContent)
}

// blockingBody sends first, then blocks until released, then sends rest (or fails).
type blockingBody struct {
	first, rest []byte
	sent        chan struct{} // closed once first was read
	release     chan error
	stage       int
}

func (b *blockingBody) Read(p []byte) (int, error) {
	switch b.stage {
	case 0:
		n := copy(p, b.first)
		b.first = b.first[n:]
		if len(b.first) == 0 {
			b.stage = 1
			close(b.sent)
		}
		return n, nil
	case 1:
		if err := <-b.release; err != nil {
			return 0, err
		}
		b.stage = 2
		fallthrough
	default:
		if len(b.rest) == 0 {
			return 0, io.EOF
		}
		n := copy(p, b.rest)
		b.rest = b.rest[n:]
		return n, nil
	}
}

func TestConcurrentAppend(t *testing.T) {
	const C = 1 << 16
	for _, tc := range []struct {
		name string
		kv   []string
		want int
	}{
		{"tus gets 423", []string{"Tus-Resumable", "1.0.0", "Content-Type", tusCT}, http.StatusLocked},
		{"ietf gets 409", []string{"Upload-Draft-Interop-Version", "8", "Content-Type", "application/partial-upload", "Upload-Complete", "?1"}, http.StatusConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, C, Config{})
			data := randomBytes(2*C+10, 5)
			id := idOf(t, e.do("POST", "/files/", nil, "Tus-Resumable", "1.0.0", "Upload-Length", strconv.Itoa(len(data))))
			body := &blockingBody{first: data[:C+10], rest: data[C+10:], sent: make(chan struct{}), release: make(chan error)}
			first := make(chan reply, 1)
			go func() {
				first <- e.do("PATCH", "/files/"+id, body, append([]string{"Upload-Offset", "0"}, tc.kv...)...)
			}()
			<-body.sent
			// The client has sent the first bytes; the server may not have the request yet.
			waitFor(t, "the first PATCH to stage chunk 1", func() bool { return e.core.locked(id) && e.core.stageCount() == 1 })
			second := e.do("PATCH", "/files/"+id, bytes.NewReader(data), append([]string{"Upload-Offset", "0"}, tc.kv...)...)
			// The first request goes on before anything is checked, so that a failure
			// here does not leave it blocked.
			body.release <- nil
			r := <-first
			expectStatus(t, second, tc.want)
			if second.Header.Get("Retry-After") == "" {
				t.Fatal("no Retry-After on a locked upload")
			}
			// The refusal tells the durable offset, so the client knows where to go on.
			if got := second.Header.Get("Upload-Offset"); got != strconv.Itoa(C) {
				t.Fatalf("Upload-Offset %q on a locked upload, want %d", got, C)
			}
			if r.StatusCode/100 != 2 || r.offset(t) != int64(len(data)) {
				t.Fatalf("first PATCH: %d %v %s", r.StatusCode, r.Header, r.body)
			}
			checkObject(t, e.core, id, data)
		})
	}
}

// waitFor polls until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting until %s", what)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// A PATCH whose connection breaks in the middle of its second chunk leaves the
// offset at the end of the first: the partial chunk is dropped.
func TestInterruptedAppend(t *testing.T) {
	const C = 1 << 16
	e := newEnv(t, C, Config{})
	data := randomBytes(3*C, 6)
	id := idOf(t, e.do("POST", "/files/", nil, "Tus-Resumable", "1.0.0", "Upload-Length", strconv.Itoa(len(data))))

	conn, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "PATCH /files/%s HTTP/1.1\r\nHost: x\r\nTus-Resumable: 1.0.0\r\nContent-Type: %s\r\nUpload-Offset: 0\r\nContent-Length: %d\r\n\r\n", id, tusCT, len(data))
	if _, err := conn.Write(data[:C+C/2]); err != nil {
		t.Fatal(err)
	}
	// Chunk 1 is staged as soon as it has arrived, while the request goes on.
	waitFor(t, "chunk 1 is staged", func() bool { return e.core.stageCount() == 1 })
	conn.Close()
	waitFor(t, "the request ends", func() bool { return !e.core.locked(id) })
	h := e.do("HEAD", "/files/"+id, nil, "Tus-Resumable", "1.0.0")
	if h.offset(t) != C+C/2 {
		t.Fatalf("offset %d after an interrupted PATCH, want every byte it sent, %d", h.offset(t), C+C/2)
	}
	// The client resumes from there.
	p := e.do("PATCH", "/files/"+id, bytes.NewReader(data[C+C/2:]), "Tus-Resumable", "1.0.0", "Content-Type", tusCT, "Upload-Offset", strconv.Itoa(C+C/2))
	expectStatus(t, p, http.StatusNoContent)
	checkObject(t, e.core, id, data)
}

// stalledPatch starts a tus PATCH of data to upload id whose body sends chunk 1 (of C
// bytes) and a few bytes more, then blocks until body.release; it returns once chunk 1
// is staged. The reply comes on done.
func (e *env) stalledPatch(id string, data []byte, C int) (done chan reply, body *blockingBody) {
	e.t.Helper()
	body = &blockingBody{first: data[:C+10], rest: data[C+10:], sent: make(chan struct{}), release: make(chan error)}
	done = make(chan reply, 1)
	go func() {
		done <- e.do("PATCH", "/files/"+id, body, "Tus-Resumable", "1.0.0", "Content-Type", tusCT, "Upload-Offset", "0")
	}()
	<-body.sent
	waitFor(e.t, "chunk 1 is staged", func() bool { return e.core.stageCount() == 1 })
	return done, body
}

// A request that loses the upload's lock (its lease expired) stops at once: its
// blocked body read is interrupted, and it stages nothing more.
func TestLockLostInterrupts(t *testing.T) {
	const C = 1 << 16
	e := newEnv(t, C, Config{})
	data := randomBytes(3*C, 7)
	id := idOf(t, e.do("POST", "/files/", nil, "Tus-Resumable", "1.0.0", "Upload-Length", strconv.Itoa(len(data))))
	done, body := e.stalledPatch(id, data, C)
	e.core.loseLock(id)
	r := <-done
	close(body.release)
	expectStatus(t, r, http.StatusLocked)
	if r.offset(t) != C {
		t.Fatalf("offset %d, want %d", r.offset(t), C)
	}
	if got, _ := e.core.object(id); len(got) != C {
		t.Fatalf("%d bytes staged after the lock was lost", len(got))
	}
}

// Every accepted interop version creates (optimistic and careful), appends and
// completes; see TestInteropDifferences for what differs between them.
func TestIETF(t *testing.T) {
	const C = 1 << 16
	for n := minInterop; n <= maxInterop; n++ {
		v := strconv.Itoa(n)
		t.Run("interop "+v, func(t *testing.T) {
			e := newEnv(t, C, Config{MaxSize: 1 << 30})
			partial := "application/partial-upload"
			data := randomBytes(3*C+123, 8)

			// Optimistic creation with the whole file: one 104 with Location, then the
			// target's response.
			r := e.do("POST", "/files/", bytes.NewReader(data), "Upload-Draft-Interop-Version", v, "Upload-Complete", "?1",
				"Content-Type", "image/png", "Content-Disposition", `inline; filename="scan 1.png"`)
			expectStatus(t, r, http.StatusCreated)
			id := idOf(t, r)
			if len(r.interim) == 0 || r.interim[0].code != 104 || r.interim[0].header.Get("Location") != "/files/"+id ||
				r.interim[0].header.Get("Upload-Draft-Interop-Version") != v || !strings.Contains(r.interim[0].header.Get("Upload-Limit"), "max-size=1073741824") {
				t.Fatalf("interim responses %v", r.interim)
			}
			for _, in := range r.interim[1:] {
				if in.header.Get("Location") != "" || in.header.Get("Upload-Offset") == "" {
					t.Fatalf("progress 104 %v", in.header)
				}
			}
			if r.Header.Get("Upload-Complete") != "?1" || r.offset(t) != int64(len(data)) {
				t.Fatalf("final %v", r.Header)
			}
			var j uploadJSON
			if err := json.Unmarshal(r.body, &j); err != nil || j.ID != id || !j.Complete || j.Name != "scan 1.png" || j.ContentType != "image/png" {
				t.Fatalf("body %s: %v", r.body, err)
			}
			checkObject(t, e.core, id, data)

			// Careful creation: an empty ?0 request learns the URL.
			r = e.do("POST", "/files/", bytes.NewReader(nil), "Upload-Draft-Interop-Version", v, "Upload-Complete", "?0", "Upload-Length", strconv.Itoa(len(data)))
			expectStatus(t, r, http.StatusCreated)
			id = idOf(t, r)
			if r.Header.Get("Upload-Complete") != "?0" || r.offset(t) != 0 || strings.Contains(r.Header.Get("Upload-Limit"), "min-append-size") {
				t.Fatalf("careful creation %v", r.Header)
			}
			// HEAD: 204 and the state.
			h := e.do("HEAD", "/files/"+id, nil, "Upload-Draft-Interop-Version", v)
			expectStatus(t, h, http.StatusNoContent)
			if h.offset(t) != 0 || h.Header.Get("Upload-Complete") != "?0" || h.Header.Get("Cache-Control") != "no-store" ||
				h.Header.Get("Upload-Length") != strconv.Itoa(len(data)) || !strings.Contains(h.Header.Get("Upload-Limit"), "max-age=") {
				t.Fatalf("HEAD %v", h.Header)
			}
			// Append 1.5 chunks with ?0: every byte is kept, and a 104 reports the chunk.
			r = e.do("PATCH", "/files/"+id, bytes.NewReader(data[:C+C/2]), "Upload-Draft-Interop-Version", v, "Content-Type", partial, "Upload-Offset", "0", "Upload-Complete", "?0")
			expectStatus(t, r, http.StatusNoContent)
			if r.offset(t) != C+C/2 || r.Header.Get("Upload-Complete") != "?0" {
				t.Fatalf("append %v", r.Header)
			}
			if len(r.interim) != 1 || r.interim[0].header.Get("Upload-Offset") != strconv.Itoa(C) || r.interim[0].header.Get("Location") != "" {
				t.Fatalf("append interim responses %v", r.interim)
			}
			// Append the rest with ?1.
			r = e.do("PATCH", "/files/"+id, bytes.NewReader(data[C+C/2:]), "Upload-Draft-Interop-Version", v, "Content-Type", partial, "Upload-Offset", strconv.Itoa(C+C/2), "Upload-Complete", "?1")
			expectStatus(t, r, http.StatusOK)
			if r.Header.Get("Upload-Complete") != "?1" || r.offset(t) != int64(len(data)) {
				t.Fatalf("final append %v", r.Header)
			}
			checkObject(t, e.core, id, data)
			// A client that lost that response and appends nothing gets it again.
			r = e.do("PATCH", "/files/"+id, bytes.NewReader(nil), "Upload-Draft-Interop-Version", v, "Content-Type", partial, "Upload-Offset", strconv.Itoa(len(data)), "Upload-Complete", "?1")
			expectStatus(t, r, http.StatusOK)
			// More data is refused as an inconsistent length.
			r = e.do("PATCH", "/files/"+id, bytes.NewReader([]byte("x")), "Upload-Draft-Interop-Version", v, "Content-Type", partial, "Upload-Offset", strconv.Itoa(len(data)), "Upload-Complete", "?1")
			expectStatus(t, r, http.StatusBadRequest)
			if !bytes.Contains(r.body, []byte(problemInconsistentLength)) {
				t.Fatalf("problem %s", r.body)
			}
			// Up to interop 8 Upload-Complete says the upload is complete; since 9 an
			// error is the protocol's, ?0.
			if want := sfBool(n < interopTargetSemantics); r.Header.Get("Upload-Complete") != want {
				t.Fatalf("Upload-Complete %q, want %q", r.Header.Get("Upload-Complete"), want)
			}
		})
	}
}

// A body of unknown length that ends the upload: the cutter holds each whole chunk
// back until it knows whether it is the last.
func TestIETFUnknownLength(t *testing.T) {
	const C = 1 << 16
	for _, size := range []int{0, 100, C, 2 * C, 2*C + 1} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			e := newEnv(t, C, Config{})
			data := randomBytes(size, 9)
			// io.MultiReader hides the length, so the body is chunked.
			r := e.do("POST", "/files/", io.MultiReader(bytes.NewReader(data)), "Upload-Draft-Interop-Version", "8", "Upload-Complete", "?1")
			expectStatus(t, r, http.StatusCreated)
			checkObject(t, e.core, idOf(t, r), data)

			// The same in parts: ?0 without a length, then an empty ?1.
			r = e.do("POST", "/files/", io.MultiReader(bytes.NewReader(data)), "Upload-Draft-Interop-Version", "8", "Upload-Complete", "?0")
			expectStatus(t, r, http.StatusCreated)
			id := idOf(t, r)
			off := r.offset(t)
			if off != int64(size) {
				t.Fatalf("offset %d, want every byte sent (%d)", off, size)
			}
			r = e.do("PATCH", "/files/"+id, io.MultiReader(bytes.NewReader(data[off:])), "Upload-Draft-Interop-Version", "8",
				"Content-Type", "application/partial-upload", "Upload-Offset", strconv.FormatInt(off, 10), "Upload-Complete", "?1")
			expectStatus(t, r, http.StatusOK)
			checkObject(t, e.core, id, data)
		})
	}
}

// Repr-Digest (crc32c) on the request that completes an upload is checked before its
// last chunk is staged.
func TestReprDigest(t *testing.T) {
	const C = 1 << 16
	e := newEnv(t, C, Config{})
	data := randomBytes(2*C+5, 10)
	good := formatReprCRC32C(crc32.Checksum(data, castagnoli))
	bad := formatReprCRC32C(crc32.Checksum(data, castagnoli) + 1)
	r := e.do("POST", "/files/", bytes.NewReader(data), "Upload-Draft-Interop-Version", "8", "Upload-Complete", "?1", "Repr-Digest", bad)
	expectStatus(t, r, http.StatusBadRequest)
	if got, state := e.core.object(idOf(t, e.do("POST", "/files/", bytes.NewReader(nil), "Upload-Draft-Interop-Version", "8", "Upload-Complete", "?0"))); len(got) != 0 || state != StateActive {
		t.Fatal("unexpected state")
	}
	r = e.do("POST", "/files/", bytes.NewReader(data), "Upload-Draft-Interop-Version", "8", "Upload-Complete", "?1", "Repr-Digest", "sha-256=:AAAA:, "+good)
	expectStatus(t, r, http.StatusCreated)
	if r.Header.Get("Repr-Digest") != good {
		t.Fatalf("Repr-Digest %q", r.Header.Get("Repr-Digest"))
	}
}

// Appends smaller than a chunk move the offset by every byte (tus clients with small
// chunkSize): 1 byte, a chunk less one byte, a chunk and a half, then the rest.
func TestSmallAppendsKept(t *testing.T) {
	const C = 1 << 16
	e := newEnv(t, C, Config{})
	data := randomBytes(4*C+7, 13)
	id := idOf(t, e.do("POST", "/files/", nil, "Tus-Resumable", "1.0.0", "Upload-Length", strconv.Itoa(len(data))))
	off := 0
	for _, n := range []int{1, C - 1, 1, C + C/2, 1, len(data) - (2*C + C/2 + 2)} {
		r := e.do("PATCH", "/files/"+id, bytes.NewReader(data[off:off+n]), "Tus-Resumable", "1.0.0", "Content-Type", tusCT, "Upload-Offset", strconv.Itoa(off))
		expectStatus(t, r, http.StatusNoContent)
		off += n
		if got := r.offset(t); got != int64(off) {
			t.Fatalf("offset %d after appending %d bytes, want %d", got, n, off)
		}
		if h := e.do("HEAD", "/files/"+id, nil, "Tus-Resumable", "1.0.0"); h.offset(t) != int64(off) {
			t.Fatalf("HEAD offset %d, want %d", h.offset(t), off)
		}
	}
	checkObject(t, e.core, id, data)
}

func TestProtocolErrors(t *testing.T) {
	e := newEnv(t, 1<<16, Config{})
	id := idOf(t, e.do("POST", "/files/", nil, "Tus-Resumable", "1.0.0", "Upload-Length", "10"))
	tests := []struct {
		name, method, path string
		kv                 []string
		status             int
		header             string // a header the response must have
	}{
		{"no protocol", "POST", "/files/", []string{"Upload-Length", "10"}, 412, "Tus-Version"},
		{"old tus", "POST", "/files/", []string{"Tus-Resumable", "0.2.2", "Upload-Length", "10"}, 412, "Tus-Version"},
		{"old interop", "POST", "/files/", []string{"Upload-Draft-Interop-Version", "3", "Upload-Incomplete", "?0"}, 412, ""},
		{"length and defer", "POST", "/files/", []string{"Tus-Resumable", "1.0.0", "Upload-Length", "10", "Upload-Defer-Length", "1"}, 400, ""},
		{"bad defer", "POST", "/files/", []string{"Tus-Resumable", "1.0.0", "Upload-Defer-Length", "2"}, 400, ""},
		{"signed length", "POST", "/files/", []string{"Tus-Resumable", "1.0.0", "Upload-Length", "+10"}, 400, ""},
		{"bad metadata", "POST", "/files/", []string{"Tus-Resumable", "1.0.0", "Upload-Length", "10", "Upload-Metadata", "filename %%%"}, 400, ""},
		{"concatenation of nothing", "POST", "/files/", []string{"Tus-Resumable", "1.0.0", "Upload-Concat", "final;"}, 400, ""},
		{"unknown concatenation", "POST", "/files/", []string{"Tus-Resumable", "1.0.0", "Upload-Concat", "whole", "Upload-Length", "10"}, 400, ""},
		{"concatenation of a foreign URL", "POST", "/files/", []string{"Tus-Resumable", "1.0.0", "Upload-Concat", "final;https://elsewhere.example/x/" + id}, 400, ""},
		{"concatenation of a non-partial", "POST", "/files/", []string{"Tus-Resumable", "1.0.0", "Upload-Concat", "final;/files/" + id}, 400, ""},
		{"ietf creation without Upload-Complete", "POST", "/files/", []string{"Upload-Draft-Interop-Version", "8"}, 400, ""},
		{"tus PATCH content type", "PATCH", "/files/" + id, []string{"Tus-Resumable", "1.0.0", "Upload-Offset", "0", "Content-Type", "text/plain"}, 415, ""},
		{"ietf PATCH content type", "PATCH", "/files/" + id, []string{"Upload-Draft-Interop-Version", "8", "Upload-Offset", "0", "Upload-Complete", "?1", "Content-Type", tusCT}, 415, ""},
		{"ietf PATCH without Upload-Complete", "PATCH", "/files/" + id, []string{"Upload-Draft-Interop-Version", "8", "Upload-Offset", "0", "Content-Type", "application/partial-upload"}, 400, ""},
		{"PUT on an upload", "PUT", "/files/" + id, []string{"Tus-Resumable", "1.0.0"}, 405, "Allow"},
		{"GET on the creation URL", "DELETE", "/files/", []string{"Tus-Resumable", "1.0.0"}, 405, "Allow"},
		{"too large", "POST", "/files/", []string{"Tus-Resumable", "1.0.0", "Upload-Length", "99999999999999"}, 413, ""},
	}
	e.door.cfg.MaxSize = 1 << 40
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(tc.method, tc.path, bytes.NewReader(nil), tc.kv...)
			expectStatus(t, r, tc.status)
			if tc.header != "" && r.Header.Get(tc.header) == "" {
				t.Fatalf("no %s in %v", tc.header, r.Header)
			}
		})
	}
}

func TestOptionsAndCORS(t *testing.T) {
	e := newEnv(t, 1<<16, Config{MaxSize: 1 << 30, CORS: CORS{AllowedOrigins: []string{"https://app.example"}}})
	r := e.do("OPTIONS", "/files/", nil, "Origin", "https://app.example", "Access-Control-Request-Method", "POST",
		"Access-Control-Request-Headers", "tus-resumable,upload-length,upload-metadata")
	expectStatus(t, r, http.StatusOK)
	for k, want := range map[string]string{
		"Tus-Version": "1.0.0", "Tus-Max-Size": "1073741824", "Upload-Limit": "max-size=1073741824",
		"Access-Control-Allow-Origin": "https://app.example", "Access-Control-Max-Age": "86400",
	} {
		if got := r.Header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	for _, h := range []string{"Upload-Offset", "Upload-Checksum", "X-Api-Key", "Upload-Complete", "X-HTTP-Method-Override"} {
		if !strings.Contains(r.Header.Get("Access-Control-Allow-Headers"), h) {
			t.Errorf("Access-Control-Allow-Headers lacks %s", h)
		}
	}
	for _, x := range []string{"checksum", "expiration", "creation-defer-length", "termination"} {
		if !strings.Contains(r.Header.Get("Tus-Extension"), x) {
			t.Errorf("Tus-Extension lacks %s", x)
		}
	}
	if !strings.Contains(r.Header.Get("Tus-Checksum-Algorithm"), "crc32c") {
		t.Error("no crc32c in Tus-Checksum-Algorithm")
	}
	// A request from that origin can read the headers tus-js-client needs.
	r = e.do("POST", "/files/", nil, "Origin", "https://app.example", "Tus-Resumable", "1.0.0", "Upload-Length", "5")
	expectStatus(t, r, http.StatusCreated)
	for _, h := range []string{"Location", "Upload-Offset", "Upload-Length", "Upload-Expires", "Upload-Limit"} {
		if !strings.Contains(r.Header.Get("Access-Control-Expose-Headers"), h) {
			t.Errorf("Access-Control-Expose-Headers lacks %s", h)
		}
	}
	// Another origin is refused; the door's own origin needs no CORS.
	expectStatus(t, e.do("OPTIONS", "/files/", nil, "Origin", "https://evil.example", "Access-Control-Request-Method", "POST"), http.StatusForbidden)
	expectStatus(t, e.do("POST", "/files/", nil, "Origin", "https://evil.example", "Tus-Resumable", "1.0.0", "Upload-Length", "5"), http.StatusForbidden)
	expectStatus(t, e.do("POST", "/files/", nil, "Origin", e.srv.URL, "Tus-Resumable", "1.0.0", "Upload-Length", "5"), http.StatusCreated)
}

func TestAuthenticate(t *testing.T) {
	auth := func(r *http.Request) (context.Context, error) {
		key := r.Header.Get("X-Api-Key")
		if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			key = tok
		}
		switch key {
		case "key-a":
			return context.WithValue(r.Context(), tenantKey{}, "a"), nil
		case "key-b":
			return context.WithValue(r.Context(), tenantKey{}, "b"), nil
		}
		return nil, errors.New("unknown API key")
	}
	e := newEnv(t, 1<<16, Config{Authenticate: auth})
	r := e.do("POST", "/files/", nil, "Tus-Resumable", "1.0.0", "Upload-Length", "5")
	expectStatus(t, r, http.StatusUnauthorized)
	if r.Header.Get("WWW-Authenticate") == "" {
		t.Fatal("no WWW-Authenticate")
	}
	r = e.do("POST", "/files/", nil, "Tus-Resumable", "1.0.0", "Upload-Length", "5", "Authorization", "Bearer key-a")
	expectStatus(t, r, http.StatusCreated)
	id := idOf(t, r)
	expectStatus(t, e.do("HEAD", "/files/"+id, nil, "Tus-Resumable", "1.0.0", "X-Api-Key", "key-a"), http.StatusOK)
	// Another tenant's upload does not exist for b.
	expectStatus(t, e.do("HEAD", "/files/"+id, nil, "Tus-Resumable", "1.0.0", "X-Api-Key", "key-b"), http.StatusNotFound)
	// Preflights carry no credentials and are not authenticated.
	expectStatus(t, e.do("OPTIONS", "/files/", nil), http.StatusOK)
}

func TestMethodOverridePatch(t *testing.T) {
	e := newEnv(t, 1<<16, Config{})
	data := randomBytes(1000, 11)
	id := idOf(t, e.do("POST", "/files/", nil, "Tus-Resumable", "1.0.0", "Upload-Length", "1000"))
	r := e.do("POST", "/files/"+id, bytes.NewReader(data), "X-HTTP-Method-Override", "PATCH", "Tus-Resumable", "1.0.0", "Content-Type", tusCT, "Upload-Offset", "0")
	expectStatus(t, r, http.StatusNoContent)
	checkObject(t, e.core, id, data)
}

// GET shows the upload as JSON (for the upload page).
func TestGetJSON(t *testing.T) {
	e := newEnv(t, 1<<16, Config{})
	id := idOf(t, e.do("POST", "/files/", bytes.NewReader([]byte("abc")), "Tus-Resumable", "1.0.0", "Upload-Length", "3",
		"Content-Type", tusCT, "Upload-Metadata", "filename "+b64("a.txt")))
	r := e.do("GET", "/files/"+id, nil)
	expectStatus(t, r, http.StatusOK)
	var j uploadJSON
	if err := json.Unmarshal(r.body, &j); err != nil {
		t.Fatal(err)
	}
	if j.ID != id || j.State != StateCompleted || j.Offset != 3 || *j.Size != 3 || j.Key != "uploads/"+id+"/a.txt" || j.CRC32C == nil {
		t.Fatalf("%s", r.body)
	}
}

// No interim response goes to an HTTP/1.0 client (RFC 9110 forbids it).
func TestNo104ToHTTP10(t *testing.T) {
	e := newEnv(t, 1<<16, Config{})
	conn, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /files/ HTTP/1.0\r\nHost: x\r\nUpload-Draft-Interop-Version: 8\r\nUpload-Complete: ?1\r\nContent-Length: 5\r\n\r\nhello")
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("first response to HTTP/1.0: %d", res.StatusCode)
	}
}

func TestPage(t *testing.T) {
	srv := httptest.NewServer(Page("/up/"))
	t.Cleanup(srv.Close)
	get := func(path string) (*http.Response, string) {
		t.Helper()
		return pageGet(t, srv, path)
	}
	res, body := get("/")
	if res.StatusCode != 200 || !strings.Contains(body, `data-endpoint="/up/"`) || !strings.Contains(body, TusJSClientVersion) ||
		!strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("page: %d %v\n%s", res.StatusCode, res.Header, body)
	}
	for _, p := range []string{"/page.js", "/tus.min.js", "/tus-js-client.LICENSE"} {
		if res, body := get(p); res.StatusCode != 200 || len(body) < 100 {
			t.Fatalf("%s: %d, %d bytes", p, res.StatusCode, len(body))
		}
	}
	if _, body := get("/tus.min.js"); !strings.Contains(body, `"Upload-Draft-Interop-Version","5"`) {
		t.Fatal("tus.min.js is not the vendored tus-js-client")
	}
	if res, _ := get("/nothing"); res.StatusCode != 404 {
		t.Fatalf("/nothing: %d", res.StatusCode)
	}
}

// Drain stops a request that is appending after the chunk it is staging: it is
// answered 503 with Retry-After and its durable offset, and the client resumes.
func TestDrain(t *testing.T) {
	const C = 1 << 16
	e := newEnv(t, C, Config{})
	data := randomBytes(3*C, 12)
	id := idOf(t, e.do("POST", "/files/", nil, "Tus-Resumable", "1.0.0", "Upload-Length", strconv.Itoa(len(data))))
	done, body := e.stalledPatch(id, data, C)
	e.door.Drain()
	r := <-done
	close(body.release)
	expectStatus(t, r, http.StatusServiceUnavailable)
	off := r.offset(t)
	if r.Header.Get("Retry-After") == "" || off < C {
		t.Fatalf("drained request: Retry-After %q, offset %s; want one, and at least %d", r.Header.Get("Retry-After"), r.Header.Get("Upload-Offset"), C)
	}
	// A body that starts while draining stops at once, with nothing staged. The server
	// answers 503 and closes the connection without reading the rest of the body, so an
	// HTTP/1.1 client still sending it may see the connection reset before the answer
	// (a CI run did): either way it has no acknowledgement, and resumes from HEAD.
	r, err := e.try("PATCH", "/files/"+id, bytes.NewReader(data[off:]), "Tus-Resumable", "1.0.0", "Content-Type", tusCT, "Upload-Offset", strconv.FormatInt(off, 10))
	if err == nil {
		expectStatus(t, r, http.StatusServiceUnavailable)
	} else if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("PATCH while draining: %v; want 503 or the connection reset", err)
	}
	if got, _ := e.core.object(id); len(got) != C {
		t.Fatalf("%d bytes staged, want %d", len(got), C)
	}
}

func TestCORSAdditions(t *testing.T) {
	e := newEnv(t, 1<<16, Config{CORS: CORS{AllowedOrigins: []string{"*"}, AllowHeaders: []string{"X-Proxy-Auth"}, ExposeHeaders: []string{"X-Request-Id"}}})
	r := e.do("OPTIONS", "/files/", nil, "Origin", "https://app.example", "Access-Control-Request-Method", "POST")
	if h := r.Header.Get("Access-Control-Allow-Headers"); !strings.Contains(h, "Upload-Offset") || !strings.HasSuffix(h, ", X-Proxy-Auth") {
		t.Fatalf("Access-Control-Allow-Headers %q", h)
	}
	r = e.do("POST", "/files/", nil, "Origin", "https://app.example", "Tus-Resumable", "1.0.0", "Upload-Length", "5")
	if h := r.Header.Get("Access-Control-Expose-Headers"); !strings.Contains(h, "Upload-Offset") || !strings.HasSuffix(h, ", X-Request-Id") {
		t.Fatalf("Access-Control-Expose-Headers %q", h)
	}
	if err := (Config{CORS: CORS{ExposeHeaders: []string{"Bad Header"}}}).Validate(); err == nil {
		t.Fatal("a header name with a space was accepted")
	}
}

func TestRateLimited(t *testing.T) {
	e := newEnv(t, 1<<16, Config{Authenticate: func(r *http.Request) (context.Context, error) {
		return nil, fmt.Errorf("%w: tenant over its rate limit", ErrRateLimited)
	}})
	r := e.do("POST", "/files/", nil, "Tus-Resumable", "1.0.0", "Upload-Length", "5")
	expectStatus(t, r, http.StatusTooManyRequests)
	if r.Header.Get("Retry-After") == "" {
		t.Fatal("no Retry-After")
	}
}

// A chunk is staged while the next one is read; when its stage fails, the request
// stops with that error and the offset before it, and nothing after it is staged.
func TestReadAheadStageFails(t *testing.T) {
	const C = 1 << 16
	e := newEnv(t, C, Config{})
	data := randomBytes(5*C, 13)
	id := idOf(t, e.do("POST", "/files/", nil, "Tus-Resumable", "1.0.0", "Upload-Length", strconv.Itoa(len(data))))
	e.core.beforeStage = func(id string, n uint32) {
		if n == 3 {
			_ = e.core.Abort(context.Background(), id)
		}
	}
	r := e.do("PATCH", "/files/"+id, bytes.NewReader(data), "Tus-Resumable", "1.0.0", "Content-Type", tusCT, "Upload-Offset", "0")
	expectStatus(t, r, http.StatusGone)
	if r.offset(t) != 2*C {
		t.Fatalf("offset %d, want %d", r.offset(t), 2*C)
	}
	if got, _ := e.core.object(id); !bytes.Equal(got, data[:2*C]) {
		t.Fatalf("%d bytes staged, want the first two chunks", len(got))
	}
}

// An upload with every byte in is shown COMPLETING until the completer takes it, not
// ACTIVE, which reads as an upload still awaiting bytes.
func TestStatusJSONState(t *testing.T) {
	for _, tc := range []struct {
		state    State
		complete bool
		want     State
	}{
		{StateActive, false, StateActive},
		{StateActive, true, StateCompleting},
		{StateCompleting, true, StateCompleting},
		{StateCompleted, true, StateCompleted},
		{StateFailed, true, StateFailed},
		{StateAborted, false, StateAborted},
	} {
		j := statusJSON(Upload{ID: "x", State: tc.state, Size: 3}, summary{offset: 3, complete: tc.complete})
		if j.State != tc.want || j.Complete != tc.complete {
			t.Errorf("%s, complete %v: shown %s, complete %v; want %s", tc.state, tc.complete, j.State, j.Complete, tc.want)
		}
	}
}
