package devenv_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/chunkup/chunkup/app"

	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/internal/devenv"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/s3store"
)

func ctxT(t *testing.T) context.Context {
	t.Helper()
	return testenv.Context(t, 2*time.Minute)
}

// startEnv starts the dependencies on dir until the test ends.
func startEnv(t *testing.T, dir, redisMode string) *devenv.Env {
	t.Helper()
	env, err := devenv.Start(ctxT(t), devenv.Config{DataDir: dir, Redis: redisMode})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	return env
}

// serve runs every chunkup role on env until stop is called or the test ends, and
// returns a client.
func serve(t *testing.T, env *devenv.Env, bucket string) (c *client.Client, stop func()) {
	t.Helper()
	c, _, stop = serveDoors(t, env, bucket, "off")
	return c, stop
}

// serveDoors is serve with the HTTP door on httpAddr ("off": none), and its address.
func serveDoors(t *testing.T, env *devenv.Env, bucket, httpAddr string) (c *client.Client, httpURL string, stop func()) {
	t.Helper()
	a, err := app.New(ctxT(t), app.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: httpAddr, RedisURL: env.RedisURL, Bucket: bucket,
		S3: s3store.Config{Endpoint: env.S3Endpoint, AccessKey: "k", SecretKey: "s"}, KafkaBrokers: []string{env.KafkaAddr}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	c, err = client.Dial(a.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if httpAddr != "off" {
		httpURL = "http://" + a.HTTPAddr()
	}
	return c, httpURL, stop
}

func randomBytes(n int, seed byte) []byte {
	b := make([]byte, n)
	_, _ = rand.NewChaCha8([32]byte{seed}).Read(b)
	return b
}

// TestEmbeddedRedis runs chunkup on the in-process Redis and S3 store that `chunkup
// dev` falls back to when redis-server is not installed: the scripts and pub/sub all
// work there too, and a multipart upload lands on disk exactly.
func TestEmbeddedRedis(t *testing.T) {
	env := startEnv(t, t.TempDir(), devenv.RedisEmbedded)
	if env.RedisKind != "embedded" {
		t.Fatalf("redis kind %q", env.RedisKind)
	}
	c, _ := serve(t, env, "dev")
	data := randomBytes(17<<20+3, 4)
	up, err := c.Upload(ctxT(t), bytes.NewReader(data), client.WithName("x.bin"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(env.S3Dir, "buckets", "dev", up.Key))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("object on disk: %d bytes, %v; want %d exact bytes", len(got), err, len(data))
	}
}

// multipartETag is S3's ETag of an object uploaded in parts of partSize: the MD5 of
// the parts' binary MD5s, then the number of parts.
func multipartETag(data []byte, partSize int) string {
	var sums []byte
	n := 0
	for off := 0; off < len(data); off += partSize {
		sum := md5.Sum(data[off:min(off+partSize, len(data))])
		sums = append(sums, sum[:]...)
		n++
	}
	all := md5.Sum(sums)
	return fmt.Sprintf(`"%s-%d"`, hex.EncodeToString(all[:]), n)
}

// TestMultipartETag uploads a multipart object through chunkup to the embedded S3:
// HEAD, GET and a listing report the ETag chunkup reports, which is S3's multipart
// ETag, also after dev restarts; a condition may name it; an object written over the
// key again has the MD5 of its bytes.
func TestMultipartETag(t *testing.T) {
	dir := t.TempDir()
	env := startEnv(t, dir, devenv.RedisEmbedded)
	c, stop := serve(t, env, "dev")
	data := randomBytes(17<<20+3, 5)
	up, err := c.Upload(ctxT(t), bytes.NewReader(data), client.WithName("multi.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if want := multipartETag(data, int(up.ChunkSize)); up.Etag != want {
		t.Fatalf("chunkup reports ETag %s; S3's multipart ETag is %s", up.Etag, want)
	}
	s3c, err := s3store.NewClient(ctxT(t), s3store.Config{Endpoint: env.S3Endpoint, AccessKey: "k", SecretKey: "s"})
	if err != nil {
		t.Fatal(err)
	}
	in := func() (*string, *string) { return aws.String("dev"), aws.String(up.Key) }
	etags := map[string]func(*testing.T, *s3.Client) string{
		"HEAD": func(t *testing.T, s3c *s3.Client) string {
			b, k := in()
			out, err := s3c.HeadObject(ctxT(t), &s3.HeadObjectInput{Bucket: b, Key: k})
			if err != nil {
				t.Fatal(err)
			}
			return aws.ToString(out.ETag)
		},
		"GET": func(t *testing.T, s3c *s3.Client) string {
			b, k := in()
			out, err := s3c.GetObject(ctxT(t), &s3.GetObjectInput{Bucket: b, Key: k})
			if err != nil {
				t.Fatal(err)
			}
			defer out.Body.Close()
			if _, err := io.Copy(io.Discard, out.Body); err != nil {
				t.Fatal(err)
			}
			return aws.ToString(out.ETag)
		},
		"LIST": func(t *testing.T, s3c *s3.Client) string {
			b, k := in()
			out, err := s3c.ListObjectsV2(ctxT(t), &s3.ListObjectsV2Input{Bucket: b, Prefix: k})
			if err != nil || len(out.Contents) != 1 {
				t.Fatalf("list: %v, %v", out, err)
			}
			return aws.ToString(out.Contents[0].ETag)
		},
	}
	check := func(t *testing.T, s3c *s3.Client, want string) {
		t.Helper()
		for name, etag := range etags {
			if got := etag(t, s3c); got != want {
				t.Errorf("%s reports ETag %s, want %s", name, got, want)
			}
		}
	}
	check(t, s3c, up.Etag)

	t.Run("a condition names the multipart ETag", func(t *testing.T) {
		b, k := in()
		_, err := s3c.GetObject(ctxT(t), &s3.GetObjectInput{Bucket: b, Key: k, IfNoneMatch: aws.String(up.Etag)})
		var apiErr smithy.APIError
		if !errors.As(err, &apiErr) || !strings.Contains(apiErr.ErrorCode(), "NotModified") {
			t.Fatalf("GET If-None-Match the object's ETag: %v, want 304 Not Modified", err)
		}
	})

	t.Run("after a restart", func(t *testing.T) {
		stop()
		env.Close()
		again := startEnv(t, dir, devenv.RedisEmbedded)
		s3c, err := s3store.NewClient(ctxT(t), s3store.Config{Endpoint: again.S3Endpoint, AccessKey: "k", SecretKey: "s"})
		if err != nil {
			t.Fatal(err)
		}
		check(t, s3c, up.Etag)

		b, k := in()
		if _, err := s3c.PutObject(ctxT(t), &s3.PutObjectInput{Bucket: b, Key: k, Body: strings.NewReader("new")}); err != nil {
			t.Fatal(err)
		}
		sum := md5.Sum([]byte("new"))
		check(t, s3c, `"`+hex.EncodeToString(sum[:])+`"`)
	})
}

// TestDataDirLocked starts a second environment on a data directory in use: it fails
// at once, naming the process that holds it, and the first keeps working. Closing an
// environment frees its directory.
func TestDataDirLocked(t *testing.T) {
	dir := t.TempDir()
	env, err := devenv.Start(ctxT(t), devenv.Config{DataDir: dir, Redis: devenv.RedisEmbedded})
	if err != nil {
		t.Fatal(err)
	}
	env.Close()
	env.Close() // closing twice is harmless

	first := startEnv(t, dir, devenv.RedisEmbedded)
	_, err = devenv.Prepare(devenv.Config{DataDir: dir})
	var locked *devenv.LockedError
	if !errors.As(err, &locked) || locked.PID != os.Getpid() || !strings.Contains(err.Error(), fmt.Sprint(os.Getpid())) {
		t.Fatalf("second start: %v; want a LockedError naming pid %d", err, os.Getpid())
	}
	c, _ := serve(t, first, "dev")
	if _, err := c.Upload(ctxT(t), strings.NewReader("still works")); err != nil {
		t.Fatalf("the first environment after the refused second one: %v", err)
	}
}

// TestConditionalWrites: the embedded S3 refuses to replace an object for a write with
// If-None-Match: *, on PutObject and on CompleteMultipartUpload, as S3 does, so that
// `chunkup upload --if-absent` keeps its promise in dev too; s3store recognizes its
// own object on a retried write.
func TestConditionalWrites(t *testing.T) {
	env := startEnv(t, t.TempDir(), devenv.RedisEmbedded)
	s3c, err := s3store.NewClient(ctxT(t), s3store.Config{Endpoint: env.S3Endpoint, AccessKey: "k", SecretKey: "s"})
	if err != nil {
		t.Fatal(err)
	}
	st := s3store.New(s3c)
	other := []byte("someone else's")
	if _, err := s3c.PutObject(ctxT(t), &s3.PutObjectInput{Bucket: aws.String("dev"), Key: aws.String("taken"), Body: bytes.NewReader(other)}); err != nil {
		t.Fatal(err)
	}
	own := s3store.Owner{UploadID: "UP1", IfAbsent: true}
	data := randomBytes(5<<20, 9)
	sum := crc.Checksum(data)
	var exists *s3store.ExistsError
	if _, err := st.PutChunk(ctxT(t), "dev", "taken", "", own, data, sum); !errors.As(err, &exists) {
		t.Fatalf("conditional put over an object: %v, want ExistsError", err)
	}
	for _, key := range []string{"free", "taken"} {
		mpu, checksummed, err := st.CreateMultipart(ctxT(t), "dev", key, "", own)
		if err != nil {
			t.Fatal(err)
		}
		etag, err := st.UploadPart(ctxT(t), "dev", key, mpu, checksummed, 1, data, sum)
		if err != nil {
			t.Fatal(err)
		}
		_, err = st.Complete(ctxT(t), "dev", key, mpu, checksummed, []s3store.Part{{N: 1, ETag: etag, CRC32C: sum}}, int64(len(data)), sum, own)
		if key == "taken" != errors.As(err, &exists) {
			t.Fatalf("conditional completion at %s: %v", key, err)
		}
	}
	out, err := s3c.GetObject(ctxT(t), &s3.GetObjectInput{Bucket: aws.String("dev"), Key: aws.String("taken")})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Body.Close()
	if got, _ := io.ReadAll(out.Body); !bytes.Equal(got, other) {
		t.Fatalf("the object at the taken key was replaced: %d bytes", len(got))
	}
}

// waitForPart waits until upload id has a chunk stored in S3 as a part.
func waitForPart(t *testing.T, c *client.Client, id string) {
	t.Helper()
	ctx := ctxT(t)
	for {
		up, err := c.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if up.UploadedChunks >= 1 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no chunk reached S3: %v", up)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// failAfter yields r's first n bytes, then waits for stop and fails: a client
// interrupted mid-upload.
type failAfter struct {
	r    io.Reader
	n    int64
	stop <-chan struct{}
}

func (f *failAfter) Read(p []byte) (int, error) {
	if f.n <= 0 {
		<-f.stop
		return 0, errors.New("interrupted")
	}
	p = p[:min(int64(len(p)), f.n)]
	n, err := f.r.Read(p)
	f.n -= int64(n)
	return n, err
}

// TestUploadResumesAcrossRestart: an upload with a chunk written to the embedded S3 as
// a part, then dev stopped and started again on the same data directory: resuming the
// upload completes it, and the object is exact. (The embedded S3 kept multipart uploads
// in memory, so the restart failed every upload in progress with NoSuchUpload.)
func TestUploadResumesAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	env := startEnv(t, dir, devenv.RedisSpawn)
	c, stop := serve(t, env, "dev")
	data := randomBytes(20<<20+7, 9)
	ids, interrupt := make(chan string, 1), make(chan struct{})
	failed := make(chan error, 1)
	go func() {
		_, err := c.Upload(ctxT(t), &failAfter{r: bytes.NewReader(data), n: 9 << 20, stop: interrupt}, client.WithName("big.bin"),
			client.WithSize(int64(len(data))), client.WithOnStart(func(u *chunkupv1.Upload) { ids <- u.UploadId }))
		failed <- err
	}()
	id := <-ids
	waitForPart(t, c, id)
	close(interrupt)
	if err := <-failed; err == nil {
		t.Fatal("the interrupted upload succeeded")
	}
	stop()
	env.Close()

	env = startEnv(t, dir, devenv.RedisSpawn)
	c, _ = serve(t, env, "dev")
	up, err := c.Upload(ctxT(t), bytes.NewReader(data), client.WithResume(id))
	if err != nil {
		t.Fatalf("resume after dev restarted: %v", err)
	}
	var got bytes.Buffer
	if _, err := c.ReadObject(ctxT(t), &chunkupv1.ReadObjectRequest{UploadId: up.UploadId}, &got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("object has %d bytes, not the %d sent", got.Len(), len(data))
	}
}

// TestEmbeddedS3Multipart: the embedded S3 answers the multipart calls chunkup makes as
// S3 does: a listing of a bucket without uploads is empty (not NoSuchUpload), a listing
// finds an upload in progress after a restart with its parts, a part sent again replaces
// the earlier one, and an aborted or completed upload is NoSuchUpload.
func TestEmbeddedS3Multipart(t *testing.T) {
	dir := t.TempDir()
	env := startEnv(t, dir, devenv.RedisEmbedded)
	s3c := func(env *devenv.Env) *s3.Client {
		c, err := s3store.NewClient(ctxT(t), s3store.Config{Endpoint: env.S3Endpoint, AccessKey: "k", SecretKey: "s"})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ctx, c := ctxT(t), s3c(env)
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("bkt")}); err != nil {
		t.Fatal(err)
	}
	list, err := c.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String("bkt")})
	if err != nil || len(list.Uploads) != 0 {
		t.Fatalf("listing without uploads: %v, %v; want an empty listing", list, err)
	}
	mpu, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String("k")})
	if err != nil {
		t.Fatal(err)
	}
	one, two := randomBytes(5<<20, 1), randomBytes(1000, 2)
	put := func(c *s3.Client, n int32, b []byte) string {
		t.Helper()
		out, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("bkt"), Key: aws.String("k"), UploadId: mpu.UploadId,
			PartNumber: aws.Int32(n), Body: bytes.NewReader(b)})
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToString(out.ETag)
	}
	put(c, 1, randomBytes(5<<20, 3)) // replaced below
	e1 := put(c, 1, one)

	env.Close()
	env = startEnv(t, dir, devenv.RedisEmbedded)
	c = s3c(env)
	list, err = c.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String("bkt")})
	if err != nil || len(list.Uploads) != 1 || aws.ToString(list.Uploads[0].UploadId) != aws.ToString(mpu.UploadId) {
		t.Fatalf("listing after a restart: %+v, %v; want the upload in progress", list, err)
	}
	e2 := put(c, 2, two)
	parts, err := c.ListParts(ctx, &s3.ListPartsInput{Bucket: aws.String("bkt"), Key: aws.String("k"), UploadId: mpu.UploadId})
	if err != nil || len(parts.Parts) != 2 || aws.ToString(parts.Parts[0].ETag) != e1 || aws.ToInt64(parts.Parts[0].Size) != int64(len(one)) {
		t.Fatalf("parts after a restart: %+v, %v", parts, err)
	}
	complete := func() error {
		_, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String("k"), UploadId: mpu.UploadId,
			MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{
				{PartNumber: aws.Int32(1), ETag: aws.String(e1)}, {PartNumber: aws.Int32(2), ETag: aws.String(e2)}}}})
		return err
	}
	if err := complete(); err != nil {
		t.Fatal(err)
	}
	obj, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bkt"), Key: aws.String("k")})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(obj.Body)
	obj.Body.Close()
	if !bytes.Equal(got, append(slices.Clone(one), two...)) {
		t.Fatalf("object has %d bytes, not the two parts' %d", len(got), len(one)+len(two))
	}
	if err := complete(); !s3store.NoSuchUpload(err) {
		t.Fatalf("completing again: %v; want NoSuchUpload", err)
	}
	_, err = c.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String("k"), UploadId: mpu.UploadId})
	if !s3store.NoSuchUpload(err) {
		t.Fatalf("aborting a completed upload: %v; want NoSuchUpload", err)
	}
}

// TestTusResumesAcrossRestart: a tus upload with a chunk written to the embedded S3, dev
// stopped and started again on the same data directory: HEAD gives the offset the
// server kept, a PATCH from there completes the upload, and the object is exact.
func TestTusResumesAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	env := startEnv(t, dir, devenv.RedisSpawn)
	c, base, stop := serveDoors(t, env, "dev", "127.0.0.1:0")
	data := randomBytes(12<<20+5, 11)
	tus := func(method, url string, h map[string]string, body []byte) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(ctxT(t), method, url, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Tus-Resumable", "1.0.0")
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	created := tus("POST", base+"/files/", map[string]string{"Upload-Length": fmt.Sprint(len(data))}, nil)
	if created.StatusCode != http.StatusCreated {
		t.Fatalf("create: %s", created.Status)
	}
	loc := created.Header.Get("Location")
	id := path.Base(loc)
	const first = 9 << 20 // a chunk (8 MiB) and part of the next
	if r := tus("PATCH", base+loc, map[string]string{"Upload-Offset": "0", "Content-Type": "application/offset+octet-stream"}, data[:first]); r.StatusCode != http.StatusNoContent {
		t.Fatalf("first PATCH: %s", r.Status)
	}
	waitForPart(t, c, id)
	stop()
	env.Close()

	env = startEnv(t, dir, devenv.RedisSpawn)
	c, base, _ = serveDoors(t, env, "dev", "127.0.0.1:0")
	head := tus("HEAD", base+loc, nil, nil)
	if head.StatusCode != http.StatusOK || head.Header.Get("Upload-Offset") != fmt.Sprint(first) {
		t.Fatalf("HEAD after dev restarted: %s, offset %q; want 200 and %d", head.Status, head.Header.Get("Upload-Offset"), first)
	}
	if r := tus("PATCH", base+loc, map[string]string{"Upload-Offset": fmt.Sprint(first), "Content-Type": "application/offset+octet-stream"}, data[first:]); r.StatusCode != http.StatusNoContent {
		t.Fatalf("PATCH after dev restarted: %s", r.Status)
	}
	up, err := c.Wait(ctxT(t), id)
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if _, err := c.ReadObject(ctxT(t), &chunkupv1.ReadObjectRequest{UploadId: up.UploadId}, &got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("object has %d bytes, not the %d sent", got.Len(), len(data))
	}
}
