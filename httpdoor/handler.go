// Package httpdoor is chunkup's HTTP front door: resumable uploads over tus 1.0.0 and
// the IETF "Resumable Uploads for HTTP" draft (draft-ietf-httpbis-resumable-upload,
// interop versions 5 to 12: drafts -03 to -15, each answered with the semantics of its
// version where they differ, 11 and 12 as 10; see interopDrafts), on the same URLs and onto the same
// uploads as gRPC, so that browsers (tus-js-client, Uppy), mobile tus clients (iOS
// URLSession) and curl can upload to chunkup.
//
// The door is a protocol layer only. It cuts each request body into the upload's
// chunks as the bytes arrive and hands each whole chunk to the Core, the narrow
// interface it declares for chunkup's upload store; everything after staging (S3
// parts, completion, events, OCR) is chunkup's as for any upload. The offset it
// reports is always durable: the contiguous staged chunks and the upload's tail, the
// bytes of the next chunk a request delivered without filling it (Core.SaveTail), so a
// client resumes from there on any replica, whatever the size of its requests.
// docs/http-uploads.md describes the protocols as implemented.
package httpdoor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/internal/fault"
	"github.com/chunkup/chunkup/internal/webcors"
)

const (
	tusVersion = "1.0.0"
	// tusExtensions are the tus extensions the door implements.
	tusExtensions = "creation,creation-with-upload,creation-defer-length,termination,expiration,checksum,concatenation"

	ctTusPatch  = "application/offset+octet-stream"
	ctIETFPatch = "application/partial-upload"
)

// minInterop and maxInterop bound the draft interop versions the door speaks (the
// "Upload-Draft-Interop-Version" a request names; the 104 names it back). 5 and 6 are
// what tus-js-client sends (its ietf-draft-03 and ietf-draft-05 protocols), 8 what iOS
// 26.2's URLSession sends, 9 and 10 the revisions since (-12, -13). 11 and 12 are the
// only values -14 and -15 can have (one interop version per revision; neither text was
// readable here): accepted, so that a client of the current draft is not refused, and
// answered as 10, since every change through -15 that the draft's readers list is -12's
// (docs/http-uploads.md). Versions 3 and 4 used Upload-Incomplete and are refused
// (412), as is anything above maxInterop: no published revision has it.
const minInterop, maxInterop = 5, 12

// newestReadInterop is the newest interop version whose draft text was read: the one
// the door suggests to a request that names none.
const newestReadInterop = 10

// interopDrafts names the draft revisions of each interop version the door speaks
// ("The current interop version is N" in the revision's "Draft Version Identification"
// appendix; docs/http-uploads.md says how each was established).
var interopDrafts = [...]string{
	5:  "-03",
	6:  "-04, -05",
	7:  "-06 to -08",
	8:  "-09 to -11",
	9:  "-12",
	10: "-13 (and -14, -15 unless they raised it)",
	11: "-14 or -15, if either raised it",
	12: "-15, if -14 and -15 both raised it",
}

// Where the interop versions differ, the first version with the later behaviour.
const (
	// interopPartialUpload: an append must have Content-Type: application/partial-upload
	// (draft -04). Before, any content type.
	interopPartialUpload = 6
	// interopCompleteRequired: an append must carry Upload-Complete (draft -06). Before,
	// an append without it is the last one.
	interopCompleteRequired = 7
	// interopTargetSemantics: draft -12 redefined Upload-Complete in responses. ?1 says
	// that the target resource's semantics apply (the response is the target's, to the
	// request that completed the upload), ?0 that the resumable upload protocol's do: so
	// every error of the protocol (409 mismatching offset, 400 inconsistent length, 410,
	// 415, …) carries ?0 even when the upload is complete, where before it said whether
	// the upload was complete. The same revision made GET on the upload resource an
	// offset retrieval like HEAD (the door answers it as HEAD: 204, 410 once the upload
	// ended) and dropped the completed-upload problem type.
	interopTargetSemantics = 9
)

// interopList says which interop versions the door speaks, for messages.
func interopList() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d to %d (", minInterop, maxInterop)
	for v := minInterop; v <= maxInterop; v++ {
		if v > minInterop {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%d: drafts %s", v, interopDrafts[v])
	}
	b.WriteString(")")
	return b.String()
}

type protocol int

const (
	protoTus protocol = iota + 1
	protoIETF
)

// Handler serves the door under Config.Prefix. Mount it at the prefix (it strips the
// prefix itself): mux.Handle(cfg.Prefix, h).
type Handler struct {
	core Core
	cfg  Config
	bufs *buffers
	// base is the prefix as an absolute path or URL, for Location.
	base string
	// origins is the CORS policy: the configured origins, and the door's own.
	origins *webcors.Policy
	// drain is closed by Drain; bodies holds the request bodies being read, which Drain
	// interrupts.
	drain     chan struct{}
	drainOnce sync.Once
	bodiesMu  sync.Mutex
	bodies    map[*bodyReader]struct{}
}

// New returns a door over core.
func New(core Core, cfg Config) (*Handler, error) {
	if core == nil {
		return nil, errors.New("httpdoor: a Core is required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Handler{
		core: core, cfg: cfg,
		bufs:    newBuffers(cfg.BufferBudget, cfg.TenantBufferBudget),
		base:    strings.TrimSuffix(cfg.PublicURL, "/") + cfg.Prefix,
		origins: cfg.CORS.Policy(cfg.PublicURL, CORSAllowMethods, corsAllowHeaders, corsExposeHeaders),
		drain:   make(chan struct{}),
		bodies:  map[*bodyReader]struct{}{},
	}, nil
}

// Drain prepares for shutdown: every request body being read stops at once (the chunk
// being staged, if any, is staged to the end; the partial chunk after it is kept as the tail)
// and is answered 503 with Retry-After, so that its client resumes, on another replica
// if this one is gone; bodies that start afterwards stop at once the same way. Call it
// before http.Server.Shutdown, which then finds the requests ending instead of waiting
// for uploads that could take hours.
func (h *Handler) Drain() {
	h.drainOnce.Do(func() {
		close(h.drain)
		h.bodiesMu.Lock()
		defer h.bodiesMu.Unlock()
		for b := range h.bodies {
			b.interrupt()
		}
	})
}

// tenant names the tenant of a request's context (Config.Tenant), "" without one.
func (h *Handler) tenant(ctx context.Context) string {
	if h.cfg.Tenant == nil || ctx == nil {
		return ""
	}
	return h.cfg.Tenant(ctx)
}

func (h *Handler) draining() bool {
	select {
	case <-h.drain:
		return true
	default:
		return false
	}
}

// request is what the door knows about one request as it goes, for its response.
type request struct {
	proto   protocol
	interop int
	// method is the request's method, after X-HTTP-Method-Override.
	method string
	id     string
	// ctx is the context the core is called with (Config.Authenticate's), nil until the
	// request is authenticated; fail uses it to look up the offset an error should carry.
	ctx context.Context
	// offset is the upload's durable offset, once read (offsetKnown).
	offset      int64
	offsetKnown bool
	// read: the upload was looked up (successfully or not), so fail need not try again.
	read bool
	// complete: the upload has all its bytes.
	complete bool
	// upload is the upload as read, for Upload-Limit (nil before it is read).
	upload *Upload
	// created is the Location of the upload this (creation) request made, once it
	// exists: every response to the request carries it, errors included, so that the
	// client can resume or delete the upload instead of leaving it behind.
	created string
}

func (rq *request) setOffset(o int64) { rq.offset, rq.offsetKnown = o, true }

// targetSemantics: the request speaks an interop version (9, draft -12, and later) in
// which Upload-Complete in a response says whose semantics apply rather than whether
// the upload is complete (interopTargetSemantics).
func (rq *request) targetSemantics() bool {
	return rq.proto == protoIETF && rq.interop >= interopTargetSemantics
}

// ServeHTTP routes a request to its protocol and method.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("X-Content-Type-Options", "nosniff")
	rq := &request{proto: protoTus, method: r.Method}

	// Clients that cannot send PATCH or DELETE (old proxies, some browsers) send POST
	// with X-HTTP-Method-Override, as tus allows. Like tusd, only a POST is
	// overridden: nothing else can carry a PATCH body.
	method := r.Method
	if o := r.Header.Get("X-HTTP-Method-Override"); o != "" && method == http.MethodPost {
		switch o = strings.ToUpper(o); o {
		case http.MethodPatch, http.MethodDelete, http.MethodHead, http.MethodGet:
			method = o
		default:
			h.fail(w, r, rq, fmt.Errorf("%w: X-HTTP-Method-Override %q: only PATCH, DELETE, HEAD and GET can be overridden", ErrInvalid, clip(o)))
			return
		}
	}

	rq.method = method
	id, ok := h.route(r.URL.Path)
	if !ok {
		h.fail(w, r, rq, fmt.Errorf("%w: no upload at this URL", ErrNotFound))
		return
	}
	rq.id = id
	if !h.cors(w, r) {
		h.fail(w, r, rq, fmt.Errorf("%w: pages from %s may not use this server (configure the CORS origins)", errOrigin, clip(r.Header.Get("Origin"))))
		return
	}
	if method == http.MethodOptions {
		h.options(w, r, id)
		return
	}

	p, interop, err := detect(r, method)
	rq.proto, rq.interop = p, interop
	if p == protoTus {
		hd.Set("Tus-Resumable", tusVersion)
	}
	if err != nil {
		h.fail(w, r, rq, err)
		return
	}
	ctx := r.Context()
	// A request another door of this process authenticated already (Authenticated)
	// comes with Authenticate's context.
	if h.cfg.Authenticate != nil && ctx.Value(authenticatedKey{}) == nil {
		actx, err := h.cfg.Authenticate(r)
		if fault.Has(err, fault.Exhausted) {
			h.fail(w, r, rq, err)
			return
		}
		if err != nil {
			// Authenticate's message says what is wrong and what this server accepts,
			// once; the door adds nothing (it cannot know what is configured).
			h.fail(w, r, rq, &authError{err: err})
			return
		}
		ctx = actx
	}
	rq.ctx = ctx

	if id == "" {
		if method != http.MethodPost {
			h.fail(w, r, rq, &methodError{Method: method, Allow: "POST, OPTIONS"})
			return
		}
		h.create(ctx, w, r, rq)
		return
	}
	switch method {
	case http.MethodHead, http.MethodGet:
		// Since draft -12, an IETF GET is an offset retrieval like HEAD; otherwise GET
		// shows the upload's state as JSON.
		h.head(ctx, w, r, rq, method == http.MethodGet && !rq.targetSemantics())
	case http.MethodPatch:
		h.patch(ctx, w, r, rq)
	case http.MethodDelete:
		h.delete(ctx, w, r, rq)
	default:
		h.fail(w, r, rq, &methodError{Method: method, Allow: "HEAD, GET, PATCH, DELETE, OPTIONS"})
	}
}

type authenticatedKey struct{}

// Authenticated marks ctx, a context Config.Authenticate returned for a request, as the
// context of a request that another door of the same process authenticated and hands
// on to this one (the direct door's single PUT, a creation underneath): the door
// takes it as is, rather than authenticating the request, and charging its rate limit,
// twice. A client cannot set it: it lives only in a request's context.
func Authenticated(ctx context.Context) context.Context {
	return context.WithValue(ctx, authenticatedKey{}, true)
}

// route returns the upload id in path ("" for the creation URL).
func (h *Handler) route(path string) (string, bool) {
	if path == strings.TrimSuffix(h.cfg.Prefix, "/") {
		return "", true
	}
	rest, ok := strings.CutPrefix(path, h.cfg.Prefix)
	if !ok {
		return "", false
	}
	// Upload ids are short and plain (chunkup's are 26 base32 letters); anything else
	// is no upload of ours.
	if len(rest) > 128 || strings.ContainsAny(rest, "/\\") || !printableASCII(rest) {
		return "", false
	}
	return rest, true
}

// detect tells a request's protocol: the IETF draft when it names an interop version,
// tus when it names a tus version. A request with neither is tus for HEAD and GET (so
// curl -I works) and refused otherwise, as tus requires.
func detect(r *http.Request, method string) (protocol, int, error) {
	if vs := r.Header.Values("Upload-Draft-Interop-Version"); len(vs) > 0 {
		n, _, ok := sfInteger(vs)
		if !ok || n < minInterop || n > maxInterop {
			return protoIETF, 0, &versionError{Msg: fmt.Sprintf("Upload-Draft-Interop-Version %s is not supported: this server speaks interop versions %s of draft-ietf-httpbis-resumable-upload, and tus %s", clip(strings.Join(vs, ",")), interopList(), tusVersion)}
		}
		return protoIETF, int(n), nil
	}
	if v := r.Header.Get("Tus-Resumable"); v != "" {
		if v != tusVersion {
			return protoTus, 0, &versionError{Msg: fmt.Sprintf("Tus-Resumable %s is not supported: this server speaks tus %s", clip(v), tusVersion)}
		}
		return protoTus, 0, nil
	}
	if method == http.MethodHead || method == http.MethodGet {
		return protoTus, 0, nil
	}
	return protoTus, 0, &versionError{Msg: fmt.Sprintf("send Tus-Resumable: %s (tus) or Upload-Draft-Interop-Version: %d (the IETF resumable upload draft)", tusVersion, newestReadInterop)}
}

// location is the URL of upload id.
func (h *Handler) location(id string) string { return h.base + url.PathEscape(id) }

// limit is the Upload-Limit for an upload (nil: before any upload exists).
func (h *Handler) limit(up *Upload) string {
	var parts []string
	if h.cfg.MaxSize > 0 {
		parts = append(parts, "max-size="+strconv.FormatInt(h.cfg.MaxSize, 10))
	}
	if up != nil {
		// No min-append-size: an append of any size is kept (a chunk's first bytes
		// as the upload's tail).
		if !up.Expires.IsZero() && !up.State.Ended() {
			parts = append(parts, "max-age="+strconv.FormatInt(max(0, int64(time.Until(up.Expires)/time.Second)), 10))
		}
	}
	if len(parts) == 0 {
		return "min-size=0"
	}
	return strings.Join(parts, ", ")
}

// options answers discovery (both protocols) and CORS preflight. 200 rather than 204,
// as tusd answers, for old browsers that mishandle 204 preflights.
func (h *Handler) options(w http.ResponseWriter, r *http.Request, id string) {
	hd := w.Header()
	hd.Set("Tus-Resumable", tusVersion)
	hd.Set("Tus-Version", tusVersion)
	hd.Set("Tus-Extension", tusExtensions)
	hd.Set("Tus-Checksum-Algorithm", tusChecksumAlgorithms)
	if h.cfg.MaxSize > 0 {
		hd.Set("Tus-Max-Size", strconv.FormatInt(h.cfg.MaxSize, 10))
	}
	hd.Set("Upload-Limit", h.limit(nil))
	hd.Set("Accept-Patch", ctIETFPatch+", "+ctTusPatch)
	if id == "" {
		hd.Set("Allow", "POST, OPTIONS")
	} else {
		hd.Set("Allow", "HEAD, GET, PATCH, DELETE, OPTIONS")
	}
	hd.Set("Content-Length", "0")
	w.WriteHeader(http.StatusOK)
}

// summary is what the door derives from an upload's chunks.
type summary struct {
	// offset is the durable offset: the bytes of the contiguous chunks from chunk 1,
	// and of the tail that follows them.
	offset int64
	// next is the number of the first chunk not received contiguously.
	next uint32
	// crc is the CRC32C of the first offset bytes.
	crc uint32
	// complete: the size is known and every chunk up to the last was received.
	complete bool
	// chunkOffset and chunkCRC are offset and crc without the tail.
	chunkOffset int64
	chunkCRC    uint32
	// tail is the upload's tail when it begins chunk next (the zero Tail otherwise).
	tail Tail
}

func summarize(up Upload) summary {
	chunks := slices.Clone(up.Chunks)
	slices.SortFunc(chunks, func(a, b Chunk) int { return int(a.N) - int(b.N) })
	s := summary{next: 1}
	for _, c := range chunks {
		if c.N < s.next {
			continue
		}
		if c.N != s.next {
			break
		}
		s.offset += c.Size
		s.crc = crc.Combine(s.crc, c.CRC32C, c.Size)
		s.next++
	}
	s.complete = up.Size >= 0 && s.next > totalChunks(up.Size, up.ChunkSize)
	s.chunkOffset, s.chunkCRC = s.offset, s.crc
	if t := up.Tail; t.Size > 0 && t.N == s.next && !s.complete && up.State == StateActive {
		s.tail = t
		s.offset += t.Size
		s.crc = crc.Combine(s.crc, t.CRC32C, t.Size)
	}
	return s
}

// totalChunks is the number of chunks of an upload of size bytes: at least one, so an
// empty upload is one empty chunk.
func totalChunks(size, chunkSize int64) uint32 {
	if size <= 0 || chunkSize <= 0 {
		return 1
	}
	return uint32((size + chunkSize - 1) / chunkSize)
}

// read reads an upload for a request and records its offset for the response,
// whatever its state.
func (h *Handler) read(ctx context.Context, rq *request) (Upload, summary, error) {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.CoreTimeout)
	defer cancel()
	rq.read = true
	up, err := h.core.Get(ctx, rq.id)
	if err != nil {
		return up, summary{}, err
	}
	st := summarize(up)
	rq.upload = &up
	rq.setOffset(st.offset)
	rq.complete = st.complete
	return up, st, nil
}

// load reads an upload that is to take a request (read). An upload that ended is
// ErrGone, saying what became of it.
func (h *Handler) load(ctx context.Context, rq *request) (Upload, summary, error) {
	up, st, err := h.read(ctx, rq)
	if err == nil {
		err = ended(up, rq.method)
	}
	return up, st, err
}

// goneError: the upload ended (aborted, expired, failed) before the request. Its
// message says what became of the upload, when and why, and what the client can do
// about it with this method. 410.
type goneError struct{ msg string }

func (e *goneError) Error() string { return e.msg }
func (e *goneError) Unwrap() error { return ErrGone }

// ended is a goneError for an upload that ended, for a request of method; nil for one
// that did not.
func ended(up Upload, method string) error {
	var b strings.Builder
	switch up.State {
	case StateExpired:
		fmt.Fprintf(&b, "upload %s expired", up.ID)
	case StateAborted:
		fmt.Fprintf(&b, "upload %s was cancelled", up.ID)
	case StateFailed:
		fmt.Fprintf(&b, "upload %s failed", up.ID)
	default:
		return nil
	}
	if !up.Ended.IsZero() {
		b.WriteString(" at " + up.Ended.UTC().Format(time.RFC3339))
	}
	if up.Reason != "" {
		b.WriteString(" (" + clip(up.Reason) + ")")
	}
	switch method {
	case http.MethodDelete:
		b.WriteString("; its data was discarded when it ended, so it holds nothing to delete: to send the file, create a new upload")
	case http.MethodPatch:
		b.WriteString("; it takes no more data: create a new upload and send the file from its start")
	default:
		b.WriteString("; it cannot be resumed: create a new upload and send the file from its start")
	}
	return &goneError{msg: b.String()}
}

// progressHeaders sets the headers that describe an upload's progress, for HEAD, GET
// and the responses to creation and append.
func (h *Handler) progressHeaders(w http.ResponseWriter, rq *request, up Upload, st summary) {
	hd := w.Header()
	hd.Set("Upload-Offset", strconv.FormatInt(st.offset, 10))
	if rq.proto == protoTus {
		if up.Size >= 0 {
			hd.Set("Upload-Length", strconv.FormatInt(up.Size, 10))
			hd.Del("Upload-Defer-Length")
		} else {
			hd.Set("Upload-Defer-Length", "1")
		}
		if !up.Expires.IsZero() && !st.complete && !up.State.Ended() {
			hd.Set("Upload-Expires", up.Expires.UTC().Format(http.TimeFormat))
		}
	} else {
		hd.Set("Upload-Complete", sfBool(st.complete))
		if up.Size >= 0 {
			hd.Set("Upload-Length", strconv.FormatInt(up.Size, 10))
		}
		hd.Set("Upload-Limit", h.limit(&up))
	}
	if st.complete {
		hd.Set("Repr-Digest", formatReprCRC32C(st.crc))
	}
}

// head answers offset retrieval (HEAD, and an IETF GET since draft -12) and, for get,
// the upload's state as JSON (which tus does not define, nor the draft before -12; the
// upload page polls it). HEAD of an upload that ended is 410, as both protocols want;
// get shows it as any other, 200 with its state and the reason it failed, which is what
// the page polls for.
func (h *Handler) head(ctx context.Context, w http.ResponseWriter, r *http.Request, rq *request, get bool) {
	up, st, err := h.read(ctx, rq)
	if err == nil && !get {
		err = ended(up, rq.method)
	}
	if err != nil {
		h.fail(w, r, rq, err)
		return
	}
	hd := w.Header()
	hd.Set("Cache-Control", "no-store")
	h.progressHeaders(w, rq, up, st)
	if rq.proto == protoTus {
		if m := echoMetadata(up); m != "" {
			hd.Set("Upload-Metadata", m)
		}
		if c := h.concatHeader(up); c != "" {
			hd.Set("Upload-Concat", c)
		}
	}
	if get {
		hd.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_ = json.NewEncoder(w).Encode(statusJSON(up, st))
		return
	}
	if rq.proto == protoIETF {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// echoMetadata is the Upload-Metadata a tus HEAD echoes: what the client sent, or,
// for an upload created through another door, its name and type.
func echoMetadata(up Upload) string {
	m := up.Metadata
	if len(m) == 0 && (up.Name != "" || up.ContentType != "") {
		m = map[string]string{}
		if up.Name != "" {
			m["filename"] = up.Name
		}
		if up.ContentType != "" {
			m["filetype"] = up.ContentType
		}
	}
	return formatTusMetadata(m)
}

// uploadJSON is an upload's state as GET and completing IETF responses show it.
type uploadJSON struct {
	ID          string            `json:"id"`
	State       State             `json:"state"`
	Offset      int64             `json:"offset"`
	Size        *int64            `json:"size,omitempty"`
	Complete    bool              `json:"complete"`
	ChunkSize   int64             `json:"chunk_size"`
	Received    int               `json:"received_chunks"`
	Stored      int               `json:"stored_chunks"`
	Key         string            `json:"key,omitempty"`
	Name        string            `json:"name,omitempty"`
	ContentType string            `json:"content_type,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	Expires     *time.Time        `json:"expires,omitempty"`
	Reason      string            `json:"reason,omitempty"`
	CRC32C      *uint32           `json:"crc32c,omitempty"`
}

func statusJSON(up Upload, st summary) uploadJSON {
	j := uploadJSON{
		ID: up.ID, State: up.State, Offset: st.offset, Complete: st.complete, ChunkSize: up.ChunkSize,
		Received: len(up.Chunks), Key: up.Key, Name: up.Name, ContentType: up.ContentType,
		Metadata: up.Metadata, Reason: up.Reason,
	}
	for _, c := range up.Chunks {
		if c.Stored {
			j.Stored++
		}
	}
	if up.Size >= 0 {
		j.Size = &up.Size
	}
	if !up.Expires.IsZero() {
		e := up.Expires.UTC()
		j.Expires = &e
	}
	if st.complete {
		j.CRC32C = &st.crc
	}
	j.State = Shown(up.State, st.complete)
	return j
}

// Shown is the state an upload in state s is shown in, complete when every byte is in:
// its completion is then due, and until the completer takes it the core still says
// ACTIVE, which would read as an upload awaiting bytes.
func Shown(s State, complete bool) State {
	if complete && s == StateActive {
		return StateCompleting
	}
	return s
}

// delete answers tus termination and IETF cancellation: 204, and the upload is
// aborted. It takes no lock: an append in flight on any replica fails at its next
// chunk (the core refuses to stage into an aborted upload), which is how the draft
// asks in-flight requests to be ended.
func (h *Handler) delete(ctx context.Context, w http.ResponseWriter, r *http.Request, rq *request) {
	cctx, cancel := context.WithTimeout(ctx, h.cfg.CoreTimeout)
	defer cancel()
	if err := h.core.Abort(cctx, rq.id); err != nil {
		h.fail(w, r, rq, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
