// Package directdoor is chunkup's direct-to-S3 door: the HTTP contract of Uppy's
// Companion for S3 multipart uploads (what @uppy/aws-s3 calls when its endpoint is
// chunkup), over the upload core. The client puts each part straight into S3 with a URL
// the door signs; chunkup keeps the upload's record, tenant, key and expiry, checks what
// S3 holds against what the client reports, and completes the upload once, with its
// event, as it does an upload through any other door.
//
// Routes, under the mount point (/s3/ by default), as Companion's S3 controller has them:
//
//	POST   multipart                         {filename, type, metadata} → {uploadId, key, bucket}
//	GET    multipart/{uploadId}?key=K        → [{PartNumber, ETag, Size}], the parts S3 holds
//	GET    multipart/{uploadId}/batch?key=K&partNumbers=1,2 → {presignedUrls: {"1": url, …}}
//	GET    multipart/{uploadId}/{partNumber}?key=K           → {url, expires}
//	POST   multipart/{uploadId}/complete?key=K {parts: [{PartNumber, ETag}]} → {location, key, bucket}
//	DELETE multipart/{uploadId}?key=K        → {}
//	GET    params?filename=F&type=T&metadata[k]=v → {method: PUT, url, fields, headers}
//	PUT    put?filename=F&type=T…  the whole file → {location, key, bucket, uploadId}, ETag
//
// params and put are Uppy's single-request upload (single.go): the one PUT is to
// chunkup, not to S3, since the client reports nothing after it.
// uploadId is the chunkup upload id, key the object key chunkup chose. Errors are JSON
// {"error": message} with a status from the one table below.
package directdoor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/chunkup/chunkup/internal/fault"
	"github.com/chunkup/chunkup/internal/webcors"
	"github.com/chunkup/chunkup/s3store"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/upload"
)

// Core is the part of the upload core the door goes through.
type Core interface {
	CreateDirect(ctx context.Context, req *upload.CreateRequest, checksums bool) (*staging.Upload, error)
	SignParts(ctx context.Context, id string, parts []upload.PartToSign) ([]upload.SignedPart, error)
	DirectParts(ctx context.Context, id string) ([]s3store.ListedPart, error)
	CompleteDirect(ctx context.Context, id string, reported []upload.ReportedPart) (*staging.Upload, error)
	Abort(ctx context.Context, id, reason string) (*staging.Upload, error)
	Get(ctx context.Context, id string) (*staging.Upload, error)
}

var _ Core = (*upload.Core)(nil)

// Config configures the door.
type Config struct {
	// Prefix is the path the door is mounted at. Zero means "/s3/".
	Prefix string
	// Authenticate checks a request's credentials and returns the context to call the
	// core with (carrying the tenant). An error is answered 401. Nil lets every
	// request in.
	Authenticate func(r *http.Request) (context.Context, error)
	// ObjectURL is the URL of an object as clients reach the store (the completion's
	// location). Nil: the location is s3://bucket/key.
	ObjectURL func(bucket, key string) string
	// Origins says which web pages may call the door (the HTTP door's policy, so that a
	// page is allowed or refused by both alike). Nil: pages of the door's own origin
	// only (an IP address or localhost naming the server, not a DNS-rebinding name).
	Origins *webcors.Policy
	// Whole takes a single PUT's whole file (Uppy's single-request upload, GET params):
	// the HTTP door at its creation URL, which gets it as an IETF creation that ends
	// with its body, with the context Authenticate returned (so Whole must take it as
	// authenticated). Nil: params is 501.
	Whole http.Handler
	// PublicURL is scheme://host of the door as clients reach it, for the URL params
	// answers; "" takes the request's Host.
	PublicURL string
	Logger    *slog.Logger
}

// maxBody bounds a request body: a completion of 10,000 parts is about 700 KB.
const maxBody = 2 << 20

// Handler serves the door.
type Handler struct {
	core Core
	cfg  Config
	mux  *http.ServeMux
}

// New returns the door over core.
func New(core Core, cfg Config) *Handler {
	if cfg.Prefix == "" {
		cfg.Prefix = "/s3/"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Origins == nil {
		cfg.Origins = &webcors.Policy{}
	}
	h := &Handler{core: core, cfg: cfg, mux: http.NewServeMux()}
	p := cfg.Prefix
	h.mux.HandleFunc("POST "+p+"multipart", h.create)
	h.mux.HandleFunc("GET "+p+"multipart/{id}", h.parts)
	h.mux.HandleFunc("GET "+p+"multipart/{id}/batch", h.signBatch)
	h.mux.HandleFunc("GET "+p+"multipart/{id}/{n}", h.signOne)
	h.mux.HandleFunc("POST "+p+"multipart/{id}/complete", h.complete)
	h.mux.HandleFunc("DELETE "+p+"multipart/{id}", h.abort)
	h.mux.HandleFunc("GET "+p+"params", h.params)
	h.mux.HandleFunc("PUT "+p+"put", h.put)
	h.mux.HandleFunc("POST "+p+"put", h.put)
	h.mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, fault.Errorf(fault.NotFound, "no such route: %s %s (see the routes of Companion's S3 multipart contract in docs/direct-uploads.md)", r.Method, r.URL.Path))
	})
	return h
}

// ServeHTTP checks the request's origin, authenticates it and routes it.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.cfg.Origins.Apply(w, r) {
		h.fail(w, fault.Errorf(fault.Denied, "pages from %s may not use this server (configure the CORS origins)", clip(r.Header.Get("Origin"))))
		return
	}
	if r.Method == http.MethodOptions { // a preflight: Apply answered it
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if h.cfg.Authenticate != nil {
		ctx, err := h.cfg.Authenticate(r)
		if err != nil {
			if fault.KindOf(err) == fault.Internal { // a refusal without a kind of its own
				err = fault.Wrap(err, fault.Unauthenticated, err.Error())
			}
			h.fail(w, err)
			return
		}
		r = r.WithContext(ctx)
	}
	h.mux.ServeHTTP(w, r)
}

func (h *Handler) create(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Filename string         `json:"filename"`
		Type     *string        `json:"type"`
		Metadata map[string]any `json:"metadata"`
	}
	if err := decode(w, r, &body); err != nil {
		h.fail(w, err)
		return
	}
	if body.Type == nil {
		h.fail(w, fault.New(fault.Invalid, "type (the file's content type) must be a string"))
		return
	}
	md := map[string]string{}
	for k, v := range body.Metadata {
		switch v := v.(type) {
		case nil:
		case string:
			md[k] = v
		case float64, bool:
			md[k] = fmt.Sprint(v)
		default:
			h.fail(w, fault.Errorf(fault.Invalid, "metadata %q must be a string, number or boolean", k))
			return
		}
	}
	// Uppy sends its own bookkeeping as metadata; the name and type are the file's.
	delete(md, "name")
	delete(md, "type")
	delete(md, "relativePath")
	if len(md) == 0 {
		md = nil
	}
	// No size: the client chooses its parts' size (Uppy: 5 MiB or more), which a size
	// would fix to chunkup's chunk size.
	req := &upload.CreateRequest{Size: -1, Name: body.Filename, ContentType: *body.Type, Metadata: md}
	up, err := h.core.CreateDirect(r.Context(), req, false)
	if err != nil {
		h.fail(w, err)
		return
	}
	write(w, http.StatusOK, map[string]string{"uploadId": up.ID, "key": up.Key, "bucket": up.Bucket})
}

// upload reads the request's upload and checks its ?key= (when given) is the upload's.
func (h *Handler) upload(r *http.Request) (*staging.Upload, error) {
	up, err := h.core.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	if k := r.URL.Query().Get("key"); k != "" && k != up.Key {
		return nil, fault.Errorf(fault.Invalid, "key %q is not upload %s's key %q", k, up.ID, up.Key)
	}
	if !up.Direct {
		return nil, fault.Errorf(fault.Invalid, "upload %s is not a direct upload: use the door it was created through", up.ID)
	}
	return up, nil
}

func (h *Handler) parts(w http.ResponseWriter, r *http.Request) {
	up, err := h.upload(r)
	if err != nil {
		h.fail(w, err)
		return
	}
	held, err := h.core.DirectParts(r.Context(), up.ID)
	if err != nil {
		h.fail(w, err)
		return
	}
	type part struct {
		PartNumber     uint32 `json:"PartNumber"`
		ETag           string `json:"ETag"`
		Size           int64  `json:"Size"`
		ChecksumCRC32C string `json:"ChecksumCRC32C,omitempty"`
	}
	out := make([]part, len(held))
	for i, p := range held {
		out[i] = part{PartNumber: p.N, ETag: p.ETag, Size: p.Size, ChecksumCRC32C: p.CRC32C}
	}
	write(w, http.StatusOK, out)
}

func (h *Handler) signOne(w http.ResponseWriter, r *http.Request) {
	n, err := partNumber(r.PathValue("n"))
	if err != nil {
		h.fail(w, err)
		return
	}
	signed, err := h.sign(r, []uint32{n})
	if err != nil {
		h.fail(w, err)
		return
	}
	s := signed[0]
	write(w, http.StatusOK, map[string]any{"url": s.URL, "expires": expiresIn(s.Expires), "headers": headers(s.Headers)})
}

func (h *Handler) signBatch(w http.ResponseWriter, r *http.Request) {
	list := r.URL.Query().Get("partNumbers")
	if list == "" {
		h.fail(w, fault.New(fault.Invalid, `the part numbers must be a comma-separated query parameter, e.g. "?partNumbers=4,6,7,21"`))
		return
	}
	var ns []uint32
	for f := range strings.SplitSeq(list, ",") {
		n, err := partNumber(f)
		if err != nil {
			h.fail(w, err)
			return
		}
		ns = append(ns, n)
	}
	signed, err := h.sign(r, ns)
	if err != nil {
		h.fail(w, err)
		return
	}
	urls := make(map[string]string, len(signed))
	for _, s := range signed {
		urls[strconv.FormatUint(uint64(s.N), 10)] = s.URL
	}
	write(w, http.StatusOK, map[string]any{"presignedUrls": urls})
}

func (h *Handler) sign(r *http.Request, ns []uint32) ([]upload.SignedPart, error) {
	up, err := h.upload(r)
	if err != nil {
		return nil, err
	}
	parts := make([]upload.PartToSign, len(ns))
	for i, n := range ns {
		parts[i] = upload.PartToSign{N: n}
	}
	return h.core.SignParts(r.Context(), up.ID, parts)
}

func (h *Handler) complete(w http.ResponseWriter, r *http.Request) {
	up, err := h.upload(r)
	if err != nil {
		h.fail(w, err)
		return
	}
	var body struct {
		Parts []struct {
			PartNumber *uint32 `json:"PartNumber"`
			ETag       *string `json:"ETag"`
			Size       int64   `json:"Size"`
		} `json:"parts"`
	}
	if err := decode(w, r, &body); err != nil {
		h.fail(w, err)
		return
	}
	reported := make([]upload.ReportedPart, len(body.Parts))
	for i, p := range body.Parts {
		if p.PartNumber == nil || p.ETag == nil {
			h.fail(w, fault.New(fault.Invalid, "parts must be an array of {PartNumber, ETag} objects"))
			return
		}
		reported[i] = upload.ReportedPart{N: *p.PartNumber, ETag: *p.ETag, Size: p.Size}
	}
	done, err := h.core.CompleteDirect(r.Context(), up.ID, reported)
	if err != nil {
		h.fail(w, err)
		return
	}
	location := h.location(done.Bucket, done.Key)
	write(w, http.StatusOK, map[string]any{"location": location, "key": done.Key, "bucket": done.Bucket,
		"uploadId": done.ID, "status": string(done.Status)})
}

func (h *Handler) abort(w http.ResponseWriter, r *http.Request) {
	up, err := h.upload(r)
	if err != nil {
		h.fail(w, err)
		return
	}
	if _, err := h.core.Abort(r.Context(), up.ID, "aborted by client"); err != nil {
		h.fail(w, err)
		return
	}
	write(w, http.StatusOK, struct{}{})
}

func partNumber(s string) (uint32, error) {
	n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 32)
	if err != nil || n < 1 || n > upload.MaxParts {
		return 0, fault.Errorf(fault.Invalid, "the part number must be a number between 1 and %d, not %q", upload.MaxParts, s)
	}
	return uint32(n), nil
}

// expiresIn is Companion's expires: seconds from now.
func expiresIn(t time.Time) int64 { return max(0, int64(time.Until(t).Seconds())) }

// headers are the signed headers a client must send with a part (none for Uppy's plain
// PUT), as a JSON object: {} when there are none, so a client iterating it meets no
// null.
func headers(h http.Header) map[string]string {
	out := make(map[string]string, len(h))
	for k := range h {
		out[k] = h.Get(k)
	}
	return out
}

func decode(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	if err := dec.Decode(v); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return fault.Errorf(fault.TooLarge, "the request body is over %d bytes", maxBody)
		}
		return fault.Errorf(fault.Invalid, "the request body is not the JSON expected: %v", err)
	}
	return nil
}

func write(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// statuses maps each kind of error to the door's HTTP status: the door's one table.
var statuses = map[fault.Kind]int{
	fault.Invalid: http.StatusBadRequest, fault.NotFound: http.StatusNotFound,
	fault.OutOfRange: http.StatusBadRequest, fault.TooLarge: http.StatusRequestEntityTooLarge,
	fault.Exists: http.StatusConflict, fault.Conflict: http.StatusConflict, fault.Ended: http.StatusGone,
	fault.Busy: http.StatusServiceUnavailable, fault.Locked: http.StatusConflict,
	fault.DataLoss: http.StatusBadRequest, fault.Exhausted: http.StatusTooManyRequests,
	fault.Overloaded: http.StatusServiceUnavailable, fault.Unavailable: http.StatusServiceUnavailable,
	fault.Deadline: http.StatusServiceUnavailable, fault.Canceled: http.StatusServiceUnavailable,
	fault.Unauthenticated: http.StatusUnauthorized, fault.Denied: http.StatusForbidden,
	fault.Unsupported: http.StatusNotImplemented,
}

// StatusOf is the door's HTTP status for errors of kind k.
func StatusOf(k fault.Kind) int {
	if c, ok := statuses[k]; ok {
		return c
	}
	return http.StatusInternalServerError
}

func (h *Handler) fail(w http.ResponseWriter, err error) {
	k := fault.KindOf(err)
	code := StatusOf(k)
	msg := err.Error()
	if k == fault.Internal {
		h.cfg.Logger.Error("direct door", "err", err)
		msg = "internal error"
	}
	if code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests || k == fault.Locked {
		// The delay the error asks for, else a second.
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(fault.RetryAfter(err).Seconds())))))
	}
	// "error" as Companion answers; "message" too, which @uppy/companion-client shows.
	write(w, code, map[string]string{"error": msg, "message": msg})
}

// ObjectURL returns the path-style URL of bucket/key at endpoint (the store's address as
// clients reach it).
func ObjectURL(endpoint string) func(bucket, key string) string {
	return func(bucket, key string) string {
		return strings.TrimSuffix(endpoint, "/") + "/" + bucket + "/" + (&url.URL{Path: key}).EscapedPath()
	}
}

// clip shortens a request's value for a message.
func clip(s string) string {
	if len(s) > 100 {
		return s[:100] + "…"
	}
	return s
}
