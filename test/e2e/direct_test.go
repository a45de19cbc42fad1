package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/chunkup/chunkup/cleanup"
	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/testdocs"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/s3store"
	"github.com/chunkup/chunkup/server"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/test/harness"
)

// directCall sends one request of Companion's S3 multipart contract to chunkup with
// curl, and decodes its JSON answer into out (when not nil).
func directCall(t *testing.T, method, u string, body any, out any, header ...string) int {
	t.Helper()
	args := []string{"-X", method, u}
	for _, h := range header {
		args = append(args, "-H", h)
	}
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		args = append(args, "-H", "Content-Type: application/json", "--data-binary", string(b))
	}
	res, _, text := curl(t, args...)
	if out != nil && res.code < 300 {
		if err := json.Unmarshal([]byte(text), out); err != nil {
			t.Fatalf("%s %s: %d %q: %v", method, u, res.code, text, err)
		}
	}
	if res.code >= 300 {
		t.Logf("%s %s: %d %s", method, u, res.code, text)
		if out, ok := out.(*directError); ok {
			_ = json.Unmarshal([]byte(text), out)
		}
	}
	return res.code
}

type directError struct {
	Error string `json:"error"`
}

type directCreated struct {
	UploadID string `json:"uploadId"`
	Key      string `json:"key"`
	Bucket   string `json:"bucket"`
}

type directPart struct {
	PartNumber int    `json:"PartNumber"`
	ETag       string `json:"ETag"`
	Size       int64  `json:"Size,omitempty"`
}

// direct drives one direct upload against the door at base.
type direct struct {
	t       *testing.T
	base    string
	header  []string // credentials
	created directCreated
}

func newDirect(t *testing.T, base, filename, ct string, header ...string) *direct {
	t.Helper()
	d := &direct{t: t, base: base, header: header}
	if code := directCall(t, "POST", base+"multipart", map[string]any{"filename": filename, "type": ct,
		"metadata": map[string]any{"name": filename, "type": ct, "relativePath": nil, "source": "e2e"}}, &d.created, header...); code != http.StatusOK {
		t.Fatalf("create: %d", code)
	}
	if d.created.UploadID == "" || d.created.Key == "" {
		t.Fatalf("create answered %+v", d.created)
	}
	return d
}

func (d *direct) q() string { return "?key=" + url.QueryEscape(d.created.Key) }

// sign returns part n's signed URL.
func (d *direct) sign(n int) string {
	d.t.Helper()
	var signed struct {
		URL     string         `json:"url"`
		Expires int64          `json:"expires"`
		Headers map[string]any `json:"headers"` // an object, never null: clients iterate it
	}
	if code := directCall(d.t, "GET", d.base+"multipart/"+d.created.UploadID+"/"+strconv.Itoa(n)+d.q(), nil, &signed, d.header...); code != http.StatusOK || signed.URL == "" || signed.Expires <= 0 || signed.Headers == nil {
		d.t.Fatalf("sign part %d: %d %+v", n, code, signed)
	}
	return signed.URL
}

// put PUTs data to a signed URL with curl, as a browser or script would, and returns
// the status and the ETag S3 answered.
func (d *direct) put(u string, data []byte) (int, string) {
	d.t.Helper()
	file := writeFile(d.t, "part", data)
	res, _, _ := curl(d.t, "-X", "PUT", "--data-binary", "@"+file, "-H", "Content-Type:", u)
	return res.code, res.header.Get("ETag")
}

func (d *direct) complete(parts []directPart, out any) int {
	d.t.Helper()
	return directCall(d.t, "POST", d.base+"multipart/"+d.created.UploadID+"/complete"+d.q(), map[string]any{"parts": parts}, out, d.header...)
}

// TestDirectContractByCurl: Companion's S3 multipart contract by curl alone: create,
// sign three parts, PUT them straight to MinIO with the signed URLs, complete with their
// ETags; GetUpload says COMPLETED, the object is exact, and Kafka has its
// UploadCompleted once. A one-part PNG goes the same way and is read by OCR (its parts
// carry no checksum: chunkup reads the object for its CRC32C). The parts' listing shows
// what S3 holds while the upload is open.
func TestDirectContractByCurl(t *testing.T) {
	e := newEnv(t)
	k := testenv.StartKafka(t, topic)
	a := e.start(t, withOCR(withKafka(e.config(), k)))
	c := e.client(t, a)
	base := "http://" + a.HTTPAddr() + "/s3/"

	data := randomBytes(11<<20+12345, 281)
	d := newDirect(t, base, "video.bin", "application/octet-stream")
	bounds := []int{0, 5 << 20, 10 << 20, len(data)}
	var parts []directPart
	for n := 1; n <= 3; n++ {
		code, etag := d.put(d.sign(n), data[bounds[n-1]:bounds[n]])
		if code != http.StatusOK || etag == "" {
			t.Fatalf("PUT part %d to S3: %d, ETag %q", n, code, etag)
		}
		parts = append(parts, directPart{PartNumber: n, ETag: etag})
	}
	var held []directPart
	if code := directCall(t, "GET", base+"multipart/"+d.created.UploadID+d.q(), nil, &held); code != http.StatusOK || len(held) != 3 || held[2].Size != int64(bounds[3]-bounds[2]) {
		t.Fatalf("list parts: %d %+v", code, held)
	}
	var done struct {
		Location, Key, Status string
	}
	// COMPLETING: its parts carry no checksum (Uppy's do not), and the completer reads
	// the object for its CRC32C after completing it.
	if code := d.complete(parts, &done); code != http.StatusOK || done.Key != d.created.Key || done.Status != "COMPLETING" && done.Status != "COMPLETED" || !strings.HasSuffix(done.Location, "/"+d.created.Key) {
		t.Fatalf("complete: %d %+v", code, done)
	}
	up := waitCompleted(t, c, d.created.UploadID)
	e.requireExact(t, up, data)
	if up.Name != "video.bin" || up.Metadata["source"] != "e2e" {
		t.Fatalf("upload %v: want the name and metadata given", up)
	}
	// Completing again answers the same: a client that lost the answer retries.
	if code := d.complete(parts, &done); code != http.StatusOK || done.Status != "COMPLETED" {
		t.Fatalf("complete again: %d %+v", code, done)
	}
	// The HTTP door tells the object's length, not one counted in chunks of the
	// upload's chunk size (its parts are 5 MiB).
	r := doorOf(t, a.HTTPAddr()).do("HEAD", "/files/"+d.created.UploadID, nil, "Tus-Resumable", "1.0.0")
	if r.Header.Get("Upload-Length") != strconv.Itoa(len(data)) || r.Header.Get("Upload-Offset") != strconv.Itoa(len(data)) {
		t.Fatalf("tus HEAD of the completed direct upload: Upload-Length %q, Upload-Offset %q; want %d", r.Header.Get("Upload-Length"), r.Header.Get("Upload-Offset"), len(data))
	}

	png := testdocs.PNG("INVOICE 7373", "DIRECT DOOR")
	p := newDirect(t, base, "scan.png", "image/png")
	code, etag := p.put(p.sign(1), png)
	if code != http.StatusOK {
		t.Fatalf("PUT the PNG: %d", code)
	}
	if code := p.complete([]directPart{{PartNumber: 1, ETag: etag}}, nil); code != http.StatusOK {
		t.Fatalf("complete the PNG: %d", code)
	}
	pup := waitCompleted(t, c, p.created.UploadID)
	e.requireExact(t, pup, png)
	if dec := waitDecision(t, documents(t, a.GRPCAddr()), p.created.UploadID); dec.Ocr == nil || dec.Ocr.Words < 2 {
		t.Fatalf("document %v: want OCR words", dec)
	}
	waitFor(t, "the events on Kafka", func() bool {
		evs := allEvents(t, k)
		return len(eventsFor(evs, d.created.UploadID, "chunkup.v1.UploadCompleted")) == 1 &&
			len(eventsFor(evs, p.created.UploadID, "chunkup.v1.UploadCompleted")) == 1
	})
	if n := e.openMultipartUploads(t); n != 0 {
		t.Fatalf("%d multipart uploads left open in MinIO", n)
	}
}

// TestDirectSinglePutByCurl: Uppy's single-request upload by curl alone. GET s3/params
// answers a PUT to chunkup with the caller's credentials; the PUT of the whole file with
// exactly those headers answers 200 with an ETag and the object's Location, and the
// upload is COMPLETED, exact, the caller's (not another tenant's) and announced once.
// A params without a filename is 400, one without credentials 401; a PUT without a
// length is 411; a PUT cut short leaves no upload in progress and no object.
func TestDirectSinglePutByCurl(t *testing.T) {
	e := newEnv(t)
	k := testenv.StartKafka(t, topic)
	cfg := withKafka(e.config(), k)
	cfg.Auth.APIKeys = map[string]string{server.HashAPIKey("acme-key"): "acme", server.HashAPIKey("rival-key"): "rival"}
	cfg.HTTPDoor.Door.IdleTimeout = 2 * time.Second // the stalled PUT below
	a := e.start(t, cfg)
	acme := e.client(t, a, client.WithAPIKey("acme-key"))
	rival := e.client(t, a, client.WithAPIKey("rival-key"))
	base := "http://" + a.HTTPAddr() + "/s3/"
	key := "X-Api-Key: acme-key"

	var refused directError
	if code := directCall(t, "GET", base+"params?filename=a.txt&type=text/plain", nil, &refused); code != http.StatusUnauthorized {
		t.Fatalf("params without credentials: %d, want 401", code)
	}
	if code := directCall(t, "GET", base+"params?type=text/plain", nil, &refused, key); code != http.StatusBadRequest || !strings.Contains(refused.Error, "filename") {
		t.Fatalf("params without a filename: %d %q, want 400 naming it", code, refused.Error)
	}
	var params struct {
		Method  string            `json:"method"`
		URL     string            `json:"url"`
		Headers map[string]string `json:"headers"`
	}
	if code := directCall(t, "GET", base+"params?filename=report.bin&type=application/octet-stream&metadata%5Bsource%5D=e2e", nil, &params, key); code != http.StatusOK || params.Method != "PUT" || params.Headers["X-Api-Key"] != "acme-key" {
		t.Fatalf("params: %d %+v", code, params)
	}
	data := randomBytes(9<<20+4321, 4242)
	args := []string{"-X", "PUT", "--data-binary", "@" + writeFile(t, "report.bin", data), params.URL}
	for k, v := range params.Headers {
		args = append(args, "-H", k+": "+v)
	}
	res, _, text := curl(t, args...)
	var put struct {
		UploadID string `json:"uploadId"`
		Key      string `json:"key"`
		Location string `json:"location"`
		Status   string `json:"status"`
	}
	if res.code != http.StatusOK || res.header.Get("ETag") == "" || json.Unmarshal([]byte(text), &put) != nil || put.UploadID == "" ||
		res.header.Get("Location") != put.Location || !strings.HasSuffix(put.Location, "/"+put.Key) {
		t.Fatalf("PUT: %d %v %q", res.code, res.header, text)
	}
	if put.Status != "COMPLETING" && put.Status != "COMPLETED" { // every byte is in: never ACTIVE
		t.Fatalf("PUT answered status %q, want COMPLETING or COMPLETED", put.Status)
	}
	up := waitCompleted(t, acme, put.UploadID)
	e.requireExact(t, up, data)
	if up.Direct || up.Name != "report.bin" || up.Metadata["source"] != "e2e" {
		t.Fatalf("upload %v: want the name and metadata given, through chunkup", up)
	}
	if _, err := rival.API().GetUpload(ctx(t), &chunkupv1.GetUploadRequest{UploadId: put.UploadID}); status.Code(err) != codes.NotFound {
		t.Fatalf("the other tenant reads the upload: %v, want NotFound", err)
	}
	waitFor(t, "one UploadCompleted on Kafka", func() bool {
		return len(eventsFor(allEvents(t, k), put.UploadID, "chunkup.v1.UploadCompleted")) == 1
	})

	// The same URL takes S3's POST form (Uppy 6 POSTs one whatever the method): the
	// file in its "file" field, after the others; its Content-Type field is the
	// object's.
	form := randomBytes(3<<20+17, 4343)
	res, _, text = curl(t, "-H", key, "-F", "key=ignored", "-F", "Content-Type=text/csv", "-F", "file=@"+writeFile(t, "form.csv", form)+";filename=form.csv", params.URL)
	var posted struct {
		UploadID string `json:"uploadId"`
	}
	if res.code != http.StatusOK || res.header.Get("ETag") == "" || json.Unmarshal([]byte(text), &posted) != nil || posted.UploadID == "" {
		t.Fatalf("POST of a form: %d %v %q", res.code, res.header, text)
	}
	fup := waitCompleted(t, acme, posted.UploadID)
	e.requireExact(t, fup, form)
	if fup.ContentType != "text/csv" || fup.Name != "report.bin" {
		t.Fatalf("the form's upload %v: want the name in the URL and the form's content type", fup)
	}

	res, _, text = curl(t, "-X", "PUT", "-H", key, "-H", "Transfer-Encoding: chunked", "--data-binary", "streamed", params.URL)
	if res.code != http.StatusLengthRequired {
		t.Fatalf("PUT without a length: %d %q, want 411", res.code, text)
	}

	// Forms that can never succeed are 400, not a 5xx a client would retry, and leave
	// nothing behind: a second file, and a form without its closing boundary.
	res, _, text = curl(t, "-H", key, "-F", "file=@"+writeFile(t, "one.txt", []byte("one"))+";filename=one.txt",
		"-F", "file=@"+writeFile(t, "two.txt", []byte("two"))+";filename=two.txt", params.URL)
	if res.code != http.StatusBadRequest || !strings.Contains(text, `second \"file\"`) || !strings.Contains(text, "nothing was stored") {
		t.Fatalf("a form with two files: %d %q, want 400 naming the second file", res.code, text)
	}
	unclosed := "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"u.txt\"\r\n\r\nno end in sight"
	res, _, text = curl(t, "-H", key, "-H", "Content-Type: multipart/form-data; boundary=XyZ", "--data-binary", unclosed, params.URL)
	if res.code != http.StatusBadRequest || !strings.Contains(text, "closing boundary") || strings.Contains(text, "Upload-Offset") {
		t.Fatalf("a form without its closing boundary: %d %q, want 400 saying so", res.code, text)
	}

	// Metadata: the caller's own entries are counted (filename and type are entries too).
	many := func(n int) string {
		q := url.Values{"filename": {"m.txt"}, "type": {"text/plain"}}
		for i := range n {
			q.Set(fmt.Sprintf("metadata[k%d]", i), "v")
		}
		return base + "params?" + q.Encode()
	}
	if code := directCall(t, "GET", many(63), nil, &refused, key); code != http.StatusBadRequest || !strings.Contains(refused.Error, "metadata has 63 entries; at most 62") {
		t.Fatalf("params with 63 metadata entries: %d %q, want 400 counting the caller's", code, refused.Error)
	}
	if code := directCall(t, "GET", many(62), nil, &params, key); code != http.StatusOK {
		t.Fatalf("params with 62 metadata entries: %d", code)
	}

	u, err := url.Parse(params.URL)
	if err != nil {
		t.Fatal(err)
	}
	rawPut := func(length int, body []byte) *net.TCPConn {
		t.Helper()
		conn, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		_ = conn.SetDeadline(time.Now().Add(time.Minute))
		fmt.Fprintf(conn, "PUT %s HTTP/1.1\r\nHost: %s\r\nX-Api-Key: acme-key\r\nContent-Length: %d\r\n\r\n", u.RequestURI(), u.Host, length)
		if _, err := conn.Write(body); err != nil {
			t.Fatal(err)
		}
		return conn.(*net.TCPConn)
	}
	answer := func(conn *net.TCPConn) (int, http.Header, string) {
		t.Helper()
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header, string(b)
	}
	// A client that half-closes its side once the whole body is sent still gets the
	// whole answer (net/http cancels such a request's context).
	half := rawPut(5, []byte("hello"))
	if err := half.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	code, hdr, text := answer(half)
	var halfPut struct {
		UploadID, Key, Location, Status string
	}
	if code != http.StatusOK || json.Unmarshal([]byte(text), &halfPut) != nil || halfPut.Key == "" || hdr.Get("Location") == "" {
		t.Fatalf("a half-closed PUT: %d %v %q, want 200 with the object's key and Location", code, hdr, text)
	}
	e.requireExact(t, waitCompleted(t, acme, halfPut.UploadID), []byte("hello"))
	// A body that stalls gets an answer once the door gives up on it, which does not
	// say to resume (a single PUT cannot be), and its upload is aborted.
	code, _, text = answer(rawPut(100, []byte("twelve bytes")))
	if code < 400 || !strings.Contains(text, "nothing was stored") || strings.Contains(text, "Upload-Offset") {
		t.Fatalf("a stalled PUT: %d %q, want an error saying nothing was stored", code, text)
	}

	// A PUT whose client goes away after part of the file: the upload it made is
	// aborted (a single PUT cannot be resumed), so nothing is left in progress.
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "PUT %s HTTP/1.1\r\nHost: %s\r\nX-Api-Key: acme-key\r\nContent-Length: %d\r\n\r\n", u.RequestURI(), u.Host, 30<<20)
	if _, err := conn.Write(randomBytes(1<<20, 1)); err != nil {
		t.Fatal(err)
	}
	inProgress := func() int {
		open, err := acme.API().ListUploads(ctx(t), &chunkupv1.ListUploadsRequest{PageSize: 10})
		if err != nil {
			t.Fatal(err)
		}
		return len(open.Uploads)
	}
	waitFor(t, "the cut PUT's upload in progress", func() bool { return inProgress() == 1 })
	_ = conn.Close()
	waitFor(t, "no upload in progress after the cut PUT", func() bool { return inProgress() == 0 })
	objs, err := e.s3.ListObjectsV2(ctx(t), &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	if err != nil || len(objs.Contents) != 3 {
		t.Fatalf("objects %v %v, want only the three completed", objs, err)
	}
}

// TestDirectRefusals: what a client reports is checked against what S3 holds before
// anything is completed. An ETag S3 does not hold, a missing part, a part of another
// size than reported, and a part under S3's minimum that is not the last each fail the
// upload with a reason (409), write no object and leave no multipart upload; a signed
// URL does not take another part number, nor anything once expired; bad requests are
// 400 and change nothing; another tenant cannot see, sign, complete or abort the upload
// (404, as for a missing one), a request without credentials is 401, and a page of a
// name rebound to this server 403, while a configured origin's preflight passes.
func TestDirectRefusals(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.Upload.DirectURLTTL = 2 * time.Second
	cfg.Auth.APIKeys = map[string]string{server.HashAPIKey("acme-key"): "acme", server.HashAPIKey("rival-key"): "rival"}
	cfg.HTTPDoor.Door.CORS.AllowedOrigins = []string{"https://app.example"}
	a := e.start(t, cfg)
	c := e.client(t, a, client.WithAPIKey("acme-key"))
	base := "http://" + a.HTTPAddr() + "/s3/"
	five := randomBytes(5<<20, 290)
	acme, rival := "x-api-key: acme-key", "x-api-key: rival-key"
	// Every upload of this test is acme's (the package's newDirect, with its key).
	newDirect := func(t *testing.T, base, filename, ct string) *direct { return newDirect(t, base, filename, ct, acme) }

	// threeParts makes an upload with parts 1 and 2 (5 MiB each) and 3 (1 KiB) in S3.
	threeParts := func(t *testing.T) (*direct, []directPart) {
		t.Helper()
		d := newDirect(t, base, "f.bin", "application/octet-stream")
		var parts []directPart
		for n, b := range [][]byte{five, five, five[:1024]} {
			code, etag := d.put(d.sign(n+1), b)
			if code != http.StatusOK {
				t.Fatalf("PUT part %d: %d", n+1, code)
			}
			parts = append(parts, directPart{PartNumber: n + 1, ETag: etag})
		}
		return d, parts
	}
	failed := func(t *testing.T, d *direct, parts []directPart, reason string) {
		t.Helper()
		var answer directError
		if code := d.complete(parts, &answer); code != http.StatusConflict || !strings.Contains(answer.Error, reason) || !strings.Contains(answer.Error, "nothing was written") ||
			!strings.Contains(answer.Error, "create a new upload") {
			t.Fatalf("complete: %d %q, want 409 saying %q, and to create a new upload", code, answer.Error, reason)
		}
		up := getUpload(t, c, d.created.UploadID)
		if up.State != chunkupv1.UploadState_UPLOAD_STATE_FAILED || !strings.Contains(up.Error, reason) {
			t.Fatalf("upload %v: want FAILED saying %q", up, reason)
		}
		if _, err := e.s3.HeadObject(ctx(t), &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(d.created.Key)}); err == nil {
			t.Fatalf("an object was written at %s", d.created.Key)
		}
		waitFor(t, "the multipart upload to be aborted", func() bool { return e.openMultipartUploadsFor(t, d.created.Key) == 0 })
	}

	t.Run("an ETag S3 does not hold", func(t *testing.T) {
		d, parts := threeParts(t)
		parts[1].ETag = `"0123456789abcdef0123456789abcdef"`
		failed(t, d, parts, "part 2 was reported with ETag")
	})
	t.Run("a missing part", func(t *testing.T) {
		d := newDirect(t, base, "f.bin", "application/octet-stream")
		var parts []directPart
		for n := 1; n <= 2; n++ {
			code, etag := d.put(d.sign(n), five)
			if code != http.StatusOK {
				t.Fatalf("PUT part %d: %d", n, code)
			}
			parts = append(parts, directPart{PartNumber: n, ETag: etag})
		}
		parts = append(parts, directPart{PartNumber: 3, ETag: parts[1].ETag}) // never put
		failed(t, d, parts, "part 3 was reported, but S3 does not hold it")
	})
	t.Run("a part of another size", func(t *testing.T) {
		d, parts := threeParts(t)
		parts[2].Size = 2048
		failed(t, d, parts, "part 3 was reported with 2048 bytes, but S3 holds 1024")
	})
	t.Run("a part S3 holds that was not reported", func(t *testing.T) {
		d, parts := threeParts(t)
		failed(t, d, parts[:2], "S3 holds part 3, which was not reported")
	})
	t.Run("a small part before the last", func(t *testing.T) {
		d := newDirect(t, base, "f.bin", "application/octet-stream")
		var parts []directPart
		for n, b := range [][]byte{five[:1024], five} {
			code, etag := d.put(d.sign(n+1), b)
			if code != http.StatusOK {
				t.Fatalf("PUT part %d: %d", n+1, code)
			}
			parts = append(parts, directPart{PartNumber: n + 1, ETag: etag})
		}
		failed(t, d, parts, "every part but the last must have at least 5 MiB")
	})
	t.Run("a URL for another part number", func(t *testing.T) {
		d := newDirect(t, base, "f.bin", "application/octet-stream")
		u := strings.Replace(d.sign(1), "partNumber=1&", "partNumber=2&", 1)
		if !strings.Contains(u, "partNumber=2&") {
			t.Fatalf("no partNumber in %s", u)
		}
		if code, _ := d.put(u, five[:100]); code != http.StatusForbidden {
			t.Fatalf("PUT with the part number changed: %d, want 403", code)
		}
	})
	t.Run("the SDK with URLs that live 2 s", func(t *testing.T) {
		// A part whose URL nears its expiry before its PUT is signed again (or, past
		// it, retried with a new URL after S3's 403): the upload completes either way.
		data := randomBytes(11<<20+5, 291)
		up, err := c.UploadDirect(ctx(t), bytes.NewReader(data), int64(len(data)), client.WithName("short-lived.bin"))
		if err != nil {
			t.Fatal(err)
		}
		e.requireExact(t, up, data)
	})
	t.Run("an expired URL", func(t *testing.T) {
		d := newDirect(t, base, "f.bin", "application/octet-stream")
		u := d.sign(1)
		deadline := time.Now().Add(30 * time.Second)
		for {
			code, _ := d.put(u, five[:100])
			if code == http.StatusForbidden {
				break
			}
			if code != http.StatusOK || time.Now().After(deadline) {
				t.Fatalf("PUT with a URL signed for 2s: %d after %s", code, time.Since(deadline.Add(-30*time.Second)))
			}
			time.Sleep(250 * time.Millisecond) // the URL is valid until its time is up
		}
	})
	t.Run("bad requests change nothing", func(t *testing.T) {
		d, parts := threeParts(t)
		for _, tc := range []struct {
			name  string
			parts []directPart
			want  string
		}{
			{"no parts", nil, "report 1 to 10000 parts"},
			{"a gap", []directPart{parts[0], parts[2]}, "part 2 is not reported"},
			{"a part twice", []directPart{parts[0], parts[0], parts[1], parts[2]}, "part 1 is reported twice"},
			{"no ETag", []directPart{parts[0], parts[1], {PartNumber: 3}}, "part 3 has no ETag"},
			{"part 0", []directPart{{PartNumber: 0, ETag: parts[0].ETag}, parts[0], parts[1], parts[2]}, "part 0 is not a part number"},
		} {
			var answer directError
			if code := d.complete(tc.parts, &answer); code != http.StatusBadRequest || !strings.Contains(answer.Error, tc.want) {
				t.Errorf("%s: %d %q, want 400 saying %q", tc.name, code, answer.Error, tc.want)
			}
		}
		var answer directError
		if code := directCall(t, "GET", base+"multipart/"+d.created.UploadID+"/0"+d.q(), nil, &answer, acme); code != http.StatusBadRequest {
			t.Errorf("sign part 0: %d %q, want 400", code, answer.Error)
		}
		if code := directCall(t, "GET", base+"multipart/"+d.created.UploadID+"/1?key=other", nil, &answer, acme); code != http.StatusBadRequest || !strings.Contains(answer.Error, "is not upload") {
			t.Errorf("sign with another key: %d %q, want 400", code, answer.Error)
		}
		if code := directCall(t, "POST", base+"multipart", map[string]any{"filename": "x"}, &answer, acme); code != http.StatusBadRequest || !strings.Contains(answer.Error, "type") {
			t.Errorf("create without a type: %d %q, want 400", code, answer.Error)
		}
		// Another tenant: the upload does not exist for it, whatever it asks.
		for _, r := range []struct{ method, path string }{{"GET", "/1"}, {"GET", ""}, {"POST", "/complete"}, {"DELETE", ""}} {
			var body any
			if r.method == "POST" {
				body = map[string]any{"parts": parts}
			}
			if code := directCall(t, r.method, base+"multipart/"+d.created.UploadID+r.path+d.q(), body, &answer, rival); code != http.StatusNotFound {
				t.Errorf("the other tenant's %s %s: %d %q, want 404", r.method, r.path, code, answer.Error)
			}
		}
		if code := directCall(t, "POST", base+"multipart", map[string]any{"filename": "x", "type": "text/plain"}, &answer); code != http.StatusUnauthorized {
			t.Errorf("create without credentials: %d %q, want 401", code, answer.Error)
		}
		// A page whose name was rebound to this server (its Origin and Host both name
		// it) is refused, as by the HTTP door; a configured origin's preflight passes.
		_, port, _ := net.SplitHostPort(a.HTTPAddr())
		evil := "evil.example:" + port
		if code := directCall(t, "POST", base+"multipart", map[string]any{"filename": "x", "type": "text/plain"}, &answer,
			acme, "Origin: http://"+evil, "Host: "+evil); code != http.StatusForbidden || !strings.Contains(answer.Error, "may not use this server") {
			t.Errorf("create from a rebound page: %d %q, want 403", code, answer.Error)
		}
		res, _, _ := curl(t, "-X", "OPTIONS", base+"multipart", "-H", "Origin: https://app.example", "-H", "Access-Control-Request-Method: POST")
		if res.code != http.StatusNoContent || res.header.Get("Access-Control-Allow-Origin") != "https://app.example" || !strings.Contains(res.header.Get("Access-Control-Allow-Headers"), "X-Api-Key") {
			t.Errorf("preflight from a configured origin: %d %v", res.code, res.header)
		}
		if up := getUpload(t, c, d.created.UploadID); up.State != chunkupv1.UploadState_UPLOAD_STATE_ACTIVE {
			t.Fatalf("after bad requests the upload is %v, want ACTIVE", up.State)
		}
		if code := d.complete(parts, nil); code != http.StatusOK {
			t.Fatalf("the right completion after them: %d", code)
		}
		want := append(append(append([]byte{}, five...), five...), five[:1024]...)
		e.requireExact(t, waitCompleted(t, c, d.created.UploadID), want)
	})
	t.Run("chunks through another door", func(t *testing.T) {
		d := newDirect(t, base, "f.bin", "application/octet-stream")
		_, err := c.Upload(ctx(t), strings.NewReader("abc"), client.WithResume(d.created.UploadID))
		if err == nil || !strings.Contains(err.Error(), "direct upload") {
			t.Fatalf("chunks sent to a direct upload: %v, want refused", err)
		}
	})
	t.Run("abort", func(t *testing.T) {
		d, _ := threeParts(t)
		if code := directCall(t, "DELETE", base+"multipart/"+d.created.UploadID+d.q(), nil, nil, acme); code != http.StatusOK {
			t.Fatalf("abort: %d", code)
		}
		if up := getUpload(t, c, d.created.UploadID); up.State != chunkupv1.UploadState_UPLOAD_STATE_ABORTED {
			t.Fatalf("aborted: %v", up.State)
		}
		waitFor(t, "the multipart upload to be aborted", func() bool { return e.openMultipartUploadsFor(t, d.created.Key) == 0 })
	})
}

// TestDirectUploadExpires: a direct upload abandoned after a part expires like any
// upload, and its multipart upload is aborted in S3; while its client keeps asking for
// part URLs it is alive.
func TestDirectUploadExpires(t *testing.T) {
	e := newEnv(t)
	clk := &offsetClock{}
	cfg := e.config()
	cfg.Staging = staging.Config{StateTTL: time.Hour, Retention: time.Hour, Now: clk.Now}
	cfg.Expirer = cleanup.ExpirerConfig{Interval: 100 * time.Millisecond}
	a := e.start(t, cfg)
	c := e.client(t, a)
	d := newDirect(t, "http://"+a.HTTPAddr()+"/s3/", "abandoned.bin", "application/octet-stream")
	if code, _ := d.put(d.sign(1), randomBytes(5<<20, 292)); code != http.StatusOK {
		t.Fatalf("PUT: %d", code)
	}
	if n := e.openMultipartUploads(t); n != 1 {
		t.Fatalf("%d multipart uploads open, want 1", n)
	}
	// Signing a part is activity: 50 minutes, a URL, 50 minutes more, and it is alive.
	clk.Add(50 * time.Minute)
	d.sign(2)
	clk.Add(50 * time.Minute)
	ttl := 500 * time.Millisecond // a few of the expirer's sweeps
	for end := time.Now().Add(ttl); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if st := getUpload(t, c, d.created.UploadID).State; st != chunkupv1.UploadState_UPLOAD_STATE_ACTIVE {
			t.Fatalf("an upload signed for 50 minutes ago is %v, want ACTIVE", st)
		}
	}
	clk.Add(time.Hour)
	waitFor(t, "the upload to expire", func() bool {
		return getUpload(t, c, d.created.UploadID).State == chunkupv1.UploadState_UPLOAD_STATE_EXPIRED
	})
	waitFor(t, "the multipart upload to be aborted in MinIO", func() bool { return e.openMultipartUploads(t) == 0 })
}

// TestDirectSDKAndCLI: `chunkup upload --direct FILE` and the SDK's UploadDirect put the
// parts straight into S3 with their CRC32C bound into the signed URLs (S3 refuses other
// bytes for them), and the objects are exact; a resumed direct upload does not put
// again the parts S3 holds. Over gRPC: a create that differs from a direct one only in
// direct is refused; parts of another size than an upload of known size's chunks fail
// it; the direct door touches only direct uploads.
func TestDirectSDKAndCLI(t *testing.T) {
	e := newEnv(t)
	a := e.start(t, e.config())
	c := e.client(t, a, client.WithParallel(3))

	data := randomBytes(21<<20+777, 301)
	file := writeFile(t, "movie.bin", data)
	cmd := exec.CommandContext(ctx(t), harness.Binary(t), "upload", "--direct", "--server", a.GRPCAddr(), "--progress", "none", file)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chunkup upload --direct: %v\n%s%s", err, out, stderr.String())
	}
	id, _, _ := strings.Cut(string(out), " ")
	up := getUpload(t, c, id)
	if !up.Direct || up.Name != "movie.bin" {
		t.Fatalf("upload %v: want a direct upload of movie.bin\n%s", up, out)
	}
	e.requireExact(t, up, data)

	sdk, err := c.UploadDirect(ctx(t), bytes.NewReader(data[:9<<20]), 9<<20, client.WithName("nine.bin"))
	if err != nil {
		t.Fatal(err)
	}
	e.requireExact(t, sdk, data[:9<<20])

	// An input whose bytes change between the SDK's reading them for their CRC32C and
	// for the PUT: refused by the SDK, not put.
	changing := &changingReader{data: data[:9<<20], at: 8<<20 + 5}
	if _, err := c.UploadDirect(ctx(t), changing, 9<<20, client.WithName("changing.bin")); err == nil || !strings.Contains(err.Error(), "changed while it was uploaded") {
		t.Fatalf("a direct upload of an input that changes: %v, want it refused", err)
	}

	// A direct upload with part 1 put already (as by a client that died after it).
	created, err := c.API().CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{Name: "resumed.bin", ExpectedSize: proto.Int64(int64(len(data))),
		Direct: true, DirectChecksums: true})
	if err != nil {
		t.Fatal(err)
	}
	rid, chunk := created.Upload.UploadId, int(created.Upload.ChunkSize)
	signPut := func(n int, sent []byte, signed []byte) int {
		t.Helper()
		resp, err := c.API().SignParts(ctx(t), &chunkupv1.SignPartsRequest{UploadId: rid, Parts: []*chunkupv1.PartToSign{
			{PartNumber: uint32(n), Size: int64(len(signed)), Crc32C: proto.Uint32(crc32.Checksum(signed, crc32.MakeTable(crc32.Castagnoli)))}}})
		if err != nil {
			t.Fatal(err)
		}
		return putSigned(t, resp.Parts[0], sent).StatusCode
	}
	if code := signPut(1, data[:chunk], data[:chunk]); code != http.StatusOK {
		t.Fatalf("PUT part 1: %d", code)
	}
	// Other bytes than the URL was signed for: S3 refuses them.
	other := bytes.Clone(data[chunk : 2*chunk])
	other[0]++
	if code := signPut(2, other, data[chunk:2*chunk]); code/100 != 4 {
		t.Fatalf("PUT of other bytes than signed: %d, want S3 to refuse", code)
	}
	held, err := c.API().ListDirectParts(ctx(t), &chunkupv1.ListDirectPartsRequest{UploadId: rid})
	// (SeaweedFS lists no part's CRC32C: a resume then puts part 1 again.)
	if err != nil || len(held.Parts) != 1 || held.Parts[0].HasCrc32C && held.Parts[0].Crc32C != crc32.Checksum(data[:chunk], crc32.MakeTable(crc32.Castagnoli)) {
		t.Fatalf("parts S3 holds: %v %v, want part 1 (with its CRC32C where the store lists it)", held, err)
	}
	// A create repeated under the same client_node_id but not direct is refused, not
	// handed the direct upload.
	same, err := c.API().CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{Name: "x.bin", ClientNodeId: "same-node", Direct: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = c.API().AbortUpload(context.Background(), &chunkupv1.AbortUploadRequest{UploadId: same.Upload.UploadId})
	})
	if _, err := c.API().CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{Name: "x.bin", ClientNodeId: "same-node"}); status.Code(err) != codes.AlreadyExists || !strings.Contains(err.Error(), "direct") {
		t.Fatalf("the same create without direct: %v, want ALREADY_EXISTS naming direct", err)
	}
	// An aborted upload's parts are not listed, and the answer says why.
	if _, err := c.API().AbortUpload(ctx(t), &chunkupv1.AbortUploadRequest{UploadId: same.Upload.UploadId}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.API().ListDirectParts(ctx(t), &chunkupv1.ListDirectPartsRequest{UploadId: same.Upload.UploadId}); status.Code(err) != codes.FailedPrecondition ||
		!strings.Contains(err.Error(), "ABORTED: its parts are listed only while it is ACTIVE (they were discarded when it ended)") {
		t.Fatalf("listing an aborted upload's parts: %v, want FAILED_PRECONDITION saying they were discarded", err)
	}
	// The direct door serves direct uploads only.
	plain, err := c.Upload(ctx(t), strings.NewReader("plain"), client.WithName("plain.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var answer directError
	if code := directCall(t, "DELETE", "http://"+a.HTTPAddr()+"/s3/multipart/"+plain.UploadId, nil, &answer); code != http.StatusBadRequest || !strings.Contains(answer.Error, "not a direct upload") {
		t.Fatalf("the direct door's DELETE of another upload: %d %q, want 400", code, answer.Error)
	}
	// An upload of a known size has every part's: URLs for other sizes are refused at
	// signing (they could only take bytes the completion would refuse), and the
	// refusal leaves the upload as it was.
	sized, err := c.API().CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{Name: "sized.bin", ExpectedSize: proto.Int64(int64(chunk) + 10), Direct: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*chunkupv1.PartToSign{{PartNumber: 1, Size: int64(chunk) - 1024}, {PartNumber: 2, Size: 11}} {
		_, err := c.API().SignParts(ctx(t), &chunkupv1.SignPartsRequest{UploadId: sized.Upload.UploadId, Parts: []*chunkupv1.PartToSign{p}})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), fmt.Sprintf("part %d must have", p.PartNumber)) {
			t.Fatalf("signing part %d of %d bytes: %v, want INVALID_ARGUMENT naming its size", p.PartNumber, p.Size, err)
		}
	}
	if up := getUpload(t, c, sized.Upload.UploadId); up.State != chunkupv1.UploadState_UPLOAD_STATE_ACTIVE {
		t.Fatalf("after refused signatures: %v, want it ACTIVE", up)
	}
	bound, err := c.API().SignParts(ctx(t), &chunkupv1.SignPartsRequest{UploadId: sized.Upload.UploadId, Parts: []*chunkupv1.PartToSign{{PartNumber: 2}}})
	boundSize := func() string {
		for k, v := range bound.GetParts()[0].GetHeaders() {
			if strings.EqualFold(k, "Content-Length") {
				return v
			}
		}
		return ""
	}
	if err != nil || boundSize() != "10" {
		t.Fatalf("signing the last part without a size: %v %v, want its size, 10, bound", bound, err)
	}

	// Resumed by the CLI without --direct: it goes on as it began, direct to S3 (the SDK
	// underneath puts only the parts S3 lacks).
	resume := exec.CommandContext(ctx(t), harness.Binary(t), "upload", "--resume", rid, "--server", a.GRPCAddr(), "--progress", "none", file)
	stderr.Reset()
	resume.Stderr = &stderr
	if out, err = resume.Output(); err != nil || !strings.HasPrefix(string(out), rid+" COMPLETED") || !strings.Contains(stderr.String(), "resuming direct upload "+rid) {
		t.Fatalf("chunkup upload --resume %s (no --direct): %v\n%s%s", rid, err, out, stderr.String())
	}
	resumed := getUpload(t, c, rid)
	e.requireExact(t, resumed, data)
	for _, key := range []string{up.Key, sdk.Key, resumed.Key} {
		if n := e.openMultipartUploadsFor(t, key); n != 0 {
			t.Fatalf("%d multipart uploads left open for %s", n, key)
		}
	}
}

// changingReader is an input whose byte at changes once it has been read.
type changingReader struct {
	data  []byte
	at    int64
	mu    sync.Mutex
	reads int
}

func (r *changingReader) ReadAt(b []byte, off int64) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if off >= int64(len(r.data)) {
		return 0, io.EOF
	}
	n := copy(b, r.data[off:])
	if off <= r.at && r.at < off+int64(n) {
		if r.reads++; r.reads > 1 {
			b[r.at-off]++
		}
	}
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}

// TestDirectCompletionRacingAWrongReport: a completion with the parts' ETags and one
// with a wrong ETag at the same moment (over Companion's contract, whose client takes
// a 200 as success). Whichever comes first, a 200 to the right report means the upload
// completes with its object: the wrong report may fail the upload only before the
// right one recorded the parts, and then the right one is not answered 200.
func TestDirectCompletionRacingAWrongReport(t *testing.T) {
	e := newEnv(t)
	a := e.start(t, e.config())
	c := e.client(t, a)
	base := "http://" + a.HTTPAddr() + "/s3/"
	okRounds := 0
	for round := range 12 {
		data := randomBytes(1000+round, uint64(900+round))
		d := newDirect(t, base, "raced.bin", "application/octet-stream")
		code, etag := d.put(d.sign(1), data)
		if code != http.StatusOK {
			t.Fatalf("PUT: %d", code)
		}
		reports := [][]directPart{{{PartNumber: 1, ETag: etag}}, {{PartNumber: 1, ETag: `"00000000000000000000000000000000"`}}}
		answers := make([]string, 2)
		var wg sync.WaitGroup
		for i, parts := range reports {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var done struct{ Status string }
				answers[i] = fmt.Sprint(d.complete(parts, &done), " ", done.Status)
			}()
		}
		wg.Wait()
		if strings.HasPrefix(answers[1], "200 ") {
			t.Fatalf("round %d: the wrong report was answered %q (the right one %q): want 409", round, answers[1], answers[0])
		}
		if strings.HasPrefix(answers[0], "200 ") {
			okRounds++
			e.requireExact(t, waitCompleted(t, c, d.created.UploadID), data)
			// Once completed, the right report again gets the upload, the wrong one 409.
			var done struct{ Status string }
			if code := d.complete(reports[0], &done); code != http.StatusOK || done.Status != "COMPLETED" {
				t.Fatalf("round %d: the right report repeated: %d %s, want 200 COMPLETED", round, code, done.Status)
			}
			if code := d.complete(reports[1], &done); code != http.StatusConflict {
				t.Fatalf("round %d: the wrong report after the completion: %d, want 409", round, code)
			}
		} else if up := getUpload(t, c, d.created.UploadID); up.State != chunkupv1.UploadState_UPLOAD_STATE_FAILED {
			t.Fatalf("round %d: the right report answered %q, the wrong one %q, and the upload is %s: want it FAILED when the right report was refused",
				round, answers[0], answers[1], up.State)
		}
	}
	t.Logf("the right report was answered 200 in %d of 12 rounds", okRounds)
}

// TestDirectPartURLCannotCopy: a signed part URL is for the client's bytes, not for a
// copy of another object. MinIO takes an unsigned x-amz-copy-source header on a
// presigned UploadPart, which makes the part a copy of any object its signer may read:
// with URLs signed by chunkup's own credentials, a tenant could complete an upload
// holding another tenant's object. Signed by the role --s3-sign-role assumes (allowed
// s3:PutObject only), the copy is refused, and the client's own bytes still go. On
// SeaweedFS and versitygw, which have no STS, serve's default (auto) signs with
// chunkup's own credentials, and the store refuses the unsigned header itself.
func TestDirectPartURLCannotCopy(t *testing.T) {
	e := newEnv(t)
	own := e.client(t, e.start(t, e.config())) // it makes the bucket
	_, minio := e.minio.(*testenv.MinIO)
	auto := e.config()
	auto.S3.SignRole = s3store.SignRoleAuto
	signedByAuto := e.client(t, e.start(t, auto))
	secret := randomBytes(5<<20, 77)
	const victim = "someone-else/secret.bin"
	if _, err := e.s3.PutObject(ctx(t), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(victim), Body: bytes.NewReader(secret)}); err != nil {
		t.Fatal(err)
	}
	signPart1 := func(t *testing.T, c *client.Client) (string, *chunkupv1.SignedPart) {
		t.Helper()
		created, err := c.API().CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{Name: "mine.bin",
			ExpectedSize: proto.Int64(int64(len(secret))), Direct: true})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.API().SignParts(ctx(t), &chunkupv1.SignPartsRequest{UploadId: created.Upload.UploadId,
			Parts: []*chunkupv1.PartToSign{{PartNumber: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		return created.Upload.UploadId, resp.Parts[0]
	}
	copyOf := []string{"x-amz-copy-source", "/" + bucket + "/" + victim}
	zeros := make([]byte, len(secret))

	if minio {
		t.Run("signed by chunkup's own credentials, MinIO copies", func(t *testing.T) {
			// What the role is for: if a MinIO release refused the copy, this would say so.
			_, part := signPart1(t, own)
			if res := putSigned(t, part, zeros, copyOf...); res.StatusCode != http.StatusOK {
				t.Fatalf("MinIO answered the copy %d: it no longer takes an unsigned x-amz-copy-source", res.StatusCode)
			}
		})
	}
	refusesCopy := func(t *testing.T, c *client.Client) {
		t.Helper()
		id, part := signPart1(t, c)
		// A store may refuse before it has read the body, and close the connection
		// (versitygw): a reset while the body is sent is a refusal too.
		switch code, err := tryPutSigned(t, part, zeros, copyOf...); {
		case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
			t.Logf("the store refused the copy by closing the connection: %v", err)
		case err != nil:
			t.Fatalf("the copy through a signed part URL: %v", err)
		case code/100 != 4:
			t.Fatalf("the copy through a signed part URL was answered %d, want a refusal (4xx)", code)
		}
		// The client's own bytes go, and complete.
		mine := randomBytes(len(secret), 78)
		res := putSigned(t, part, mine)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("PUT of the part's own bytes: %d", res.StatusCode)
		}
		if _, err := c.API().CompleteDirect(ctx(t), &chunkupv1.CompleteDirectRequest{UploadId: id,
			Parts: []*chunkupv1.DirectPart{{PartNumber: 1, Etag: res.Header.Get("ETag")}}}); err != nil {
			t.Fatal(err)
		}
		e.requireExact(t, waitCompleted(t, c, id), mine)
	}
	t.Run("signed as serve's default (auto) signs, the copy is refused", func(t *testing.T) { refusesCopy(t, signedByAuto) })
	if minio {
		roled := e.config()
		roled.S3.SignRole = "arn:minio:iam:::role/chunkup-direct"
		signedByRole := e.client(t, e.start(t, roled))
		t.Run("signed by a role named, MinIO refuses the copy", func(t *testing.T) { refusesCopy(t, signedByRole) })
	}
}

// TestDirectConcurrentCompletions: a client that repeats its completion while the first
// is still under way (a timeout and a retry, two tabs) gets the upload from each:
// COMPLETED, or COMPLETING while the other finishes it, never an error; the object is
// exact and announced once. Four completions of the same parts at once, over gRPC with
// checksums (completed within the request) and over Companion's contract without
// (completed after it), for several uploads.
func TestDirectConcurrentCompletions(t *testing.T) {
	e := newEnv(t)
	k := testenv.StartKafka(t, topic)
	a := e.start(t, withKafka(e.config(), k))
	c := e.client(t, a)
	base := "http://" + a.HTTPAddr() + "/s3/"
	const at = 4
	var ids []string

	for round := range 3 {
		data := randomBytes(5<<20+1000, uint64(700+round))
		created, err := c.API().CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{Name: "twice.bin", ExpectedSize: proto.Int64(int64(len(data))),
			Direct: true, DirectChecksums: true, ChunkSize: 5 << 20})
		if err != nil {
			t.Fatal(err)
		}
		id := created.Upload.UploadId
		var reported []*chunkupv1.DirectPart
		for n, part := range [][]byte{data[:5<<20], data[5<<20:]} {
			sum := crc32.Checksum(part, crc32.MakeTable(crc32.Castagnoli))
			resp, err := c.API().SignParts(ctx(t), &chunkupv1.SignPartsRequest{UploadId: id, Parts: []*chunkupv1.PartToSign{
				{PartNumber: uint32(n + 1), Size: int64(len(part)), Crc32C: proto.Uint32(sum)}}})
			if err != nil {
				t.Fatal(err)
			}
			res := putSigned(t, resp.Parts[0], part)
			if res.StatusCode != http.StatusOK {
				t.Fatalf("PUT part %d: %d", n+1, res.StatusCode)
			}
			reported = append(reported, &chunkupv1.DirectPart{PartNumber: uint32(n + 1), Etag: res.Header.Get("ETag"), Crc32C: sum, HasCrc32C: true})
		}
		errs := make(chan error, at)
		for range at {
			go func() {
				r, err := c.API().CompleteDirect(ctx(t), &chunkupv1.CompleteDirectRequest{UploadId: id, Parts: reported})
				if err == nil && r.Upload.State != chunkupv1.UploadState_UPLOAD_STATE_COMPLETED && r.Upload.State != chunkupv1.UploadState_UPLOAD_STATE_COMPLETING {
					err = fmt.Errorf("the upload is %s", r.Upload.State)
				}
				errs <- err
			}()
		}
		for range at {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: one of %d completions at once over gRPC: %v", round, at, err)
			}
		}
		e.requireExact(t, waitCompleted(t, c, id), data)
		ids = append(ids, id)
		// Once completed, a report of other parts is refused, and changes nothing.
		other := []*chunkupv1.DirectPart{reported[0], {PartNumber: 2, Etag: `"00000000000000000000000000000000"`}}
		if _, err := c.API().CompleteDirect(ctx(t), &chunkupv1.CompleteDirectRequest{UploadId: id, Parts: other}); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("round %d: a report of other parts after the completion: %v, want FAILED_PRECONDITION", round, err)
		}
		if got := getUpload(t, c, id).State; got != chunkupv1.UploadState_UPLOAD_STATE_COMPLETED {
			t.Fatalf("round %d: after a refused report the upload is %s", round, got)
		}

		d := newDirect(t, base, "twice-http.bin", "application/octet-stream")
		var parts []directPart
		for n, part := range [][]byte{data[:5<<20], data[5<<20:]} {
			code, etag := d.put(d.sign(n+1), part)
			if code != http.StatusOK {
				t.Fatalf("PUT part %d: %d", n+1, code)
			}
			parts = append(parts, directPart{PartNumber: n + 1, ETag: etag})
		}
		codes := make(chan string, at)
		for range at {
			go func() {
				var done struct{ Status string }
				code := d.complete(parts, &done)
				codes <- fmt.Sprint(code, " ", done.Status)
			}()
		}
		for range at {
			if got := <-codes; got != "200 COMPLETING" && got != "200 COMPLETED" {
				t.Fatalf("round %d: one of %d completions at once over HTTP answered %s, want 200 with the upload COMPLETING or COMPLETED", round, at, got)
			}
		}
		e.requireExact(t, waitCompleted(t, c, d.created.UploadID), data)
		ids = append(ids, d.created.UploadID)
	}
	waitFor(t, "each upload's one UploadCompleted", func() bool {
		evs := allEvents(t, k)
		for _, id := range ids {
			if len(eventsFor(evs, id, "chunkup.v1.UploadCompleted")) != 1 {
				return false
			}
		}
		return true
	})
}

// signedRequest is the PUT of body to signed part sp's URL with the headers it was
// signed with, as a client sends it, and extra headers (name, value, …).
func signedRequest(t *testing.T, sp *chunkupv1.SignedPart, body []byte, extra ...string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx(t), sp.Method, sp.Url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range sp.Headers {
		req.Header.Set(k, v)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		req.Header.Set(extra[i], extra[i+1])
	}
	return req
}

// tryPutSigned is putSigned on a connection of its own (closed after), returning the
// status, or the error of a request that got no answer.
func tryPutSigned(t *testing.T, sp *chunkupv1.SignedPart, body []byte, extra ...string) (int, error) {
	t.Helper()
	req := signedRequest(t, sp, body, extra...)
	req.Close = true
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	res.Body.Close()
	return res.StatusCode, nil
}

// putSigned PUTs body to signed part sp's URL with the headers it was signed with, as a
// client does, and returns S3's answer (its body closed).
func putSigned(t *testing.T, sp *chunkupv1.SignedPart, body []byte, extra ...string) *http.Response {
	t.Helper()
	res, err := http.DefaultClient.Do(signedRequest(t, sp, body, extra...))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res
}
