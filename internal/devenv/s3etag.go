package devenv

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/johannesboyne/gofakes3"
)

// multipartETags makes the embedded S3 report a multipart object's ETag as S3 does: the
// MD5 of the parts' binary MD5s, in hex, then "-" and the number of parts. gofakes3
// answers CompleteMultipartUpload with that ETag (the one chunkup records), but HEAD,
// GET and listings compute the object's ETag from the MD5 of its bytes, which S3 never
// does for a multipart object.
//
// It wraps the backend (listings, and forgetting an ETag when its key is written or
// deleted) and the HTTP handler (recording the ETag CompleteMultipartUpload answers,
// and HEAD and GET, whose ETag header gofakes3 computes itself). Records live in files,
// so they survive a restart of `chunkup dev` as the objects do; each holds the MD5 the
// object had when it was completed, and applies only while the object still has it.
type multipartETags struct {
	gofakes3.Backend
	dir string
}

func newMultipartETags(b gofakes3.Backend, dir string) *multipartETags {
	return &multipartETags{Backend: b, dir: dir}
}

// recordPath is where the record of bucket/key lives: names of fixed length, whatever
// the key.
func (m *multipartETags) recordPath(bucket, key string) string {
	return filepath.Join(m.bucketDir(bucket), hashName(key))
}

func (m *multipartETags) bucketDir(bucket string) string {
	return filepath.Join(m.dir, hashName(bucket))
}

func hashName(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// load returns the record of bucket/key: the object's ETag by its bytes when it was
// completed ("MD5" in quotes) and its multipart ETag.
func (m *multipartETags) load(bucket, key string) (plain, etag string, ok bool) {
	b, err := os.ReadFile(m.recordPath(bucket, key))
	if err != nil {
		return "", "", false
	}
	md5Hex, etag, ok := strings.Cut(strings.TrimSpace(string(b)), " ")
	return `"` + md5Hex + `"`, etag, ok
}

// record remembers etag for bucket/key, with the MD5 of the object as it is now.
func (m *multipartETags) record(bucket, key, etag string) error {
	obj, err := m.Backend.HeadObject(bucket, key)
	if err != nil {
		return err
	}
	obj.Contents.Close()
	path := m.recordPath(bucket, key)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	_, err = tmp.WriteString(hex.EncodeToString(obj.Hash) + " " + etag + "\n")
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path) // readers see the old record or the new one
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// forget drops the record of bucket/key. A record left behind by a failure does no
// harm: its MD5 does not match the new object's, so it is never reported.
func (m *multipartETags) forget(bucket, key string) {
	_ = os.Remove(m.recordPath(bucket, key))
}

// PutObject also runs when a multipart upload completes; the handler records its ETag
// after it.
func (m *multipartETags) PutObject(bucket, key string, meta map[string]string, input io.Reader, size int64, conditions *gofakes3.PutConditions) (gofakes3.PutObjectResult, error) {
	r, err := m.Backend.PutObject(bucket, key, meta, input, size, conditions)
	if err == nil {
		m.forget(bucket, key)
	}
	return r, err
}

func (m *multipartETags) DeleteObject(bucket, key string) (gofakes3.ObjectDeleteResult, error) {
	r, err := m.Backend.DeleteObject(bucket, key)
	if err == nil {
		m.forget(bucket, key)
	}
	return r, err
}

func (m *multipartETags) DeleteMulti(bucket string, keys ...string) (gofakes3.MultiDeleteResult, error) {
	r, err := m.Backend.DeleteMulti(bucket, keys...)
	for _, k := range keys {
		m.forget(bucket, k)
	}
	return r, err
}

// CopyObject makes a new object: S3 gives a copy the MD5 of its bytes as ETag.
func (m *multipartETags) CopyObject(srcBucket, srcKey, dstBucket, dstKey string, meta map[string]string) (gofakes3.CopyObjectResult, error) {
	r, err := m.Backend.CopyObject(srcBucket, srcKey, dstBucket, dstKey, meta)
	if err == nil {
		m.forget(dstBucket, dstKey)
	}
	return r, err
}

func (m *multipartETags) ForceDeleteBucket(bucket string) error {
	err := m.Backend.ForceDeleteBucket(bucket)
	if err == nil {
		_ = os.RemoveAll(m.bucketDir(bucket))
	}
	return err
}

func (m *multipartETags) ListBucket(bucket string, prefix *gofakes3.Prefix, page gofakes3.ListBucketPage) (*gofakes3.ObjectList, error) {
	l, err := m.Backend.ListBucket(bucket, prefix, page)
	if err != nil {
		return l, err
	}
	for _, c := range l.Contents {
		if plain, etag, ok := m.load(bucket, c.Key); ok && c.ETag == plain {
			c.ETag = etag
		}
	}
	return l, nil
}

// handler serves S3 with next (gofakes3's handler, over m), recording the ETags of
// completed multipart uploads and reporting them on HEAD and GET.
func (m *multipartETags) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Path-style addressing, as gofakes3 routes it: /BUCKET/KEY.
		bucket, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		q := r.URL.Query()
		switch {
		case bucket == "" || key == "" || q.Has("versionId"):
			next.ServeHTTP(w, r)
		case r.Method == http.MethodPost && q.Has("uploadId"):
			m.complete(w, r, next, bucket, key)
		case r.Method == http.MethodGet || r.Method == http.MethodHead:
			m.read(w, r, next, bucket, key)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// complete records the ETag CompleteMultipartUpload answers before the client sees the
// answer, so a HEAD that follows it reports that ETag. It also honours If-None-Match: *
// (S3's conditional completion, which gofakes3 honours on PutObject only): an object at
// the key refuses the completion with 412 and leaves the multipart upload as it was.
func (m *multipartETags) complete(w http.ResponseWriter, r *http.Request, next http.Handler, bucket, key string) {
	if r.Header.Get("If-None-Match") == "*" {
		if _, err := m.Backend.HeadObject(bucket, key); err == nil {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusPreconditionFailed)
			_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?>`+
				`<Error><Code>PreconditionFailed</Code><Message>At least one of the pre-conditions you specified did not hold</Message>`+
				`<Condition>If-None-Match</Condition></Error>`)
			return
		}
	}
	rec := httptest.NewRecorder()
	next.ServeHTTP(rec, r)
	var result struct {
		ETag string `xml:"ETag"`
	}
	if rec.Code == http.StatusOK && xml.Unmarshal(rec.Body.Bytes(), &result) == nil && result.ETag != "" {
		_ = m.record(bucket, key, result.ETag) // without a record, the object reports its MD5 as before
	}
	maps.Copy(w.Header(), rec.Header())
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

// read serves HEAD and GET with the multipart ETag, and lets conditions name it.
func (m *multipartETags) read(w http.ResponseWriter, r *http.Request, next http.Handler, bucket, key string) {
	plain, etag, ok := m.load(bucket, key)
	if !ok {
		next.ServeHTTP(w, r)
		return
	}
	for _, h := range []string{"If-Match", "If-None-Match"} {
		if r.Header.Get(h) == etag {
			r.Header.Set(h, plain)
		}
	}
	ew := &etagWriter{ResponseWriter: w, plain: plain, etag: etag}
	next.ServeHTTP(ew, r)
	ew.fix()
}

// etagWriter replaces the ETag header plain with etag before the headers go out: on
// the first WriteHeader or Write, or after the handler returns (HEAD writes neither).
type etagWriter struct {
	http.ResponseWriter
	plain, etag string
	fixed       bool
}

func (e *etagWriter) fix() {
	if !e.fixed {
		e.fixed = true
		if h := e.Header(); h.Get("ETag") == e.plain {
			h.Set("ETag", e.etag)
		}
	}
}

func (e *etagWriter) WriteHeader(code int) {
	e.fix()
	e.ResponseWriter.WriteHeader(code)
}

func (e *etagWriter) Write(p []byte) (int, error) {
	e.fix()
	return e.ResponseWriter.Write(p)
}
