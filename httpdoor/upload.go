package httpdoor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/chunkup/chunkup/internal/fault"
)

// headers are the protocol fields of a creation or append request, read the way the
// request's protocol defines them.
type headers struct {
	// offset is the request's Upload-Offset (append only).
	offset int64
	// length is the upload's length as the request states it, -1 when it does not.
	length int64
	// ends: the request says its body ends the upload (IETF Upload-Complete: ?1).
	ends bool
	// data: the request carries upload data (always for PATCH; for a tus POST, when its
	// content type says so).
	data    bool
	checks  []*bodyCheck
	reprCRC *uint32
	// name, ctype and meta describe a new upload.
	name, ctype string
	meta        map[string]string
	// partial and concat: tus Upload-Concat, partial or final (the partials' ids).
	partial bool
	concat  []string
}

// parseTusInt parses a tus integer header: decimal digits only (no sign, no spaces).
// A value of digits too large for an int64 is refused with a message that says so;
// Upload-Length reads its own (uploadLength), where such a value is too large (413).
func parseTusInt(field, v string) (int64, error) {
	if !allDigits(v) {
		return 0, fmt.Errorf("%w: %s must be a non-negative decimal integer, not %q", ErrInvalid, field, clip(v))
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s %s is larger than any upload can be; a HEAD request tells the upload's offset", ErrInvalid, field, clip(v))
	}
	return n, nil
}

// allDigits: v is one or more decimal digits and nothing else.
func allDigits(v string) bool {
	return v != "" && strings.Trim(v, "0123456789") == ""
}

// sfMaxInteger is the largest Integer a Structured Field can carry (15 digits).
const sfMaxInteger = 999_999_999_999_999

// single returns the one value of a protocol field that must appear once ("" when the
// request has none). The field twice, as two lines or as a comma-separated list, is
// refused rather than resolved to one of its values: which one the client meant is
// not the door's guess. None of the fields it reads can hold a comma.
func single(r *http.Request, field string) (string, error) {
	vs := r.Header.Values(field)
	switch {
	case len(vs) == 0:
		return "", nil
	case len(vs) > 1 || strings.Contains(vs[0], ","):
		return "", fmt.Errorf("%w: %s is sent more than once (%q); send it once, with one value", ErrInvalid, field, clip(strings.Join(vs, ", ")))
	}
	return vs[0], nil
}

// uploadLength reads a request's Upload-Length: -1 when it has none. A value of digits
// only that is larger than this server takes (Config.MaxSize, a 64-bit length, and for
// the IETF protocol the 15 digits of a Structured Field Integer) is ErrTooLarge,
// however many digits it has: the client learns it cannot send that upload here, not
// that its field is malformed. Anything else that is no non-negative integer is
// ErrInvalid for tus; for the IETF protocol it is ignored, as the draft says of a field
// of the wrong type.
func (h *Handler) uploadLength(r *http.Request, p protocol, create bool) (int64, error) {
	v, err := single(r, "Upload-Length")
	if err != nil || v == "" {
		return -1, err
	}
	limit, stated := int64(math.MaxInt64), h.cfg.MaxSize > 0
	if p == protoIETF {
		v = strings.Trim(v, " \t")
		limit = sfMaxInteger
	}
	if stated {
		limit = min(limit, h.cfg.MaxSize)
	}
	if allDigits(v) {
		n, err := strconv.ParseInt(v, 10, 64)
		if err == nil && n <= limit {
			return n, nil
		}
		what := "no upload was created"
		if !create {
			what = "the upload was not changed"
		}
		if stated {
			return -1, fmt.Errorf("%w: Upload-Length %s is larger than this server takes (at most %d bytes); %s", ErrTooLarge, clip(v), limit, what)
		}
		return -1, fmt.Errorf("%w: Upload-Length %s is larger than any upload can be (at most %d bytes); %s", ErrTooLarge, clip(v), limit, what)
	}
	if p == protoTus {
		return -1, fmt.Errorf("%w: Upload-Length must be a non-negative decimal integer, not %q", ErrInvalid, clip(v))
	}
	if n, _, ok := sfInteger([]string{v}); ok {
		return n, nil
	}
	return -1, nil
}

func mediaType(r *http.Request) string {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return mt
}

// readHeaders reads a creation (create) or append request's protocol fields.
func (h *Handler) readHeaders(r *http.Request, rq *request, create bool) (headers, error) {
	hd := headers{length: -1, data: !create}
	var err error
	if rq.proto == protoTus {
		mt := mediaType(r)
		if create {
			if hd.partial, hd.concat, err = h.uploadConcat(r); err != nil {
				return hd, err
			}
			d := r.Header.Get("Upload-Defer-Length")
			if hd.concat != nil {
				// A final upload's length is its partials' (checked against theirs, if
				// the client sends it too), and its bytes are theirs.
				switch {
				case mt == ctTusPatch:
					return hd, fmt.Errorf("%w: a final upload takes no data: its bytes are its partial uploads'; send none with Upload-Concat: final", errFinal)
				case d != "":
					return hd, fmt.Errorf("%w: a final upload's length is its partial uploads'; send no Upload-Defer-Length with Upload-Concat: final", ErrInvalid)
				}
			}
			if hd.length, err = h.uploadLength(r, rq.proto, create); err != nil {
				return hd, err
			}
			switch {
			case hd.concat != nil:
			case hd.length >= 0 && d != "":
				return hd, fmt.Errorf("%w: send Upload-Length or Upload-Defer-Length, not both", ErrInvalid)
			case hd.length >= 0:
			case d != "1":
				return hd, fmt.Errorf("%w: creating an upload needs Upload-Length, or Upload-Defer-Length: 1 when the length is not known yet", ErrInvalid)
			}
			hd.data = mt == ctTusPatch && hd.concat == nil
		} else {
			if mt != ctTusPatch {
				return hd, fmt.Errorf("%w: a tus PATCH must have Content-Type: %s", errMediaType, ctTusPatch)
			}
			off, err := single(r, "Upload-Offset")
			if err != nil {
				return hd, err
			}
			if hd.offset, err = parseTusInt("Upload-Offset", off); err != nil {
				return hd, err
			}
			if hd.length, err = h.uploadLength(r, rq.proto, create); err != nil {
				return hd, err
			}
		}
		v, err := single(r, "Upload-Checksum")
		if err != nil {
			return hd, err
		}
		if v != "" && hd.data {
			c, err := parseUploadChecksum(v)
			if err != nil {
				return hd, err
			}
			hd.checks = append(hd.checks, c)
		}
	} else {
		ends, present, ok := sfBoolean(r.Header.Values("Upload-Complete"))
		switch {
		case ok:
			hd.ends = ends
		case create || rq.interop >= interopCompleteRequired:
			return hd, fmt.Errorf("%w: the request needs Upload-Complete: ?1 (its body ends the upload) or ?0", ErrInvalid)
		case present:
			return hd, fmt.Errorf("%w: Upload-Complete must be ?0 or ?1", ErrInvalid)
		default:
			// Drafts -01 to -05 (interop up to 6): an append without the field is the
			// last one.
			hd.ends = true
		}
		if !create {
			if rq.interop >= interopPartialUpload && mediaType(r) != ctIETFPatch {
				return hd, fmt.Errorf("%w: an append must have Content-Type: %s", errMediaType, ctIETFPatch)
			}
			v, err := single(r, "Upload-Offset")
			if err != nil {
				return hd, err
			}
			off, _, ok := sfInteger([]string{v})
			if !ok || v == "" {
				return hd, fmt.Errorf("%w: an append needs Upload-Offset, a non-negative integer", ErrInvalid)
			}
			hd.offset = off
		}
		if hd.length, err = h.uploadLength(r, rq.proto, create); err != nil {
			return hd, err
		}
		if hd.ends && r.ContentLength >= 0 {
			l := hd.offset + r.ContentLength
			if hd.length >= 0 && hd.length != l {
				return hd, fmt.Errorf("%w: Upload-Length %d, but Upload-Complete: ?1 and Content-Length say %d", errLength, hd.length, l)
			}
			hd.length = l
		}
		if hd.checks, err = parseContentDigest(r.Header.Values("Content-Digest")); err != nil {
			return hd, err
		}
		if c, ok, err := reprCRC32C(r.Header.Values("Repr-Digest")); err != nil {
			return hd, err
		} else if ok {
			hd.reprCRC = &c
		}
	}
	if !create {
		return hd, nil
	}
	if h.cfg.MaxSize > 0 && hd.length > h.cfg.MaxSize {
		return hd, fmt.Errorf("%w: the upload has %d bytes; this server takes at most %d", ErrTooLarge, hd.length, h.cfg.MaxSize)
	}
	if hd.meta, err = parseTusMetadata(r.Header.Get("Upload-Metadata")); err != nil {
		return hd, err
	}
	hd.name, hd.ctype = nameAndType(hd.meta)
	if rq.proto == protoIETF {
		// The creation request's representation metadata describes the file.
		if hd.name == "" {
			hd.name = dispositionName(r.Header.Get("Content-Disposition"))
		}
		if mt := r.Header.Get("Content-Type"); hd.ctype == "" && mt != "" {
			if m := mediaType(r); m != ctIETFPatch && m != ctTusPatch {
				hd.ctype = mt
			}
		}
	}
	return hd, nil
}

// overflow is the error for data beyond an upload's length.
func overflow(p protocol, size int64) error {
	if p == protoTus {
		return fmt.Errorf("%w: the data goes past the upload's length of %d bytes", ErrTooLarge, size)
	}
	return fmt.Errorf("%w: the data goes past the upload's length of %d bytes", errLength, size)
}

// create answers upload creation: tus POST (with or without data) and IETF creation.
func (h *Handler) create(ctx context.Context, w http.ResponseWriter, r *http.Request, rq *request) {
	hd, err := h.readHeaders(r, rq, true)
	if err != nil {
		h.fail(w, r, rq, err)
		return
	}
	if rq.proto == protoIETF {
		hd.data = true
	}
	// What the body's length already rules out is refused before the upload exists: a
	// failure after its creation leaves an upload the client has to resume or delete.
	if cl := r.ContentLength; hd.data && cl >= 0 {
		switch {
		case hd.length >= 0 && cl > hd.length:
			err := fmt.Errorf("%w: the request body has %d bytes, more than the upload's length of %d; no upload was created: send at most Upload-Length bytes", ErrTooLarge, cl, hd.length)
			if rq.proto == protoIETF {
				err = fmt.Errorf("%w: the request body has %d bytes, more than Upload-Length %d; no upload was created: send at most Upload-Length bytes", errLength, cl, hd.length)
			}
			h.fail(w, r, rq, err)
			return
		case len(hd.checks) > 0 && cl > h.cfg.MaxChecksumBody:
			h.fail(w, r, rq, fmt.Errorf("%w: a request body with a checksum is held in memory until it is verified, so it may have at most %d bytes; this one has %d (no upload was created)", ErrTooLarge, h.cfg.MaxChecksumBody, cl))
			return
		}
	}
	var parts Partials
	if hd.concat != nil {
		cctx, cancel := context.WithTimeout(ctx, h.cfg.CoreTimeout)
		parts, err = h.core.Concat(cctx, hd.concat)
		cancel()
		var fe *FinalExistsError
		switch {
		case errors.As(err, &fe):
			h.existingFinal(ctx, w, r, rq, fe.ID)
			return
		case err != nil:
			h.fail(w, r, rq, err)
			return
		}
		defer parts.Done()
		if hd.length >= 0 && hd.length != parts.Size() {
			h.fail(w, r, rq, fmt.Errorf("%w: Upload-Length %d, but the partial uploads have %d bytes together; no upload was created (a final upload needs no Upload-Length)", ErrInvalid, hd.length, parts.Size()))
			return
		}
		hd.length = parts.Size()
	}
	if rq.proto == protoIETF && r.ContentLength == 0 && !hd.ends && hd.length != 0 {
		hd.data = false // careful creation: the client only wants the URL
	}
	// A creation that appends (its body, an empty upload's completion, a final
	// upload's partials) counts its stream before the upload exists: a tenant at its
	// cap is refused with nothing created, which a client that retries a failed
	// creation by creating again (tus clients) cannot turn into abandoned uploads.
	var stream func()
	if appends := hd.data || hd.length == 0 || parts != nil; appends {
		if stream, err = h.core.OpenStream(ctx); err != nil {
			h.fail(w, r, rq, fmt.Errorf("%w (no upload was created)", err))
			return
		}
		defer func() {
			if stream != nil {
				stream()
			}
		}()
	}
	cctx, cancel := context.WithTimeout(ctx, h.cfg.CoreTimeout)
	up, err := h.core.Create(cctx, CreateRequest{Size: hd.length, Name: hd.name, ContentType: hd.ctype, Metadata: hd.meta,
		Partial: hd.partial, Concat: hd.concat})
	cancel()
	if err != nil {
		h.fail(w, r, rq, err)
		return
	}
	loc := h.location(up.ID)
	rq.id, rq.upload, rq.created = up.ID, &up, loc
	rq.setOffset(0)
	res := appendResult{size: up.Size}
	if stream != nil {
		opened := stream
		stream = nil // the lock has it now
		held, unlock, err := h.core.LockOpened(context.WithoutCancel(ctx), up.ID, opened)
		if err != nil {
			if parts != nil {
				h.failFinal(ctx, w, r, rq, err)
				return
			}
			h.fail(w, r, rq, err)
			return
		}
		defer unlock()
		job := &appendJob{
			id: up.ID, tenant: h.tenant(rq.ctx), held: held, up: up, st: summarize(up), size: up.Size, declare: -1,
			ends: hd.ends, checks: hd.checks, reprCRC: hd.reprCRC, overflow: overflow(rq.proto, up.Size),
		}
		if rq.proto == protoIETF {
			// Announce the upload's URL before reading the body, so that the client
			// can resume even if this request breaks.
			h.interim(w, r, rq, "Location", loc, "Upload-Limit", h.limit(&up))
			job.progress = func(off int64) { h.interim(w, r, rq, "Upload-Offset", strconv.FormatInt(off, 10)) }
		}
		if parts != nil {
			cctx, cancel := context.WithTimeout(held, h.cfg.CoreTimeout)
			err := parts.Claim(cctx, up.ID)
			cancel()
			var fe *FinalExistsError
			if errors.As(err, &fe) {
				// The same final upload, created at the same moment by another request,
				// which claimed the partials first: this one goes, and the answer is
				// that one.
				h.abortFinal(ctx, up.ID, err)
				rq.id, rq.upload, rq.created, rq.offsetKnown = "", nil, "", false
				h.existingFinal(ctx, w, r, rq, fe.ID)
				return
			}
			if err != nil {
				h.failFinal(ctx, w, r, rq, err)
				return
			}
			src := parts.Open(held)
			defer src.Close()
			job.src = src
		}
		if res, err = h.appendBody(w, r, job); err != nil {
			if parts != nil {
				h.failFinal(ctx, w, r, rq, err)
				return
			}
			off, _ := res.durable()
			rq.setOffset(off)
			if rq.proto == protoTus && resumable(statusOf(rq.proto, err)) && !errors.Is(err, errInterrupted) {
				// The upload exists and keeps what was made durable. A tus client takes
				// a failed creation for none and creates again (tus-js-client retries a
				// 5xx POST), leaving this one behind; the creation-with-upload extension
				// answers a creation with the offset of the bytes it took, from which
				// the client goes on with PATCH.
				h.cfg.Logger.Warn("httpdoor: a creation's body stopped short; answered 201 with the offset taken", "upload", up.ID, "offset", off, "err", err)
				h.respond(ctx, w, r, rq, up, res, http.StatusCreated, loc)
				return
			}
			h.fail(w, r, rq, err)
			return
		}
	}
	off, _ := res.durable()
	rq.setOffset(off)
	rq.complete = res.complete
	h.respond(ctx, w, r, rq, up, res, http.StatusCreated, loc)
}

// resumable reports whether an append refused with code leaves its upload to go on
// from its offset: the server was busy, short of memory or time, or the body too slow.
func resumable(code int) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusLocked, http.StatusTooManyRequests,
		http.StatusInternalServerError, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// patch answers an append: tus PATCH and IETF upload append.
func (h *Handler) patch(ctx context.Context, w http.ResponseWriter, r *http.Request, rq *request) {
	hd, err := h.readHeaders(r, rq, false)
	if err != nil {
		h.fail(w, r, rq, err)
		return
	}
	held, unlock, err := h.core.Lock(context.WithoutCancel(ctx), rq.id)
	if fault.Has(err, fault.Locked) {
		// A final upload is locked while its partials' bytes are appended: it takes no
		// append then either.
		if up, _, rerr := h.read(ctx, rq); rerr == nil && len(up.Concat) > 0 {
			err = fmt.Errorf("%w: its bytes are its partial uploads'", errFinal)
		}
	}
	if err != nil {
		h.fail(w, r, rq, err)
		return
	}
	defer unlock()
	up, st, err := h.load(held, rq)
	if err != nil {
		h.fail(w, r, rq, err)
		return
	}
	if len(up.Concat) > 0 {
		h.fail(w, r, rq, fmt.Errorf("%w: its bytes are its partial uploads'", errFinal))
		return
	}
	if hd.offset != st.offset {
		h.fail(w, r, rq, &offsetError{Expected: st.offset, Provided: hd.offset})
		return
	}
	size := up.Size
	job := &appendJob{
		id: rq.id, tenant: h.tenant(rq.ctx), held: held, up: up, st: st, size: size, declare: -1,
		ends: hd.ends, checks: hd.checks, reprCRC: hd.reprCRC,
	}
	if hd.length >= 0 && hd.length != size {
		switch {
		case size >= 0 || hd.length < st.offset:
			known := "the offset is " + strconv.FormatInt(st.offset, 10)
			if size >= 0 {
				known = "the upload's length is " + strconv.FormatInt(size, 10)
			}
			// What to do: with a length recorded, that one; with none yet, one no
			// shorter than what arrived.
			todo := "send the upload's length as it was given, or none"
			if size < 0 {
				todo = "the length cannot be less than what the upload holds: send the file's true length"
			}
			if rq.proto == protoTus {
				h.fail(w, r, rq, fmt.Errorf("%w: Upload-Length %d, but %s; %s", ErrInvalid, hd.length, known, todo))
			} else {
				h.fail(w, r, rq, fmt.Errorf("%w: the request says the length is %d, but %s; %s", errLength, hd.length, known, todo))
			}
			return
		case h.cfg.MaxSize > 0 && hd.length > h.cfg.MaxSize:
			h.fail(w, r, rq, fmt.Errorf("%w: the upload has %d bytes; this server takes at most %d", ErrTooLarge, hd.length, h.cfg.MaxSize))
			return
		}
		job.declare, job.size, size = hd.length, hd.length, hd.length
	}
	job.overflow = overflow(rq.proto, size)
	if st.complete {
		// Nothing more can be appended. An empty append at the end is a client that
		// lost the final response and asks again: it gets it again.
		if r.ContentLength != 0 {
			if _, err := newPeeker(r).peek(); err == nil {
				h.fail(w, r, rq, job.overflow)
				return
			}
		}
		h.respond(ctx, w, r, rq, up, appendResult{offset: st.offset, crc: st.crc, complete: true, size: size}, http.StatusNoContent, "")
		return
	}
	if cl := r.ContentLength; cl >= 0 {
		switch {
		case size >= 0 && hd.offset+cl > size:
			h.fail(w, r, rq, job.overflow)
			return
		case len(hd.checks) > 0 && cl > h.cfg.MaxChecksumBody:
			h.fail(w, r, rq, fmt.Errorf("%w: a request body with a checksum is held in memory until it is verified, so it may have at most %d bytes; this one has %d", ErrTooLarge, h.cfg.MaxChecksumBody, cl))
			return
		}
	}
	if rq.proto == protoIETF {
		job.progress = func(off int64) { h.interim(w, r, rq, "Upload-Offset", strconv.FormatInt(off, 10)) }
	}
	res, err := h.appendBody(w, r, job)
	off, _ := res.durable()
	rq.setOffset(off)
	rq.complete = res.complete
	if err != nil {
		h.fail(w, r, rq, err)
		return
	}
	h.respond(ctx, w, r, rq, up, res, http.StatusNoContent, "")
}

// newPeeker reads a body that is expected to be empty.
func newPeeker(r *http.Request) *bodyReader {
	return &bodyReader{body: r.Body}
}

// interim sends a 104 (Upload Resumption Supported) with the given fields, to IETF
// clients of HTTP/1.1 or later (RFC 9110 forbids 1xx to HTTP/1.0). The fields stay in
// the header map for the final response (net/http clears it only after a final
// status), which is right for Location and Upload-Limit and harmless for Upload-Offset,
// which the final response sets again; a progress 104 must not carry Location, so it
// is taken out and put back.
func (h *Handler) interim(w http.ResponseWriter, r *http.Request, rq *request, kv ...string) {
	if rq.proto != protoIETF || !r.ProtoAtLeast(1, 1) {
		return
	}
	hd := w.Header()
	loc, hadLoc := hd["Location"]
	creation := false
	for i := 0; i+1 < len(kv); i += 2 {
		hd.Set(kv[i], kv[i+1])
		creation = creation || kv[i] == "Location"
	}
	if !creation {
		hd.Del("Location")
	}
	hd.Set("Upload-Draft-Interop-Version", strconv.Itoa(rq.interop))
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(h.cfg.IdleTimeout))
	w.WriteHeader(104)
	if hadLoc && !creation {
		hd["Location"] = loc
	}
}

// respond writes a successful creation or append response.
func (h *Handler) respond(ctx context.Context, w http.ResponseWriter, r *http.Request, rq *request, up Upload, res appendResult, code int, loc string) {
	hdr := w.Header()
	if loc != "" {
		hdr.Set("Location", loc)
	}
	up.Size = res.size
	off, sum := res.durable()
	st := summary{offset: off, crc: sum, complete: res.complete}
	h.progressHeaders(w, rq, up, st)
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(h.cfg.IdleTimeout))
	if rq.proto == protoIETF && res.complete {
		// The upload is whole: the response is the target resource's, the upload as
		// chunkup now holds it.
		cctx, cancel := context.WithTimeout(ctx, h.cfg.CoreTimeout)
		if fresh, err := h.core.Get(cctx, up.ID); err == nil {
			up = fresh
		}
		cancel()
		if code == http.StatusNoContent {
			code = http.StatusOK
		}
		hdr.Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(statusJSON(up, st))
		return
	}
	w.WriteHeader(code)
}
