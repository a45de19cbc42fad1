package directdoor

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/chunkup/chunkup/httpdoor"
	"github.com/chunkup/chunkup/internal/fault"
	"github.com/chunkup/chunkup/upload"
)

// Uppy's single-request upload (@uppy/aws-s3 at its defaults, for files of 100 MiB or
// less): GET params answers with where to PUT the whole file, and after that PUT the
// client never calls back. A PUT straight into S3 would leave chunkup without the
// upload's end, so the PUT is to the door itself, which hands its body to the HTTP door
// as an IETF creation that ends with its body (Config.Whole): the upload is then recorded,
// checked, completed, announced and read like any upload, under the same budget and
// limits, and its bytes pass through chunkup (multipart uploads keep them off it).

// wholeMaxMessage bounds what is kept of the HTTP door's answer (an error's text).
const wholeMaxMessage = 4 << 10

// params answers GET params?filename=&type=&metadata[k]=v with {method, url, fields,
// headers}: a PUT of the whole file to the door, with the caller's own credentials
// (the PUT is authenticated as every request is).
func (h *Handler) params(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Whole == nil {
		h.fail(w, fault.New(fault.Unsupported, "single-request uploads (GET s3/params) need the HTTP door, which is off on this server: use multipart uploads (in @uppy/aws-s3, shouldUseMultipart: true)"))
		return
	}
	q := r.URL.Query()
	if !q.Has("filename") || !q.Has("type") {
		h.fail(w, fault.New(fault.Invalid, "filename and type (the file's name and content type) must be query parameters"))
		return
	}
	out := url.Values{"filename": {q.Get("filename")}, "type": {q.Get("type")}}
	for k, vs := range q {
		if strings.HasPrefix(k, "metadata[") && strings.HasSuffix(k, "]") && len(vs) > 0 {
			out.Set(k, vs[0])
		}
	}
	// What the upload's creation would refuse is refused here, before the client sends
	// the file.
	if _, err := wholeMetadata(out); err != nil {
		h.fail(w, err)
		return
	}
	headers := map[string]string{"Content-Type": cmp.Or(q.Get("type"), "application/octet-stream")}
	for _, k := range []string{"Authorization", "X-Api-Key"} {
		if v := r.Header.Get(k); v != "" {
			headers[k] = v
		}
	}
	// fields are for clients that POST a form whatever the method (Uppy 6), which
	// want a key among them; the object's key is chunkup's all the same.
	write(w, http.StatusOK, map[string]any{"method": http.MethodPut, "url": h.origin(r) + h.cfg.Prefix + "put?" + out.Encode(),
		"fields": map[string]string{"key": q.Get("filename")}, "headers": headers})
}

// put takes the whole file of a single-request upload, as a creation with all its
// bytes through the HTTP door (the IETF draft's, interop 6, whose creation may end with
// the body: a form's file has no length of its own), and answers as S3 answers a
// PutObject (200 with an ETag, which Uppy requires) plus where the object is. Two
// forms: PUT put?filename=&type=&metadata[k]=v with the file as its body (Uppy 5's
// @uppy/aws-s3, curl -T), and POST of a multipart/form-data form whose "file" field is
// the file, after any others (S3's POST policy upload, which Uppy 6's @uppy/aws-s3
// sends whatever method params names; its other fields are not S3's to chunkup: the
// key is chunkup's).
func (h *Handler) put(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Whole == nil {
		h.fail(w, fault.New(fault.Unsupported, "single-request uploads need the HTTP door, which is off on this server: use multipart uploads"))
		return
	}
	q := r.URL.Query()
	raw := &wholeBody{r: r.Body}
	r.Body = raw
	body, length := io.Reader(raw), r.ContentLength
	var form *formBody
	if r.Method == http.MethodPost {
		file, name, ctype, err := formFile(r)
		if err != nil {
			h.fail(w, err)
			return
		}
		form = file
		body, length = file, -1
		if !q.Has("filename") && name != "" {
			q.Set("filename", name)
		}
		if ctype != "" {
			q.Set("type", ctype)
		}
	} else if length < 0 {
		msg := "send the file's length in Content-Length (a single PUT is one whole file of known size)"
		write(w, http.StatusLengthRequired, map[string]string{"error": msg, "message": msg})
		return
	}
	md, err := wholeMetadata(q)
	if err != nil {
		h.fail(w, err)
		return
	}
	// net/http cancels a request's context when its client half-closes the connection,
	// as some do once they have sent the whole body, and it may do so before the
	// handler has read the body's last bytes from its buffer: the upload is the
	// server's to finish and to answer for, so only a body that fails before its end
	// (its client gone) cancels the work done for it.
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()
	raw.failed = cancel
	in := r.Clone(ctx)
	in.Method = http.MethodPost
	in.URL = &url.URL{Path: "/"} // Whole knows its creation URL
	in.RequestURI = ""
	in.Body, in.ContentLength = io.NopCloser(body), length
	for k := range in.Header {
		if lk := strings.ToLower(k); strings.HasPrefix(lk, "upload-") || strings.HasPrefix(lk, "tus-") || strings.HasPrefix(lk, "content-") ||
			lk == "x-http-method-override" || lk == "repr-digest" {
			in.Header.Del(k)
		}
	}
	// The request's correlation id (the client's, or the one the door made) is the
	// upload's too.
	if id := upload.CorrelationIDFrom(r.Context()); id != "" {
		in.Header.Set("X-Correlation-Id", id)
		w.Header().Set("X-Correlation-Id", id)
	}
	in.Header.Set("Upload-Draft-Interop-Version", "6")
	in.Header.Set("Upload-Complete", "?1")
	in.Header.Set("Upload-Metadata", md)
	in.Header.Set("Content-Type", "application/octet-stream")
	if length >= 0 {
		in.Header.Set("Content-Length", strconv.FormatInt(length, 10))
	}
	rec := &recorder{w: w, hd: http.Header{}}
	h.cfg.Whole.ServeHTTP(rec, in)
	// The door's write deadlines were for answers that never reached the connection (a
	// 104 the recorder dropped, set as the body began): this answer gets its own.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(wholeAnswerTimeout))

	var id string // of the upload the request made, if it made one
	if loc := rec.hd.Get("Location"); loc != "" {
		id = path.Base(loc)
	}
	if rec.code == http.StatusCreated && rec.hd.Get("Upload-Complete") == "?1" && id != "" {
		gctx, gcancel := context.WithTimeout(ctx, 30*time.Second)
		up, err := h.core.Get(gctx, id)
		gcancel()
		if err != nil {
			// The file is stored: a failure here must not make the client send it
			// again (a second upload, a second object).
			h.cfg.Logger.Warn("direct door: reading a single PUT's upload", "upload", id, "err", err)
			w.Header().Set("ETag", `"`+id+`"`)
			write(w, http.StatusOK, map[string]any{"uploadId": id})
			return
		}
		etag := up.ETag
		if etag == "" { // not written yet: the upload's id stands for it
			etag = `"` + up.ID + `"`
		}
		status := httpdoor.Shown(httpdoor.State(up.Status), true) // every byte is in
		location := h.location(up.Bucket, up.Key)
		w.Header().Set("ETag", etag)
		w.Header().Set("Location", location)
		write(w, http.StatusOK, map[string]any{"location": location, "key": up.Key, "bucket": up.Bucket,
			"uploadId": up.ID, "status": string(status)})
		return
	}
	// The PUT failed. An upload it created holds part of the file at most, and a
	// single PUT cannot be resumed: abort it, so that nothing is left behind.
	msg := strings.TrimSpace(rec.body.String())
	var problem struct {
		Detail string `json:"detail"`
	}
	if json.Unmarshal(rec.body.Bytes(), &problem) == nil && problem.Detail != "" {
		msg = problem.Detail
	}
	if i := strings.Index(msg, ". This request created the upload at"); i >= 0 {
		msg = msg[:i]
	}
	msg = strings.ReplaceAll(msg, httpdoor.ResumeAdvice, "") // it is aborted below
	code := rec.code
	switch {
	case form != nil && form.err != nil:
		// The form, not the connection, is at fault: a retry would fail the same way.
		msg, code = form.err.Error(), http.StatusBadRequest
	case form != nil && raw.ended.Load() && code >= 500:
		msg, code = "the form ends before its file does (no closing boundary after the \"file\" field): send the whole multipart/form-data form", http.StatusBadRequest
	}
	if id != "" {
		// The client may be gone, and its request's context with it.
		actx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 30*time.Second)
		_, err := h.core.Abort(actx, id, "its single PUT did not deliver the whole file")
		cancel()
		if err != nil {
			h.cfg.Logger.Warn("direct door: aborting a failed single PUT's upload", "upload", id, "err", err)
			msg += fmt.Sprintf("; upload %s was made and could not be aborted (%v): see its state before you send the file again", id, err)
		} else if code == http.StatusBadRequest {
			msg += "; nothing was stored"
		} else {
			msg += "; nothing was stored: send the whole file again"
		}
	}
	if code < 400 {
		code = http.StatusInternalServerError
	}
	if ra := rec.hd.Get("Retry-After"); ra != "" && (code >= 500 || code == http.StatusTooManyRequests) {
		w.Header().Set("Retry-After", ra)
	}
	if msg == "" {
		msg = http.StatusText(code)
	}
	write(w, code, map[string]string{"error": msg, "message": msg})
}

// maxMetadataKey is the HTTP door's bound on a metadata key.
const maxMetadataKey = 256

// maxFormFields bounds the form fields before the file, and formFieldMax each one.
const maxFormFields, formFieldMax = 64, 8 << 10

// formFile finds the file of a multipart/form-data POST: the "file" field, after at
// most maxFormFields others (read and dropped but its Content-Type), and returns it to
// read with its file name and content type (the Content-Type field's, as S3 takes it,
// else the file part's).
func formFile(r *http.Request) (*formBody, string, string, error) {
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, "", "", fault.Errorf(fault.Invalid, "a POST of a single-request upload must be a multipart/form-data form with the file in its \"file\" field: %v", err)
	}
	ctype := ""
	for range maxFormFields + 1 {
		p, err := mr.NextPart()
		if err != nil {
			return nil, "", "", fault.Errorf(fault.Invalid, "the form has no \"file\" field (the file, after the other fields): %v", err)
		}
		if p.FormName() == "file" {
			return &formBody{mr: mr, file: p}, p.FileName(), cmp.Or(ctype, p.Header.Get("Content-Type")), nil
		}
		v, err := io.ReadAll(io.LimitReader(p, formFieldMax+1))
		if err != nil || len(v) > formFieldMax {
			return nil, "", "", fault.Errorf(fault.Invalid, "the form's field %q is over %d bytes or cut short", clip(p.FormName()), formFieldMax)
		}
		if strings.EqualFold(p.FormName(), "Content-Type") {
			ctype = string(v)
		}
	}
	return nil, "", "", fault.Errorf(fault.Invalid, "the form has more than %d fields before its \"file\" field", maxFormFields)
}

// formBody is a form's file: it ends where the form does, which must be the file
// field's end or fields that S3 too would ignore (any after the file), never a second
// file.
type formBody struct {
	mr   *multipart.Reader
	file *multipart.Part
	err  error // the form's fault, once found
}

func (f *formBody) Read(p []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	n, err := f.file.Read(p)
	if err != io.EOF {
		return n, err
	}
	for range maxFormFields + 1 {
		next, err := f.mr.NextPart()
		switch {
		case err == io.EOF:
			return n, io.EOF
		case err != nil:
			f.err = fault.Errorf(fault.Invalid, "the form after its \"file\" field is not multipart/form-data (%v): send the file as the form's last field", err)
			return n, f.err
		case next.FormName() == "file":
			f.err = fault.New(fault.Invalid, "the form has a second \"file\" field: a single-request upload is one file, so send one form for each")
			return n, f.err
		}
	}
	f.err = fault.Errorf(fault.Invalid, "the form has more than %d fields after its \"file\" field", maxFormFields)
	return n, f.err
}

// wholeBody is a single PUT's request body, which says whether it was read to its end,
// and calls failed (when set) if it fails before.
type wholeBody struct {
	r      io.ReadCloser
	ended  atomic.Bool
	failed func()
}

func (b *wholeBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	switch {
	case err == io.EOF:
		b.ended.Store(true)
	case err != nil && b.failed != nil:
		b.failed()
	}
	return n, err
}

func (b *wholeBody) Close() error { return b.r.Close() }

// wholeAnswerTimeout bounds the writing of a single PUT's answer.
const wholeAnswerTimeout = 30 * time.Second

// wholeMetadata is the tus Upload-Metadata of a single PUT's query: its filename, type
// and metadata[k] (Uppy's own name, type and relativePath left out, as in a
// multipart creation), checked as the upload's creation checks them, so that a refusal
// speaks of the query rather than of a header the client never sent.
func wholeMetadata(q url.Values) (string, error) {
	pairs := map[string]string{"filename": q.Get("filename"), "filetype": cmp.Or(q.Get("type"), "application/octet-stream")}
	for k, vs := range q {
		name, ok := strings.CutPrefix(k, "metadata[")
		if !ok || !strings.HasSuffix(name, "]") || len(vs) == 0 {
			continue
		}
		name = strings.TrimSuffix(name, "]")
		switch name {
		case "name", "type", "relativePath", "filename", "filetype":
			continue
		}
		if name == "" || len(name) > maxMetadataKey || strings.ContainsAny(name, " ,\t") || !printable(name) {
			return "", fault.Errorf(fault.Invalid, "metadata key %q must be non-empty printable ASCII of at most %d bytes, without spaces or commas", clip(name), maxMetadataKey)
		}
		pairs[name] = vs[0]
	}
	// filename and filetype are entries too (the HTTP door reads them there): the
	// caller's own count is what the caller can act on.
	if own := len(pairs) - 2; own > upload.MaxMetadataPairs-2 {
		return "", fault.Errorf(fault.Invalid, "metadata has %d entries; at most %d are allowed in a single-request upload, whose filename and type are metadata entries too (a multipart upload takes %d)",
			own, upload.MaxMetadataPairs-2, upload.MaxMetadataPairs)
	}
	req := upload.CreateRequest{Size: -1, Name: pairs["filename"], ContentType: pairs["filetype"], Metadata: pairs}
	if err := req.Validate(); err != nil {
		return "", fault.Wrap(err, fault.Invalid, "the query's filename, type or metadata: "+err.Error())
	}
	keys := make([]string, 0, len(pairs))
	for k := range pairs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + " " + base64.StdEncoding.EncodeToString([]byte(pairs[k])))
	}
	return b.String(), nil
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// origin is the door's scheme://host as the client reached it.
func (h *Handler) origin(r *http.Request) string {
	if h.cfg.PublicURL != "" {
		return strings.TrimSuffix(h.cfg.PublicURL, "/")
	}
	// Behind a proxy that ends TLS the request came over plain HTTP: the proxy's word
	// decides (a wrong word only misleads the caller who sent it), else an https page
	// would be refused an http URL as mixed content.
	scheme := "http"
	fwd := strings.ToLower(r.Header.Get("Forwarded"))
	if r.TLS != nil || strings.EqualFold(strings.TrimSpace(strings.Split(r.Header.Get("X-Forwarded-Proto"), ",")[0]), "https") ||
		strings.Contains(fwd, "proto=https") || strings.Contains(fwd, `proto="https"`) {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

func (h *Handler) location(bucket, key string) string {
	if h.cfg.ObjectURL != nil {
		return h.cfg.ObjectURL(bucket, key)
	}
	return "s3://" + bucket + "/" + key
}

// recorder keeps the HTTP door's answer for put to translate: its status (1xx dropped),
// headers and the start of its body. The door may set the connection's deadlines
// through it, as on any response, and nothing else: no Unwrap, so that no flush or
// hijack reaches the connection behind it.
type recorder struct {
	w    http.ResponseWriter
	hd   http.Header
	code int
	body bytes.Buffer
}

func (c *recorder) Header() http.Header { return c.hd }

func (c *recorder) WriteHeader(code int) {
	if code >= 200 && c.code == 0 {
		c.code = code
	}
}

func (c *recorder) Write(b []byte) (int, error) {
	if c.code == 0 {
		c.code = http.StatusOK
	}
	if room := wholeMaxMessage - c.body.Len(); room > 0 {
		c.body.Write(b[:min(len(b), room)])
	}
	return len(b), nil
}

func (c *recorder) SetReadDeadline(t time.Time) error {
	return http.NewResponseController(c.w).SetReadDeadline(t)
}

// SetWriteDeadline does nothing: what is written to the recorder does not reach the
// connection (put sets the deadline of what does).
func (c *recorder) SetWriteDeadline(time.Time) error { return nil }
