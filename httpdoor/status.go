package httpdoor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/chunkup/chunkup/internal/fault"
)

// ResumeAdvice ends the message of a body cut short (or too slow) whose upload can be
// resumed; a door that makes uploads which cannot (the direct door's single PUT) takes
// it out.
const ResumeAdvice = "; what arrived is stored, resume from Upload-Offset"

// Errors of the protocol layer itself, beside the Core's sentinels.
var (
	// errInterrupted: the request body stopped before its end (the client went away, sent
	// nothing for IdleTimeout, or the upload's lock was lost). What arrived in whole
	// chunks is staged; the client resumes from Upload-Offset. 500, as tusd answers,
	// because clients retry 5xx and resume.
	errInterrupted = errors.New("the request body was interrupted")
	// errTooSlow: the request body arrived slower than Config.MinBodyRate. What arrived
	// in whole chunks is staged; the client resumes from Upload-Offset. 408.
	errTooSlow = errors.New("the request body was too slow")
	// errUnauthenticated: Config.Authenticate refused the request. 401.
	errUnauthenticated = errors.New("missing or invalid credentials")
	// errOrigin: a browser request from an origin CORS does not allow. 403.
	errOrigin = errors.New("origin not allowed")
	// errMediaType: a PATCH without the protocol's content type. 415.
	errMediaType = errors.New("unsupported media type")
	// errDraining: the server is shutting down (Handler.Drain) and stopped reading the
	// body; what arrived in whole chunks is staged. 503 with Retry-After, so the client
	// resumes (elsewhere).
	errDraining = errors.New("this server is shutting down")
	// errLength: length indications that disagree (the IETF inconsistent-upload-length
	// problem). 400.
	errLength = errors.New("inconsistent upload length")
)

// authError: Config.Authenticate refused the request. Its message is Authenticate's,
// which says what is wrong and what the server accepts. 401.
type authError struct{ err error }

func (e *authError) Error() string {
	if m := e.err.Error(); m != "" {
		return m
	}
	return errUnauthenticated.Error()
}

func (e *authError) Unwrap() []error { return []error{errUnauthenticated, e.err} }

// offsetError: the request's Upload-Offset is not the upload's. 409, with the mismatching
// offset problem for the IETF protocol.
type offsetError struct{ Expected, Provided int64 }

func (e *offsetError) Error() string {
	return fmt.Sprintf("Upload-Offset %d does not match the upload's offset %d: send from %d (a HEAD request tells the offset)", e.Provided, e.Expected, e.Expected)
}

// checksumError: the body's checksum did not match; none of it was staged (a
// checksummed body is held until it is verified). 460 for tus's Upload-Checksum, 400
// for Content-Digest.
type checksumError struct{ Field, Algorithm string }

func (e *checksumError) Error() string {
	return fmt.Sprintf("the request body does not match its %s (%s); none of its bytes were stored: send them again", e.Field, e.Algorithm)
}

// reprDigestError: the upload's bytes do not match the request's Repr-Digest. It is
// checked before the last chunk is staged, so that chunk is not, but the request's whole
// chunks before it are (a digest of the whole upload cannot be checked sooner): Offset
// is the upload's durable offset after them. 400.
type reprDigestError struct{ Offset int64 }

func (e *reprDigestError) Error() string {
	return fmt.Sprintf("the upload's bytes do not match the request's Repr-Digest (crc32c), so its last chunk was not stored; "+
		"the whole chunks before it are, up to offset %d: send the rest from offset %d with a correct Repr-Digest "+
		"(if the bytes before are wrong too, DELETE the upload and start again)", e.Offset, e.Offset)
}

// methodError: a method the URL does not serve. 405 with Allow.
type methodError struct{ Method, Allow string }

func (e *methodError) Error() string {
	return fmt.Sprintf("method %s is not allowed here; allowed: %s", clip(e.Method), e.Allow)
}

// versionError: neither a supported tus version nor a supported IETF interop version.
// 412 with Tus-Version, as tus requires.
type versionError struct{ Msg string }

func (e *versionError) Error() string { return e.Msg }

// Problem types of draft-ietf-httpbis-resumable-upload (completed-upload up to draft
// -11, interop 8).
const (
	problemMismatchingOffset  = "https://iana.org/assignments/http-problem-types#mismatching-upload-offset"
	problemInconsistentLength = "https://iana.org/assignments/http-problem-types#inconsistent-upload-length"
	problemCompletedUpload    = "https://iana.org/assignments/http-problem-types#completed-upload"
)

// statusOf maps an error to its HTTP status, the one place where errors become
// statuses. locked differs by protocol: tus clients (tus-js-client) retry 423, which
// tusd also defines for a locked upload; the IETF draft names 409 for concurrent
// appends.
func statusOf(p protocol, err error) int {
	var (
		off *offsetError
		sum *checksumError
		me  *methodError
		ve  *versionError
	)
	switch {
	case errors.As(err, &off):
		return http.StatusConflict
	case errors.As(err, &sum):
		if sum.Field == "Upload-Checksum" {
			return 460 // tus checksum extension: Checksum Mismatch
		}
		return http.StatusBadRequest
	case errors.As(err, new(*reprDigestError)):
		return http.StatusBadRequest
	case errors.As(err, &me):
		return http.StatusMethodNotAllowed
	case errors.As(err, &ve):
		return http.StatusPreconditionFailed
	case errors.Is(err, errTooSlow):
		return http.StatusRequestTimeout
	case errors.Is(err, errUnauthenticated):
		return http.StatusUnauthorized
	case errors.Is(err, errOrigin):
		return http.StatusForbidden
	case errors.Is(err, errMediaType):
		return http.StatusUnsupportedMediaType
	case errors.Is(err, errLength):
		return http.StatusBadRequest
	case errors.Is(err, errDraining):
		return http.StatusServiceUnavailable
	}
	k := fault.KindOf(err)
	if k == fault.Locked && p != protoTus {
		return http.StatusConflict
	}
	return StatusOf(k)
}

// httpStatuses maps each kind of error to its HTTP status: the one table of the HTTP
// door (server's grpcCodes is the gRPC door's). A locked upload is 423 for tus
// (tus-js-client retries it, and tusd answers it) and 409 for the IETF protocol, which
// names 409 for concurrent appends (statusOf).
var httpStatuses = map[fault.Kind]int{
	fault.Internal:        http.StatusInternalServerError,
	fault.Invalid:         http.StatusBadRequest,
	fault.NotFound:        http.StatusNotFound,
	fault.OutOfRange:      http.StatusBadRequest,
	fault.TooLarge:        http.StatusRequestEntityTooLarge,
	fault.Exists:          http.StatusConflict,
	fault.Conflict:        http.StatusConflict,
	fault.Ended:           http.StatusGone,
	fault.Busy:            http.StatusServiceUnavailable,
	fault.Locked:          http.StatusLocked,
	fault.DataLoss:        http.StatusBadRequest,
	fault.Exhausted:       http.StatusTooManyRequests,
	fault.Overloaded:      http.StatusServiceUnavailable,
	fault.Unavailable:     http.StatusServiceUnavailable,
	fault.Deadline:        http.StatusServiceUnavailable,
	fault.Canceled:        http.StatusServiceUnavailable,
	fault.Unauthenticated: http.StatusUnauthorized,
	fault.Denied:          http.StatusForbidden,
	fault.Unsupported:     http.StatusNotImplemented,
}

// StatusOf is the HTTP status of errors of kind k (for tus; see statusOf).
func StatusOf(k fault.Kind) int {
	if c, ok := httpStatuses[k]; ok {
		return c
	}
	return http.StatusInternalServerError
}

// problem is an RFC 9457 problem details object.
type problem struct {
	Type           string `json:"type,omitempty"`
	Title          string `json:"title"`
	Status         int    `json:"status"`
	Detail         string `json:"detail,omitempty"`
	ExpectedOffset *int64 `json:"expected-offset,omitempty"`
	ProvidedOffset *int64 `json:"provided-offset,omitempty"`
}

// lookupTimeout bounds the lookup of an upload's offset for an error response: the
// error is the answer, the offset only helps, so a slow store does not hold it back
// for long.
const lookupTimeout = 5 * time.Second

// fail answers a request with err. The response carries what the client needs to go
// on: the upload's durable offset when the request concerns an upload that exists
// (looked up here if the request failed before reading it), the Location of an upload
// the request created, Retry-After on refusals worth retrying, Allow, Tus-Version,
// WWW-Authenticate. tus gets a text body, the IETF protocol problem+json; HEAD gets no
// body.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, rq *request, err error) {
	if fault.Has(err, fault.Ended) && !errors.As(err, new(*goneError)) && rq.id != "" && rq.ctx != nil {
		// The core's word that the upload ended (an abort of an expired upload, a stage
		// into one cancelled meanwhile) is about chunks; the upload, read again, tells
		// the client what became of it and what to do.
		ctx, cancel := context.WithTimeout(rq.ctx, min(lookupTimeout, h.cfg.CoreTimeout))
		if up, _, rerr := h.read(ctx, rq); rerr == nil {
			if gone := ended(up, rq.method); gone != nil {
				err = gone
			}
		}
		cancel()
	}
	code := statusOf(rq.proto, err)
	msg := err.Error()
	if code == http.StatusInternalServerError && !errors.Is(err, errInterrupted) {
		h.cfg.Logger.Error("httpdoor: request failed", "method", r.Method, "path", r.URL.Path, "upload", rq.id, "err", err)
		msg = "internal error; retry later"
	}
	hd := w.Header()
	var (
		off *offsetError
		me  *methodError
		ve  *versionError
	)
	if errors.As(err, &off) {
		rq.setOffset(off.Expected)
	}
	// Only an authenticated request (rq.ctx) about an upload that may exist is worth a
	// lookup; one that failed to read it already (404 included) is not.
	if !rq.offsetKnown && !rq.read && rq.id != "" && rq.ctx != nil && !fault.Has(err, fault.NotFound) && !errors.As(err, &me) {
		ctx, cancel := context.WithTimeout(rq.ctx, min(lookupTimeout, h.cfg.CoreTimeout))
		_, _, _ = h.read(ctx, rq) // on an error the response goes without the offset
		cancel()
	}
	if rq.created != "" {
		// The upload exists, whatever went wrong after: without its URL the client
		// could neither resume nor delete it, and would create another.
		hd.Set("Location", rq.created)
		msg += fmt.Sprintf(". This request created the upload at %s (offset %d): continue there with PATCH from Upload-Offset, or DELETE it; do not create it again", rq.created, rq.offset)
	} else {
		hd.Del("Location") // a 104 may have set it; an error is no resource of its own
	}
	// tus: a HEAD answered 403, 404 or 410 "SHOULD" go without Upload-Offset (there is
	// no upload to resume there).
	headGone := rq.proto == protoTus && rq.method == http.MethodHead &&
		(code == http.StatusForbidden || code == http.StatusNotFound || code == http.StatusGone)
	if rq.offsetKnown && !headGone {
		hd.Set("Upload-Offset", strconv.FormatInt(rq.offset, 10))
	}
	// Upload-Complete describes an upload: a response about none (a 412 for the
	// protocol version, a 401, a creation refused before it created anything) has none.
	// Up to interop 8 it says whether the upload is complete; since 9 (draft -12) whose
	// semantics apply, and an error is the resumable upload protocol's: ?0, even for an
	// upload that is complete.
	if rq.proto == protoIETF && r.Method != http.MethodOptions && rq.offsetKnown {
		hd.Set("Upload-Complete", sfBool(rq.complete && !rq.targetSemantics()))
	} else {
		hd.Del("Upload-Complete")
	}
	switch {
	case errors.As(err, &me):
		hd.Set("Allow", me.Allow)
	case errors.As(err, &ve):
		hd.Set("Tus-Version", tusVersion)
	case code == http.StatusUnauthorized:
		hd.Set("WWW-Authenticate", `Bearer realm="chunkup"`)
	case code == http.StatusServiceUnavailable, code == http.StatusTooManyRequests, code == http.StatusLocked,
		code == http.StatusConflict && fault.Has(err, fault.Locked):
		// The delay the error asks for (a tenant over its uploads in progress waits
		// longer than one over a rate), else a second.
		hd.Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(fault.RetryAfter(err).Seconds())))))
	case code == http.StatusRequestEntityTooLarge && rq.proto == protoIETF && (h.cfg.MaxSize > 0 || rq.upload != nil):
		hd.Set("Upload-Limit", h.limit(rq.upload))
	case code == http.StatusRequestEntityTooLarge && h.cfg.MaxSize > 0:
		hd.Set("Tus-Max-Size", strconv.FormatInt(h.cfg.MaxSize, 10))
	}
	if r.Method == http.MethodHead {
		w.WriteHeader(code)
		return
	}
	if rq.proto != protoIETF {
		hd.Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(code)
		fmt.Fprintln(w, msg)
		return
	}
	p := problem{Title: http.StatusText(code), Status: code, Detail: msg}
	switch {
	case off != nil:
		p.Type, p.Title = problemMismatchingOffset, "offset from request does not match offset of resource"
		p.ExpectedOffset, p.ProvidedOffset = &off.Expected, &off.Provided
	case errors.Is(err, errLength):
		p.Type, p.Title = problemInconsistentLength, "inconsistent length values for upload"
	case fault.Has(err, fault.Ended) && rq.complete && !rq.targetSemantics():
		// Draft -12 dropped this problem type.
		p.Type, p.Title = problemCompletedUpload, "upload is already completed"
	}
	if p.Title == "" {
		p.Title = "Error " + strconv.Itoa(code)
	}
	hd.Set("Content-Type", "application/problem+json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(p)
}
