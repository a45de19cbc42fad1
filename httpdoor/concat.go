package httpdoor

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/chunkup/chunkup/internal/fault"
)

// tus concatenation: a client sends parts of a file as partial uploads
// (Upload-Concat: partial), in parallel, then creates the final upload
// (Upload-Concat: final;URL URL …), whose bytes are the partials' in that order. The
// door creates the final upload and appends the partials' bytes to it, read back from
// the store (Core.Concat), as if the client had sent them in one request: the final
// upload is an upload like any other, the one announced and read by OCR. The creation
// is answered once the final upload holds every byte (as tusd does); see
// docs/http-uploads.md, "Concatenation".

// errFinal: a request that would change a final upload's bytes. 403, as tus requires.
var errFinal = fault.New(fault.Denied, "a final upload cannot be appended to")

// uploadConcat reads a tus creation's Upload-Concat: partial, or the ids of the
// partial uploads a final upload concatenates (nil for neither).
func (h *Handler) uploadConcat(r *http.Request) (partial bool, ids []string, err error) {
	vs := r.Header.Values("Upload-Concat")
	switch {
	case len(vs) == 0:
		return false, nil, nil
	case len(vs) > 1:
		return false, nil, fmt.Errorf("%w: Upload-Concat is sent more than once; send it once", ErrInvalid)
	case vs[0] == "partial":
		return true, nil, nil
	}
	list, ok := strings.CutPrefix(vs[0], "final;")
	if !ok {
		return false, nil, fmt.Errorf("%w: Upload-Concat must be \"partial\", or \"final;\" followed by the partial uploads' URLs separated by spaces, not %q", ErrInvalid, clip(vs[0]))
	}
	// How many partials one final upload may name is the core's rule (Core.Concat).
	urls := strings.Fields(list)
	if len(urls) == 0 {
		return false, nil, fmt.Errorf("%w: Upload-Concat: final; names no partial upload: list their URLs, in order, separated by spaces", ErrInvalid)
	}
	for _, u := range urls {
		if strings.ContainsAny(u, ",;") {
			// Not in any URL this server makes: a list with another separator, which
			// would otherwise read as one URL naming its last upload alone.
			return false, nil, fmt.Errorf("%w: %q in Upload-Concat is not one upload's URL: separate the partial uploads' URLs with spaces", ErrInvalid, clip(u))
		}
		id, ok := h.idOfURL(u)
		if !ok {
			return false, nil, fmt.Errorf("%w: %q in Upload-Concat is not the URL of an upload on this server (%sID)", ErrInvalid, clip(u), h.base)
		}
		ids = append(ids, id)
	}
	return false, ids, nil
}

// idOfURL returns the upload id a partial upload's URL names: the URL its creation
// returned (absolute, whatever host it names, since a proxy may rewrite it), or its
// path alone.
func (h *Handler) idOfURL(s string) (string, bool) {
	u, err := url.Parse(s)
	if err != nil {
		return "", false
	}
	i := strings.LastIndexByte(u.Path, '/')
	if i < 0 {
		return "", false
	}
	dir, id := u.Path[:i+1], u.Path[i+1:]
	if id == "" || !strings.HasSuffix(dir, h.cfg.Prefix) {
		return "", false
	}
	if _, ok := h.route(h.cfg.Prefix + id); !ok {
		return "", false
	}
	return id, true
}

// concatHeader is the Upload-Concat a tus HEAD of up echoes ("" for an upload of
// neither kind).
func (h *Handler) concatHeader(up Upload) string {
	switch {
	case up.Partial:
		return "partial"
	case len(up.Concat) > 0:
		urls := make([]string, len(up.Concat))
		for i, id := range up.Concat {
			urls[i] = h.location(id)
		}
		return "final;" + strings.Join(urls, " ")
	}
	return ""
}

// failFinal answers a final upload's creation that failed after the upload was made
// (err): a final upload is made whole in the request that creates it or not at all,
// so it is aborted (it would otherwise wait for bytes no client sends until it
// expired), and the answer names no upload to resume: the client creates the final
// upload again, from the partials, which are still there.
func (h *Handler) failFinal(ctx context.Context, w http.ResponseWriter, r *http.Request, rq *request, err error) {
	if fault.Has(err, fault.Ended) {
		// Ended meanwhile (DELETE of its URL, which a 409 or 423 names): say so in
		// this request's words, not in those of an append.
		err = fault.Wrap(err, fault.Ended, fmt.Sprintf("final upload %s was ended while its partial uploads were assembled into it, and no upload was created: create the final upload again", rq.id))
	}
	h.abortFinal(ctx, rq.id, err)
	rq.id, rq.upload, rq.created, rq.offsetKnown = "", nil, "", false
	h.fail(w, r, rq, err)
}

// abortFinal aborts final upload id, which its creating request gives up for err.
func (h *Handler) abortFinal(ctx context.Context, id string, err error) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.cfg.CoreTimeout)
	defer cancel()
	if aerr := h.core.Abort(actx, id); aerr != nil {
		h.cfg.Logger.Warn("abort a final upload that could not be assembled", "upload", id, "err", err, "abort_err", aerr)
	}
}

// existingFinal answers a final upload's creation with final upload id, of the same
// partial uploads, which has every byte: 201 with its URL and offset, as the first
// creation was answered.
func (h *Handler) existingFinal(ctx context.Context, w http.ResponseWriter, r *http.Request, rq *request, id string) {
	cctx, cancel := context.WithTimeout(ctx, h.cfg.CoreTimeout)
	up, err := h.core.Get(cctx, id)
	cancel()
	if err != nil {
		h.fail(w, r, rq, err)
		return
	}
	st := summarize(up)
	loc := h.location(id)
	rq.id, rq.upload, rq.created = id, &up, loc
	h.respond(ctx, w, r, rq, up, appendResult{offset: st.chunkOffset, crc: st.chunkCRC, complete: st.complete, size: up.Size}, http.StatusCreated, loc)
}
