package e2e

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/test/harness"
)

// TestHTTPSmallPatches is the client matrix of tus-js-client against `chunkup serve`,
// 20 MB each: chunkSize unset (one PATCH), larger than the file (50 MB), one byte over
// a chunk (8 MiB + 1), the defaults of the Java, Android and Go clients (2 MiB) and of
// TUSKit on iOS (500 KiB), and its two IETF protocols at 2 MiB: every PATCH moves the
// offset by its bytes, the object is exact, and it is one upload.
func TestHTTPSmallPatches(t *testing.T) {
	e := newEnv(t)
	node := e.serveProcess(t, nil, "serve", "api,worker,completer,cleanup")
	c := harness.Dial(t, node.GRPCAddr)
	for i, tc := range []struct {
		name      string
		chunkSize int // 0: unset
		protocol  string
	}{
		{"unset", 0, ""},
		{"50MB", 50_000_000, ""},
		{"8MiB+1", 8<<20 + 1, ""},
		{"2MiB", 2 << 20, ""},
		{"500KiB", 500 << 10, ""},
		{"ietf-draft-03 2MiB", 2 << 20, "ietf-draft-03"},
		{"ietf-draft-05 2MiB", 2 << 20, "ietf-draft-05"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := randomBytes(20_000_000, uint64(i+1))
			file := writeFile(t, "small-patches.bin", data)
			env := []string{"TUS_FILE=" + file, "TUS_ENDPOINT=http://" + node.HTTPAddr + "/files/"}
			if tc.chunkSize > 0 {
				env = append(env, "TUS_CHUNK_SIZE="+strconv.Itoa(tc.chunkSize))
			}
			if tc.protocol != "" {
				env = append(env, "TUS_PROTOCOL="+tc.protocol)
			}
			res := runTusJS(t, env...)
			if res.done == "" || res.error != "" {
				t.Fatalf("tus-js-client %s: %+v", tc.name, res)
			}
			up := waitCompleted(t, c, idOf(res.done))
			e.requireExact(t, up, data)
		})
	}
}

// TestHTTPAppendsOfAnySize: curl-style tus PATCHes of 1 byte, 1 MiB and 9 MiB in turn
// until 20 MB are sent: each answer's offset is every byte sent so far, and the object
// is exact.
func TestHTTPAppendsOfAnySize(t *testing.T) {
	e := newEnv(t)
	node := e.serveProcess(t, nil, "serve", "api,worker,completer,cleanup")
	d := doorOf(t, node.HTTPAddr)
	data := randomBytes(20_000_000, 77)
	loc := d.create(len(data))
	sizes := []int64{1, 1 << 20, 9 << 20}
	for off, i := int64(0), 0; off < int64(len(data)); i++ {
		end := min(off+sizes[i%len(sizes)], int64(len(data)))
		r := d.do("PATCH", loc, bytes.NewReader(data[off:end]), "Tus-Resumable", "1.0.0", "Content-Type", tusCT, "Upload-Offset", strconv.FormatInt(off, 10))
		expectHTTP(t, r, http.StatusNoContent)
		if got := headerInt(t, r.Header, "Upload-Offset"); got != end {
			t.Fatalf("offset %d after a PATCH of %d bytes from %d", got, end-off, off)
		}
		off = end
	}
	up := waitCompleted(t, harness.Dial(t, node.GRPCAddr), idOf(loc))
	e.requireExact(t, up, data)
}

// TestHTTPIETFVersions: an IETF client of each accepted interop version creates an
// upload with its first bytes and completes it with an append, against `chunkup
// serve`; the object is exact.
func TestHTTPIETFVersions(t *testing.T) {
	e := newEnv(t)
	node := e.serveProcess(t, nil, "serve", "api,worker,completer,cleanup")
	c := harness.Dial(t, node.GRPCAddr)
	d := doorOf(t, node.HTTPAddr)
	for v := 5; v <= 12; v++ {
		t.Run(strconv.Itoa(v), func(t *testing.T) {
			data := randomBytes(10<<20+7, uint64(100+v))
			first := 3<<20 + 1
			iv := strconv.Itoa(v)
			r := d.do("POST", "/files/", bytes.NewReader(data[:first]), "Upload-Draft-Interop-Version", iv, "Upload-Complete", "?0",
				"Content-Type", "application/partial-upload")
			expectHTTP(t, r, http.StatusCreated)
			loc := r.Header.Get("Location")
			if got := headerInt(t, r.Header, "Upload-Offset"); got != int64(first) {
				t.Fatalf("interop %d: offset %d after creating with %d bytes", v, got, first)
			}
			r = d.do("PATCH", loc, bytes.NewReader(data[first:]), "Upload-Draft-Interop-Version", iv, "Upload-Complete", "?1",
				"Upload-Offset", strconv.Itoa(first), "Content-Type", "application/partial-upload")
			if r.StatusCode/100 != 2 {
				t.Fatalf("interop %d: completing append: %d %s", v, r.StatusCode, r.body)
			}
			up := waitCompleted(t, c, idOf(loc))
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

// TestHTTPParallelUploads: tus-js-client with parallelUploads: 4 sends a 50 MB file as
// four partial uploads and a final one that concatenates them (tus concatenation):
// the object is exact and named as the file, GetUpload shows the final upload
// COMPLETED, exactly one UploadCompleted reaches Kafka (none for the partials), and
// the partials' own objects are gone.
func TestHTTPParallelUploads(t *testing.T) {
	e := newEnv(t)
	k := testenv.StartKafka(t, topic)
	a := e.start(t, withKafka(e.config(), k))
	c := e.client(t, a)
	data := randomBytes(50_000_000, 91)
	file := writeFile(t, "parallel.bin", data)
	res := runTusJS(t, "TUS_FILE="+file, "TUS_ENDPOINT=http://"+a.HTTPAddr()+"/files/", "TUS_PARALLEL=4")
	if res.done == "" || res.error != "" {
		t.Fatalf("tus-js-client with parallelUploads 4: %+v", res)
	}
	id := idOf(res.done)
	up := waitCompleted(t, c, id)
	e.requireExact(t, up, data)
	if up.Name != "parallel.bin" {
		t.Fatalf("the final upload is named %q, want the file's name", up.Name)
	}
	const completed = "chunkup.v1.UploadCompleted"
	waitFor(t, "the final upload's UploadCompleted", func() bool { return len(eventsFor(allEvents(t, k), id, completed)) > 0 })
	waitOutboxEmpty(t, a.Outbox())
	n := 0
	for _, ev := range allEvents(t, k) {
		if ev.Type == completed {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d UploadCompleted events, want 1 (the final upload's)", n)
	}
	out, err := e.s3.ListObjectsV2(ctx(t), &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range out.Contents {
		if strings.Contains(aws.ToString(o.Key), ".partials/") {
			t.Errorf("a partial upload's object is left: %s", aws.ToString(o.Key))
		}
	}
}

// TestHTTPConcatenationRefusals: on chunkup's own core, a final upload naming a partial
// that still misses bytes is 400 and creates nothing; once the partial is whole the
// same final upload is made, exact; once that completed, the same final upload again is
// answered with it, a final upload of other partials naming it is 400, and a chunk sent
// to the final upload over gRPC is INVALID_ARGUMENT.
func TestHTTPConcatenationRefusals(t *testing.T) {
	e := newEnv(t)
	a := e.start(t, e.config())
	c := e.client(t, a)
	d := doorOf(t, a.HTTPAddr())
	tus := func(kv ...string) []string { return append([]string{"Tus-Resumable", "1.0.0"}, kv...) }
	data := randomBytes(6<<20+5, 41)
	part := d.create(len(data), "Upload-Concat", "partial")
	r := d.do("PATCH", part, bytes.NewReader(data[:1<<20]), tus("Content-Type", tusCT, "Upload-Offset", "0")...)
	expectHTTP(t, r, http.StatusNoContent)
	inProgress := func() int {
		r, err := c.API().ListUploads(ctx(t), &chunkupv1.ListUploadsRequest{PageSize: 100})
		if err != nil {
			t.Fatal(err)
		}
		return len(r.Uploads)
	}
	before := inProgress()
	r = d.do("POST", "/files/", nil, tus("Upload-Concat", "final;"+part)...)
	expectHTTP(t, r, http.StatusBadRequest)
	if r.Header.Get("Location") != "" || inProgress() != before {
		t.Fatalf("a refused final upload created one: Location %q", r.Header.Get("Location"))
	}
	r = d.do("PATCH", part, bytes.NewReader(data[1<<20:]), tus("Content-Type", tusCT, "Upload-Offset", strconv.Itoa(1<<20))...)
	expectHTTP(t, r, http.StatusNoContent)
	r = d.do("POST", "/files/", nil, tus("Upload-Concat", "final;"+part)...)
	expectHTTP(t, r, http.StatusCreated)
	final := waitCompleted(t, c, idOf(r.Header.Get("Location")))
	e.requireExact(t, final, data)
	partKey := getUpload(t, c, idOf(part)).Key
	waitFor(t, "the partial's object to be deleted", func() bool {
		_, err := e.s3.HeadObject(ctx(t), &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(partKey)})
		return err != nil
	})
	// The same final upload again (a client that lost the answer) gets that one; a
	// final upload of other partials naming it again is 400.
	r = d.do("POST", "/files/", nil, tus("Upload-Concat", "final;"+part)...)
	expectHTTP(t, r, http.StatusCreated)
	if got := r.Header.Get("Location"); idOf(got) != final.UploadId || headerInt(t, r.Header, "Upload-Offset") != int64(len(data)) {
		t.Fatalf("the same final upload created again: Location %q offset %s, want %s's whole", got, r.Header.Get("Upload-Offset"), final.UploadId)
	}
	other := d.create(1, "Upload-Concat", "partial")
	r = d.do("PATCH", other, bytes.NewReader([]byte("x")), tus("Content-Type", tusCT, "Upload-Offset", "0")...)
	expectHTTP(t, r, http.StatusNoContent)
	waitCompleted(t, c, idOf(other))
	r = d.do("POST", "/files/", nil, tus("Upload-Concat", "final;"+part+" "+other)...)
	expectHTTP(t, r, http.StatusBadRequest)
	if !strings.Contains(string(r.body), "was concatenated into final upload "+final.UploadId) {
		t.Fatalf("a partial concatenated already, in another final upload: %s", r.body)
	}
	// A final upload takes no chunks of its own over gRPC either.
	stream, err := c.API().UploadChunk(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&chunkupv1.UploadChunkRequest{UploadId: final.UploadId, ChunkNumber: 1, Data: []byte("x"), IsLast: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "final upload") {
		t.Fatalf("a chunk sent to a final upload over gRPC: %v, want INVALID_ARGUMENT", err)
	}
}

// TestHTTPConcatenationClaims: one set of partial uploads feeds one final upload, so
// that a tenant cannot make the servers read and write the same bytes any number of
// times at once. Four final uploads of the same partials at the same moment (a client
// retrying, two tabs): one is made, and each other creation is answered with it (201,
// its URL) or told to retry while it is assembled (423); one upload, exact. Four final
// uploads each naming the partials with one of its own: one is made, the
// others get 409 (being concatenated) or 400 (concatenated already), and their
// uploads are aborted (none is left in progress).
func TestHTTPConcatenationClaims(t *testing.T) {
	e := newEnv(t)
	a := e.start(t, e.config())
	c := e.client(t, a)
	d := doorOf(t, a.HTTPAddr())
	base := "http://" + a.HTTPAddr()
	data := randomBytes(48<<20, 43)
	parts := partialUploads(t, c, d, data, 2)
	type answer struct {
		code      int
		loc, body string
	}
	at := func(lists [][]string) []answer {
		answers := make([]answer, len(lists))
		var wg sync.WaitGroup
		for i, list := range lists {
			wg.Go(func() {
				code, loc, body, err := postFinal(ctx(t), base, list)
				if err != nil {
					t.Errorf("a final upload's creation: %v", err)
				}
				answers[i] = answer{code, loc, body}
			})
		}
		wg.Wait()
		return answers
	}
	inProgress := func() int {
		r, err := c.API().ListUploads(ctx(t), &chunkupv1.ListUploadsRequest{PageSize: 100})
		if err != nil {
			t.Fatal(err)
		}
		return len(r.Uploads)
	}

	made := map[string]bool{}
	for _, ans := range at([][]string{parts, parts, parts, parts}) {
		switch ans.code {
		case http.StatusCreated:
			made[idOf(ans.loc)] = true
		case http.StatusLocked:
			if !strings.Contains(ans.body, "of the same partial uploads is being assembled") {
				t.Errorf("423: %s", ans.body)
			}
		default:
			t.Errorf("a final upload's creation: %d %s", ans.code, ans.body)
		}
	}
	if len(made) != 1 {
		t.Fatalf("%d final uploads made of the same partial uploads, want 1: %v", len(made), made)
	}
	for id := range made {
		e.requireExact(t, waitCompleted(t, c, id), data)
	}
	if n := inProgress(); n != 0 {
		t.Fatalf("%d uploads left in progress, want none", n)
	}

	more := partialUploads(t, c, d, randomBytes(48<<20, 45), 1)
	var lists [][]string
	for range 4 {
		own := partialUploads(t, c, d, randomBytes(1000, 46), 1)
		lists = append(lists, append(slices.Clone(more), own...))
	}
	created := 0
	for _, ans := range at(lists) {
		switch {
		case ans.code == http.StatusCreated:
			created++
			waitCompleted(t, c, idOf(ans.loc))
		case ans.code == http.StatusConflict && strings.Contains(ans.body, "is being concatenated into final upload"),
			ans.code == http.StatusConflict && strings.Contains(ans.body, "which has every byte and is being stored"),
			ans.code == http.StatusBadRequest && strings.Contains(ans.body, "was concatenated into final upload"):
		default:
			t.Errorf("a final upload's creation: %d %s", ans.code, ans.body)
		}
	}
	if created != 1 {
		t.Fatalf("%d final uploads made of the same partial upload, want 1", created)
	}
	if n := inProgress(); n != 0 {
		t.Fatalf("%d uploads left in progress, want none", n)
	}
}

// TestHTTPConcatenationAfterAKill: a final upload whose server was killed (-9) while it
// assembled the partials' bytes gives them up. After a restart, the same final upload
// created again is answered 423 (retry) while the dead request's append lock lasts
// (6 s, within tus-js-client's default retries), then made, exact; the dead one is
// ABORTED.
func TestHTTPConcatenationAfterAKill(t *testing.T) {
	e := newEnv(t)
	node := e.serveProcess(t, nil, "serve", "api,worker,completer,cleanup")
	c := harness.Dial(t, node.GRPCAddr)
	d := doorOf(t, node.HTTPAddr)
	data := randomBytes(96<<20, 44)
	parts := partialUploads(t, c, d, data, 2)
	go func() { _, _, _, _ = postFinal(ctx(t), "http://"+node.HTTPAddr, parts) }()
	var dead string
	waitFor(t, "the final upload to hold some of its bytes", func() bool {
		r, err := c.API().ListUploads(ctx(t), &chunkupv1.ListUploadsRequest{PageSize: 100})
		if err != nil || len(r.Uploads) != 1 || r.Uploads[0].ReceivedBytes == 0 {
			return false
		}
		dead = r.Uploads[0].UploadId
		return true
	})
	node.Kill(t)
	killed := time.Now()
	node.Restart(t)
	if got := getUpload(t, c, dead).ReceivedBytes; got >= int64(len(data)) {
		t.Fatalf("the final upload had all its bytes before the kill (%d): make the partials larger", got)
	}
	base := "http://" + node.HTTPAddr
	var loc string
	waitFor(t, "the final upload to be made again", func() bool {
		code, l, body, err := postFinal(ctx(t), base, parts)
		switch {
		case err != nil:
			t.Fatalf("a final upload's creation: %v", err)
		case code == http.StatusCreated:
			if time.Since(killed) < 4*time.Second {
				t.Fatalf("the final upload was made again %v after the kill, while the dead request's lock (6 s) still held", time.Since(killed))
			}
			loc = l
			return true
		case code != http.StatusLocked || !strings.Contains(body, dead):
			t.Fatalf("a final upload's creation: %d %s; want 423 naming %s, then 201", code, body, dead)
		}
		return false
	})
	e.requireExact(t, waitCompleted(t, c, idOf(loc)), data)
	if got := getUpload(t, c, dead).State; got != chunkupv1.UploadState_UPLOAD_STATE_ABORTED {
		t.Fatalf("the killed final upload is %v, want ABORTED", got)
	}
}

// partialUploads sends data as n partial uploads of equal size (the last takes the
// rest) and returns their paths in order, once they are COMPLETED.
func partialUploads(t *testing.T, c *client.Client, d *httpDoor, data []byte, n int) []string {
	t.Helper()
	var parts []string
	size := len(data) / n
	for i := range n {
		piece := data[i*size:]
		if i < n-1 {
			piece = piece[:size]
		}
		p := d.create(len(piece), "Upload-Concat", "partial")
		r := d.do("PATCH", p, bytes.NewReader(piece), "Tus-Resumable", "1.0.0", "Content-Type", tusCT, "Upload-Offset", "0")
		expectHTTP(t, r, http.StatusNoContent)
		parts = append(parts, p)
	}
	for _, p := range parts {
		waitCompleted(t, c, idOf(p))
	}
	return parts
}

// postFinal creates a tus final upload of parts at base; an error only for no answer.
func postFinal(ctx context.Context, base string, parts []string) (code int, loc, body string, err error) {
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/files/", nil)
	if err != nil {
		return 0, "", "", err
	}
	req.Header.Set("Tus-Resumable", "1.0.0")
	req.Header.Set("Upload-Concat", "final;"+strings.Join(parts, " "))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, res.Header.Get("Location"), string(b), err
}
