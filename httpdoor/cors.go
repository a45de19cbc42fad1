package httpdoor

import (
	"net/http"
	"strings"
)

// The CORS lists start from tusd's defaults (so every tus client that works with tusd
// works here) and add what tusd leaves out: the checksum and digest fields, x-api-key
// (chunkup's other credential header), and, exposed, Upload-Expires, Upload-Limit,
// Tus-Checksum-Algorithm, Repr-Digest and Retry-After, which browser code cannot read
// otherwise.
var (
	// CORSAllowMethods are the methods the door's pages may use.
	CORSAllowMethods = "POST, HEAD, PATCH, OPTIONS, GET, DELETE"
	corsAllowHeaders = strings.Join([]string{
		"Authorization", "Origin", "X-Requested-With", "X-Request-ID", "X-HTTP-Method-Override",
		"Content-Type", "Upload-Length", "Upload-Offset", "Tus-Resumable", "Upload-Metadata",
		"Upload-Defer-Length", "Upload-Concat", "Upload-Incomplete", "Upload-Complete",
		"Upload-Draft-Interop-Version",
		"Upload-Checksum", "Content-Digest", "Repr-Digest", "Want-Repr-Digest", "Content-Disposition",
		"X-Api-Key",
	}, ", ")
	corsExposeHeaders = strings.Join([]string{
		"Upload-Offset", "Location", "Upload-Length", "Tus-Version", "Tus-Resumable", "Tus-Max-Size",
		"Tus-Extension", "Upload-Metadata", "Upload-Defer-Length", "Upload-Concat", "Upload-Incomplete",
		"Upload-Complete", "Upload-Draft-Interop-Version",
		"Upload-Expires", "Upload-Limit", "Tus-Checksum-Algorithm", "Repr-Digest", "Retry-After",
	}, ", ")
)

// withExtra is list followed by extra, for the configured additions to the CORS lists.
func withExtra(list string, extra []string) string {
	if len(extra) == 0 {
		return list
	}
	return list + ", " + strings.Join(extra, ", ")
}

// cors applies the door's CORS policy (see webcors.Policy.Apply).
func (h *Handler) cors(w http.ResponseWriter, r *http.Request) bool { return h.origins.Apply(w, r) }
