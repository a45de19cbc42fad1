package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/testdocs"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/ocr"
	"github.com/chunkup/chunkup/s3store"
	"github.com/chunkup/chunkup/test/harness"
)

// pageRow is one file's row on the upload page, as page-upload.cjs prints it.
type pageRow struct{ Name, State, Detail, ID, Key string }

// uploadOnPage chooses files on the upload page at pageURL in headless Chromium, with
// protocol chosen in the page's selector (empty: the page's default), and returns the
// rows once every one says COMPLETED.
func uploadOnPage(t *testing.T, pageURL, protocol string, files map[string][]byte, env ...string) []pageRow {
	t.Helper()
	chromium, err := testenv.ChromiumBinary()
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for name, b := range files {
		paths = append(paths, writeFile(t, name, b))
	}
	out := runNode(t, "page-upload.cjs", append([]string{"PAGE_URL=" + pageURL, "CHROMIUM=" + chromium,
		"PROFILE_DIR=" + t.TempDir(), "PROTOCOL=" + protocol}, env...), paths, false)
	var rows []pageRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("page-upload.cjs printed %q: %v", out, err)
	}
	if len(rows) != len(files) {
		t.Fatalf("rows %+v, want one for each of %d files", rows, len(files))
	}
	for _, row := range rows {
		if _, ok := files[row.Name]; !ok || row.State != "COMPLETED" || row.ID == "" || row.Key != "uploads/"+row.ID+"/"+row.Name {
			t.Fatalf("row %+v", row)
		}
	}
	return rows
}

// pageServer starts a server with its upload page, Kafka and OCR, and a client of it.
func pageServer(t *testing.T) (*env, *testenv.Kafka, *running, *client.Client) {
	t.Helper()
	e := newEnv(t)
	k := testenv.StartKafka(t, topic)
	cfg := withOCR(withKafka(e.config(), k))
	cfg.HTTPDoor.Page = true
	a := e.start(t, cfg)
	return e, k, a, e.client(t, a)
}

// waitOneCompletedEach waits until Kafka has exactly one UploadCompleted for each of
// the uploads ids (by file name).
func waitOneCompletedEach(t *testing.T, k *testenv.Kafka, ids map[string]string) {
	t.Helper()
	waitFor(t, "one UploadCompleted for each upload on Kafka", func() bool {
		evs := allEvents(t, k)
		for _, id := range ids {
			if len(eventsFor(evs, id, "chunkup.v1.UploadCompleted")) != 1 {
				return false
			}
		}
		return true
	})
}

// twoColourPNG re-encodes a PNG of black text on white in two colours, which keeps
// the text readable and makes the file small (about 1 KB for two short lines).
func twoColourPNG(t *testing.T, b []byte) []byte {
	t.Helper()
	src, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	p := image.NewPaletted(src.Bounds(), color.Palette{color.White, color.Black})
	draw.Draw(p, p.Bounds(), src, src.Bounds().Min, draw.Src)
	var out bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&out, p); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// TestDirectUppyInBrowser (issue #28): Uppy 5's @uppy/aws-s3 in headless Chromium, on
// the upload page of a chunkup serve (the page at chunkup's own origin, so chunkup's
// CORS lets it call the direct door; its endpoint is chunkup's HTTP address), uploads
// a 20 MB file in 5 MiB parts (four) and a PNG of about 1 KB (one part: the page makes every
// file multipart) whose parts the browser PUTs straight to MinIO with the URLs chunkup
// signs (MinIO answers CORS for any origin and exposes ETag by default). Both objects
// are exact in MinIO, each has exactly one UploadCompleted on Kafka, OCR reads the
// PNG's words, and no multipart upload is left open.
func TestDirectUppyInBrowser(t *testing.T) {
	e, k, a, c := pageServer(t)

	scan := twoColourPNG(t, testdocs.PNG("INVOICE 2828", "UPPY"))
	if len(scan) > 1100 {
		t.Fatalf("the PNG has %d bytes, want about 1 KB", len(scan))
	}
	files := map[string][]byte{"video.bin": randomBytes(20_000_000, 2828), "scan.png": scan}
	rows := uploadOnPage(t, "http://"+a.HTTPAddr()+"/", "direct", files)
	ids := map[string]string{}
	for _, row := range rows {
		up := waitCompleted(t, c, row.ID)
		if !up.Direct {
			t.Fatalf("upload %v: not a direct upload", up)
		}
		e.requireExact(t, up, files[row.Name])
		// S3's ETag of a multipart object ends in its number of parts: 20 MB in
		// 5 MiB parts is four; the PNG one.
		if parts := map[string]string{"video.bin": "-4", "scan.png": "-1"}[row.Name]; !strings.HasSuffix(strings.Trim(up.Etag, `"`), parts) {
			t.Fatalf("%s: ETag %s, want %s parts", row.Name, up.Etag, parts)
		}
		ids[row.Name] = row.ID
	}
	waitOneCompletedEach(t, k, ids)
	d := waitDecision(t, documents(t, a.GRPCAddr()), ids["scan.png"])
	if d.Ocr == nil {
		t.Fatalf("document %v: no OCR", d)
	}
	var res struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(e.object(t, d.Ocr.ResultKey), &res); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"INVOICE", "2828", "UPPY"} {
		if !strings.Contains(res.Text, w) {
			t.Errorf("recognized text %q lacks %q", res.Text, w)
		}
	}
	if d.Ocr.ResultKey != "uploads/"+ids["scan.png"]+"/scan.png"+ocr.ResultSuffix {
		t.Errorf("OCR result key %s", d.Ocr.ResultKey)
	}
	if n := e.openMultipartUploads(t); n != 0 {
		t.Fatalf("%d multipart uploads left open in MinIO", n)
	}
}

// TestUppyS3DefaultsInBrowser (issue #28): @uppy/aws-s3 with only its endpoint set (so
// at its defaults, as most pages use it) sends files of 100 MiB or less as one request
// after GET s3/params: Uppy 5 (the bundle the upload page vendors) a PUT of the file,
// Uppy 6 (the latest, uppy 6.0.1's bundle, companionEndpoint) a POST of a form. A 1 KB
// PNG and a 20 MB file go that way from headless Chromium: both objects exact, one
// UploadCompleted each on Kafka, the PNG read by OCR. Their bytes pass through chunkup
// (a single PUT straight to S3 would never tell chunkup that it ended), so the uploads
// are not direct ones. Uppy 6 with shouldUseMultipart: true puts the 20 MB file
// straight into S3 instead, as a direct upload.
func TestUppyS3DefaultsInBrowser(t *testing.T) {
	chromium, err := testenv.ChromiumBinary()
	if err != nil {
		t.Fatal(err)
	}
	uppy6 := filepath.Join(testenv.NodeModules(t), "uppy", "dist", "uppy.min.js")
	for _, tc := range []struct {
		name   string
		bundle string // "" for the page's own Uppy
		direct bool   // shouldUseMultipart: true
	}{
		{"uppy 5, PUT", "", false},
		{"uppy 6, form POST", uppy6, false},
		{"uppy 6, multipart", uppy6, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, k, a, c := pageServer(t)

			scan := twoColourPNG(t, testdocs.PNG("RECEIPT 4141", "SINGLE"))
			files := map[string][]byte{"big.bin": randomBytes(20_000_000, 4141), "scan.png": scan}
			var paths []string
			for name, b := range files {
				paths = append(paths, writeFile(t, name, b))
			}
			out := runNode(t, "uppy-s3.cjs", []string{"PAGE_URL=http://" + a.HTTPAddr() + "/", "CHROMIUM=" + chromium,
				"PROFILE_DIR=" + t.TempDir(), "ENDPOINT=/", "UPPY_BUNDLE=" + tc.bundle, "MULTIPART=" + map[bool]string{true: "1"}[tc.direct]}, paths, false)
			var rows []struct {
				Name string `json:"name"`
			}
			if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != len(files) {
				t.Fatalf("uppy-s3.cjs printed %q: %v", out, err)
			}
			// The objects' keys are uploads/ID/name (and OCR's results beside them); the
			// uploads complete just after Uppy's requests were answered.
			ids := map[string]string{}
			waitFor(t, "an object for each file", func() bool {
				objs, err := e.s3.ListObjectsV2(ctx(t), &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String("uploads/")})
				if err != nil {
					t.Fatal(err)
				}
				clear(ids)
				for _, o := range objs.Contents {
					parts := strings.Split(aws.ToString(o.Key), "/")
					if name := parts[len(parts)-1]; !strings.HasSuffix(name, ocr.ResultSuffix) {
						if _, dup := ids[name]; dup {
							t.Fatalf("two objects of %s", name)
						}
						ids[name] = parts[1]
					}
				}
				return len(ids) >= len(files)
			})
			for name, id := range ids {
				up := waitCompleted(t, c, id)
				// @uppy/aws-s3 6.1.0 (uppy 6.0.1's) sends a file of 5 MiB or less as one
				// request whatever shouldUseMultipart says.
				direct := tc.direct && len(files[name]) > 5<<20
				if _, ok := files[name]; !ok || up.Direct != direct || up.Name != name || up.Size != int64(len(files[name])) {
					t.Fatalf("upload %v", up)
				}
				e.requireExact(t, up, files[name])
			}
			waitOneCompletedEach(t, k, ids)
			d := waitDecision(t, documents(t, a.GRPCAddr()), ids["scan.png"])
			if d.Ocr == nil {
				t.Fatalf("document %v: no OCR", d)
			}
		})
	}
}

// TestDevPageDirect: chunkup dev's upload page, "direct to S3" chosen, in headless
// Chromium, offline: Uppy's AwsS3 PUTs the parts to dev's embedded S3 with the URLs the
// direct door signs (the embedded S3 answers the preflights and exposes ETag), and
// each row reaches COMPLETED with the object exact in the embedded S3: one of three
// parts and one of a single small part.
func TestDevPageDirect(t *testing.T) {
	bin := harness.Binary(t)
	port := func() string { return fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)) }
	httpAddr, s3Addr := port(), port()
	dev := testenv.StartProcess(t, bin, []string{"dev", "--data", t.TempDir(), "--grpc-addr", port(), "--http-addr", httpAddr,
		"--s3-addr", s3Addr, "--kafka-addr", port(), "--redis", "spawn", "--ocr=false"}, nil)
	testenv.WaitReady(t, dev, httpAddr)

	files := map[string][]byte{"notes.txt": []byte("straight to the embedded S3\n"), "movie.bin": randomBytes(11*MiB+777, 3131)}
	rows := uploadOnPage(t, "http://"+httpAddr+"/", "direct", files)
	s3c, err := s3store.NewClient(ctx(t), s3store.Config{Endpoint: "http://" + s3Addr, AccessKey: "chunkup-dev", SecretKey: "chunkup-dev"})
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range rows {
		if got := harness.Object(t, ctx(t), s3c, "chunkup", row.Key); !bytes.Equal(got, files[row.Name]) {
			t.Fatalf("%s: the object has %d bytes, differing from the %d of the file", row.Name, len(got), len(files[row.Name]))
		}
	}
}

// TestUppyTusInBrowser (issue #25's client matrix): Uppy's Tus plugin (@uppy/tus 5.1.1,
// in the vendored bundle) in headless Chromium uploads a file of over 20 MB with
// chunkSize 5,000,000 (PATCHes that end inside chunkup's 5 MiB chunks) to a server's
// tus endpoint, from the server's own page: the object is exact, GetUpload says
// COMPLETED with the file's size, and it is the one upload Uppy made (no other upload
// in progress, no other object).
func TestUppyTusInBrowser(t *testing.T) {
	chromium, err := testenv.ChromiumBinary()
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	cfg := e.config()
	cfg.HTTPDoor.Page = true
	a := e.start(t, cfg)
	c := e.client(t, a)

	data := randomBytes(21_000_123, 2525)
	const chunkSize = 5 * 1000 * 1000
	out := runNode(t, "uppy-tus.cjs", []string{"PAGE_URL=http://" + a.HTTPAddr() + "/", "CHROMIUM=" + chromium,
		"PROFILE_DIR=" + t.TempDir(), "ENDPOINT=/files/", "CHUNK_SIZE=" + strconv.Itoa(chunkSize)}, []string{writeFile(t, "uppy-tus.bin", data)}, false)
	var res struct {
		UploadURL  string
		Successful int
		Failed     []string
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.UploadURL == "" {
		t.Fatalf("uppy-tus.cjs printed %q: %v", out, err)
	}
	up := waitCompleted(t, c, idOf(res.UploadURL))
	if up.Size != int64(len(data)) || up.Name != "uppy-tus.bin" {
		t.Fatalf("upload %v", up)
	}
	e.requireExact(t, up, data)
	open, err := c.API().ListUploads(ctx(t), &chunkupv1.ListUploadsRequest{PageSize: 10})
	if err != nil || len(open.Uploads) != 0 {
		t.Fatalf("uploads in progress: %v %v, want none", open, err)
	}
	objs, err := e.s3.ListObjectsV2(ctx(t), &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String("uploads/")})
	if err != nil || len(objs.Contents) != 1 || aws.ToString(objs.Contents[0].Key) != up.Key {
		t.Fatalf("objects %v %v, want only %s", objs, err, up.Key)
	}
}

// TestPageIETFDraft13: the upload page's "IETF draft -13 (interop 10)" choice, its own
// own client of the draft (XHR, for upload progress), in headless Chromium against a server: a 20 MB
// file (a creation with the first 16 MiB, then the completing append) and a small one
// (one creation with Upload-Complete: ?1); every request the page sent said interop
// version 10, and both objects are exact. Then an append that fails as a dropped
// connection does is resumed: HEAD, and the rest on the same upload.
func TestPageIETFDraft13(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.HTTPDoor.Page = true
	a := e.start(t, cfg)
	c := e.client(t, a)

	files := map[string][]byte{"draft.bin": randomBytes(20_000_000, 1313), "note.txt": []byte("a note in one request\n")}
	sent := filepath.Join(t.TempDir(), "interop")
	rows := uploadOnPage(t, "http://"+a.HTTPAddr()+"/", "ietf-draft-13", files, "INTEROP_FILE="+sent)
	for _, row := range rows {
		e.requireExact(t, waitCompleted(t, c, row.ID), files[row.Name])
	}
	b, err := os.ReadFile(sent)
	if err != nil {
		t.Fatal(err)
	}
	var posts, patches int
	for _, line := range strings.Fields(strings.ReplaceAll(strings.TrimSpace(string(b)), " ", "=")) {
		method, v, _ := strings.Cut(line, "=")
		if v != "10" {
			t.Fatalf("the page sent %s with interop version %s, want 10:\n%s", method, v, b)
		}
		switch method {
		case "POST":
			posts++
		case "PATCH":
			patches++
		}
	}
	if posts != 2 || patches != 1 {
		t.Fatalf("the page sent %d creations and %d appends, want 2 and 1:\n%s", posts, patches, b)
	}

	// An append that fails as a dropped connection does: the page asks where the
	// upload is (HEAD) and sends the rest to the same upload.
	t.Run("resume", func(t *testing.T) {
		data := randomBytes(40_000_000, 1314)
		sent := filepath.Join(t.TempDir(), "interop")
		rows := uploadOnPage(t, "http://"+a.HTTPAddr()+"/", "ietf-draft-13", map[string][]byte{"again.bin": data}, "INTEROP_FILE="+sent, "ABORT_FIRST=PATCH")
		e.requireExact(t, waitCompleted(t, c, rows[0].ID), data)
		b, err := os.ReadFile(sent)
		if err != nil {
			t.Fatal(err)
		}
		// A creation with 16 MiB, the aborted append of the next 16 MiB, HEAD, then
		// the two appends from the offset HEAD gave.
		if got := strings.Fields(strings.ReplaceAll(strings.TrimSpace(string(b)), " 10", "")); !slices.Equal(got, []string{"POST", "PATCH", "HEAD", "PATCH", "PATCH"}) {
			t.Fatalf("the page sent %v (each at interop 10?):\n%s", got, b)
		}
	})
}
