package e2e

import (
	"bytes"
	"net/http"
	"strconv"
	"testing"

	"github.com/chunkup/chunkup/test/harness"
)

// TestHTTPSmallPatches: tus-js-client with a chunkSize smaller than the server's
// chunks (the defaults of the Java, Android and Go clients, 2 MiB, and of TUSKit on
// iOS, 500 KiB) uploads 20 MB to `chunkup serve`: every PATCH moves the offset by its
// bytes, the object is exact, and it is one upload.
func TestHTTPSmallPatches(t *testing.T) {
	e := newEnv(t)
	node := e.serveProcess(t, nil, "serve", "api,worker,completer,cleanup")
	c := harness.Dial(t, node.GRPCAddr)
	for _, chunkSize := range []int{2 << 20, 500 << 10} {
		t.Run(strconv.Itoa(chunkSize), func(t *testing.T) {
			data := randomBytes(20_000_000, uint64(chunkSize))
			file := writeFile(t, "small-patches.bin", data)
			res := runTusJS(t, "TUS_FILE="+file, "TUS_ENDPOINT=http://"+node.HTTPAddr+"/files/", "TUS_CHUNK_SIZE="+strconv.Itoa(chunkSize))
			if res.done == "" || res.error != "" {
				t.Fatalf("tus-js-client with chunkSize %d: %+v", chunkSize, res)
			}
			up := waitCompleted(t, c, idOf(res.done))
			e.requireExact(t, up, data)
		})
	}
}

// TestHTTPSmallPatchSurvivesKill: a 3 MiB PATCH (less than a chunk) answered 204 is
// durable: `chunkup serve` killed with SIGKILL right after and started again reports
// the same offset, and the upload completes exact from there.
func TestHTTPSmallPatchSurvivesKill(t *testing.T) {
	e := newEnv(t)
	node := e.serveProcess(t, nil, "serve", "api,worker,completer,cleanup")
	d := doorOf(t, node.HTTPAddr)
	data := randomBytes(12<<20+3, 31)
	r := d.do("POST", "/files/", nil, "Tus-Resumable", "1.0.0", "Upload-Length", strconv.Itoa(len(data)))
	expectHTTP(t, r, http.StatusCreated)
	loc := r.Header.Get("Location")
	for _, n := range []int{1, 3<<20 - 1} { // a 1-byte PATCH moves the offset by 1
		off := d.offset(loc)
		r = d.do("PATCH", loc, bytes.NewReader(data[off:off+int64(n)]), "Tus-Resumable", "1.0.0", "Content-Type", "application/offset+octet-stream", "Upload-Offset", strconv.FormatInt(off, 10))
		expectHTTP(t, r, http.StatusNoContent)
		if got := headerInt(t, r.Header, "Upload-Offset"); got != off+int64(n) {
			t.Fatalf("offset %d after a PATCH of %d bytes from %d", got, n, off)
		}
	}
	node.Kill(t)
	node.Restart(t)
	d = doorOf(t, node.HTTPAddr)
	if got := d.offset(loc); got != 3<<20 {
		t.Fatalf("offset %d after the restart, want the %d bytes acknowledged", got, 3<<20)
	}
	r = d.do("PATCH", loc, bytes.NewReader(data[3<<20:]), "Tus-Resumable", "1.0.0", "Content-Type", "application/offset+octet-stream", "Upload-Offset", strconv.Itoa(3<<20))
	expectHTTP(t, r, http.StatusNoContent)
	up := waitCompleted(t, harness.Dial(t, node.GRPCAddr), idOf(loc))
	e.requireExact(t, up, data)
}
