package devenv

import (
	"cmp"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/johannesboyne/gofakes3"
)

// diskMultipart keeps the embedded S3's multipart uploads and their parts in files, so
// that what a part upload acknowledged survives a restart of `chunkup dev` as objects
// do. gofakes3's own multipart support (used when a backend does not implement
// gofakes3.MultipartBackend) holds parts in memory: a restart lost every upload in
// progress, and chunkup failed them on the next part ("NoSuchUpload").
//
// An upload is a directory named by its id holding upload.json (bucket, key, metadata,
// when it began) and one file per part named part.N.MD5 (the MD5 of the part's bytes is
// its ETag): a part is written to a temporary file and renamed into place, so a part is
// there whole with its ETag or not at all. A part uploaded again replaces the earlier
// one, as in S3.
type diskMultipart struct {
	dir     string
	storage gofakes3.Backend
	now     func() time.Time

	// mu orders the operations that look at or change which uploads and parts exist;
	// part bytes are written outside it.
	mu sync.Mutex
}

var _ gofakes3.MultipartBackend = (*diskMultipart)(nil)

func newDiskMultipart(dir string, storage gofakes3.Backend, now func() time.Time) (*diskMultipart, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("embedded s3: %w", err)
	}
	return &diskMultipart{dir: dir, storage: storage, now: now}, nil
}

// mpu is what upload.json holds.
type mpu struct {
	Bucket    string            `json:"bucket"`
	Object    string            `json:"object"`
	Meta      map[string]string `json:"meta"`
	Initiated time.Time         `json:"initiated"`

	id gofakes3.UploadID
}

// part is one part file.
type part struct {
	n    int
	md5  string
	path string
	size int64
	mod  time.Time
}

func (p part) etag() string { return `"` + p.md5 + `"` }

func (d *diskMultipart) CreateMultipartUpload(bucket, object string, meta map[string]string) (gofakes3.UploadID, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	id := gofakes3.UploadID(hex.EncodeToString(b))
	up := mpu{Bucket: bucket, Object: object, Meta: meta, Initiated: d.now().UTC()}
	js, err := json.Marshal(up)
	if err != nil {
		return "", err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	tmp := filepath.Join(d.dir, "."+string(id))
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(tmp, "upload.json"), js, 0o644); err != nil {
		_ = os.RemoveAll(tmp)
		return "", err
	}
	if err := os.Rename(tmp, filepath.Join(d.dir, string(id))); err != nil {
		_ = os.RemoveAll(tmp)
		return "", err
	}
	return id, nil
}

// load reads upload id of bucket/object; NoSuchUpload when there is none (or it is
// another key's, as S3 answers).
func (d *diskMultipart) load(bucket, object string, id gofakes3.UploadID) (mpu, error) {
	if !validID(id) {
		return mpu{}, gofakes3.ErrNoSuchUpload
	}
	up, err := d.read(id)
	if err != nil {
		return mpu{}, err
	}
	if up.Bucket != bucket || up.Object != object {
		return mpu{}, gofakes3.ErrNoSuchUpload
	}
	return up, nil
}

func (d *diskMultipart) read(id gofakes3.UploadID) (mpu, error) {
	b, err := os.ReadFile(filepath.Join(d.dir, string(id), "upload.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return mpu{}, gofakes3.ErrNoSuchUpload
	}
	if err != nil {
		return mpu{}, err
	}
	var up mpu
	if err := json.Unmarshal(b, &up); err != nil {
		return mpu{}, fmt.Errorf("embedded s3: multipart upload %s: %w", id, err)
	}
	up.id = id
	return up, nil
}

// validID: ids are the hex this backend makes, so an id from a request never names a
// path outside the directory.
func validID(id gofakes3.UploadID) bool {
	if len(id) != 32 {
		return false
	}
	_, err := hex.DecodeString(string(id))
	return err == nil
}

// parts lists the parts of upload id by number (the newest file of a number wins, should
// a replaced one be left by a crash between rename and removal).
func (d *diskMultipart) parts(id gofakes3.UploadID) (map[int]part, error) {
	dir := filepath.Join(d.dir, string(id))
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := map[int]part{}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), "part.")
		if !ok {
			continue
		}
		num, sum, ok := strings.Cut(rest, ".")
		n, err := strconv.Atoi(num)
		if !ok || err != nil || len(sum) != 32 {
			continue // a temporary file
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		p := part{n: n, md5: sum, path: filepath.Join(dir, e.Name()), size: info.Size(), mod: info.ModTime()}
		if old, seen := out[n]; !seen || p.mod.After(old.mod) {
			out[n] = p
		}
	}
	return out, nil
}

func (d *diskMultipart) UploadPart(bucket, object string, id gofakes3.UploadID, partNumber int, contentLength int64, input io.Reader) (string, error) {
	if partNumber < 1 || partNumber > gofakes3.MaxUploadPartNumber {
		return "", gofakes3.ErrInvalidPart
	}
	if _, err := d.load(bucket, object, id); err != nil {
		return "", err
	}
	dir := filepath.Join(d.dir, string(id))
	f, err := os.CreateTemp(dir, fmt.Sprintf("tmp.%d.", partNumber))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", gofakes3.ErrNoSuchUpload
		}
		return "", err
	}
	defer os.Remove(f.Name()) // no-op once renamed
	h := md5.New()
	n, err := io.Copy(io.MultiWriter(f, h), input)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	if n != contentLength {
		return "", gofakes3.ErrIncompleteBody
	}
	sum := hex.EncodeToString(h.Sum(nil))

	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.load(bucket, object, id); err != nil {
		return "", err // aborted or completed meanwhile
	}
	old, err := d.parts(id)
	if err != nil {
		return "", gofakes3.ErrNoSuchUpload
	}
	final := filepath.Join(dir, fmt.Sprintf("part.%d.%s", partNumber, sum))
	if err := os.Rename(f.Name(), final); err != nil {
		return "", err
	}
	if p, ok := old[partNumber]; ok && p.path != final {
		_ = os.Remove(p.path)
	}
	return `"` + sum + `"`, nil
}

func (d *diskMultipart) ListParts(bucket, object string, id gofakes3.UploadID, marker int, limit int64) (*gofakes3.ListMultipartUploadPartsResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.load(bucket, object, id); err != nil {
		return nil, err
	}
	ps, err := d.parts(id)
	if err != nil {
		return nil, gofakes3.ErrNoSuchUpload
	}
	nums := slices.Sorted(maps.Keys(ps))
	res := &gofakes3.ListMultipartUploadPartsResult{Bucket: bucket, Key: object, UploadID: id, MaxParts: limit,
		PartNumberMarker: marker, StorageClass: "STANDARD"}
	for _, n := range nums {
		if n <= marker {
			continue
		}
		if limit > 0 && int64(len(res.Parts)) >= limit {
			res.IsTruncated = true
			break
		}
		p := ps[n]
		res.Parts = append(res.Parts, gofakes3.ListMultipartUploadPartItem{PartNumber: n, ETag: p.etag(), Size: p.size,
			LastModified: gofakes3.NewContentTime(p.mod)})
		res.NextPartNumberMarker = n
	}
	return res, nil
}

// ListMultipartUploads lists the uploads in progress of bucket, sorted by key and then
// by when they began, as S3 does; a bucket without any has an empty listing (S3 never
// answers a listing with NoSuchUpload).
func (d *diskMultipart) ListMultipartUploads(bucket string, marker *gofakes3.UploadListMarker, prefix gofakes3.Prefix, limit int64) (*gofakes3.ListMultipartUploadsResult, error) {
	d.mu.Lock()
	entries, err := os.ReadDir(d.dir)
	var ups []mpu
	for _, e := range entries {
		id := gofakes3.UploadID(e.Name())
		if !e.IsDir() || !validID(id) {
			continue
		}
		if up, rerr := d.read(id); rerr == nil && up.Bucket == bucket {
			ups = append(ups, up)
		}
	}
	d.mu.Unlock()
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ups, func(a, b mpu) int {
		return cmp.Or(strings.Compare(a.Object, b.Object), a.Initiated.Compare(b.Initiated), strings.Compare(string(a.id), string(b.id)))
	})
	res := &gofakes3.ListMultipartUploadsResult{Bucket: bucket, Delimiter: prefix.Delimiter, Prefix: prefix.Prefix, MaxUploads: limit}
	if marker != nil {
		res.KeyMarker, res.UploadIDMarker = marker.Object, marker.UploadID
	}
	seen := map[string]bool{}
	var match gofakes3.PrefixMatch
	for i, up := range ups {
		if marker != nil && marker.Object != "" {
			if up.Object < marker.Object {
				continue
			}
			if up.Object == marker.Object {
				// Without an upload id marker, the marker's key is past; with one, its
				// uploads after that id are not.
				if marker.UploadID == "" || !after(ups[:i], up.Object, marker.UploadID) {
					continue
				}
			}
		}
		if !prefix.Match(up.Object, &match) {
			continue
		}
		if int64(len(res.Uploads)+len(res.CommonPrefixes)) >= limit {
			res.IsTruncated = true
			break
		}
		if match.CommonPrefix {
			if !seen[match.MatchedPart] {
				seen[match.MatchedPart] = true
				res.CommonPrefixes = append(res.CommonPrefixes, match.AsCommonPrefix())
			}
			continue
		}
		res.Uploads = append(res.Uploads, gofakes3.ListMultipartUploadItem{Key: up.Object, UploadID: up.id,
			StorageClass: "STANDARD", Initiated: gofakes3.NewContentTime(up.Initiated)})
		res.NextKeyMarker, res.NextUploadIDMarker = up.Object, up.id
	}
	if !res.IsTruncated {
		res.NextKeyMarker, res.NextUploadIDMarker = "", ""
	}
	return res, nil
}

// after reports whether the upload id marker is among the earlier uploads of key.
func after(earlier []mpu, key string, id gofakes3.UploadID) bool {
	for _, up := range earlier {
		if up.Object == key && up.id == id {
			return true
		}
	}
	return false
}

func (d *diskMultipart) AbortMultipartUpload(bucket, object string, id gofakes3.UploadID) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.load(bucket, object, id); err != nil {
		return err
	}
	return d.remove(id)
}

// remove deletes upload id's directory. It is first renamed to a name that is no id,
// under mu, so that the upload is gone at once for every call, and a part being written
// into it meanwhile cannot make the removal fail half-way (its rename into place then
// fails, and its request with it).
func (d *diskMultipart) remove(id gofakes3.UploadID) error {
	gone := filepath.Join(d.dir, ".gone-"+string(id))
	if err := os.Rename(filepath.Join(d.dir, string(id)), gone); err != nil {
		return err
	}
	return os.RemoveAll(gone)
}

func (d *diskMultipart) CompleteMultipartUpload(bucket, object string, id gofakes3.UploadID, in *gofakes3.CompleteMultipartUploadRequest) (gofakes3.VersionID, string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	up, err := d.load(bucket, object, id)
	if err != nil {
		return "", "", err
	}
	ps, err := d.parts(id)
	if err != nil {
		return "", "", gofakes3.ErrNoSuchUpload
	}
	if len(in.Parts) == 0 {
		return "", "", gofakes3.ErrorMessage(gofakes3.ErrMalformedXML, "the completion names no parts")
	}
	var (
		size    int64
		readers []io.Reader
		whole   = md5.New()
		prev    = 0
	)
	for _, want := range in.Parts {
		if want.PartNumber <= prev {
			return "", "", gofakes3.ErrInvalidPartOrder
		}
		prev = want.PartNumber
		p, ok := ps[want.PartNumber]
		if !ok || strings.Trim(want.ETag, `"`) != p.md5 {
			return "", "", gofakes3.ErrorMessagef(gofakes3.ErrInvalidPart, "part %d is not there with ETag %s", want.PartNumber, want.ETag)
		}
		raw, _ := hex.DecodeString(p.md5)
		whole.Write(raw)
		f, err := os.Open(p.path)
		if err != nil {
			return "", "", err
		}
		defer f.Close()
		readers = append(readers, f)
		size += p.size
	}
	res, err := d.storage.PutObject(up.Bucket, up.Object, up.Meta, io.MultiReader(readers...), size, nil)
	if err != nil {
		return "", "", err
	}
	if err := d.remove(id); err != nil {
		return "", "", err
	}
	return res.VersionID, fmt.Sprintf(`"%s-%d"`, hex.EncodeToString(whole.Sum(nil)), len(in.Parts)), nil
}

// emptyParts takes a multipart upload's empty part (a PUT of partNumber with
// Content-Length: 0), which gofakes3 refuses as MissingContentLength, although S3
// takes a last part of any size: an empty file sent as a multipart upload (Uppy, the
// SDK's direct uploads) has one. Every other request goes to next.
func emptyParts(parts *diskMultipart, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if r.Method != http.MethodPut || r.ContentLength != 0 || !q.Has("partNumber") || !q.Has("uploadId") {
			next.ServeHTTP(w, r)
			return
		}
		bucket, object, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		n, err := strconv.Atoi(q.Get("partNumber"))
		if !ok || object == "" || err != nil {
			next.ServeHTTP(w, r) // gofakes3's own answer to a request it cannot take
			return
		}
		etag, err := parts.UploadPart(bucket, object, gofakes3.UploadID(q.Get("uploadId")), n, 0, http.NoBody)
		if err != nil {
			var code gofakes3.ErrorCode
			if !errors.As(err, &code) {
				code = gofakes3.ErrInternal
			}
			http.Error(w, string(code), code.Status())
			return
		}
		w.Header().Set("ETag", etag)
		w.WriteHeader(http.StatusOK)
	})
}
