package httpdoor

import (
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// The CORS lists start from tusd's defaults (so every tus client that works with tusd
// works here) and add what tusd leaves out: the checksum and digest fields, x-api-key
// (chunkup's other credential header), and, exposed, Upload-Expires, Upload-Limit,
// Tus-Checksum-Algorithm, Repr-Digest and Retry-After, which browser code cannot read
// otherwise.
var (
	corsAllowMethods = "POST, HEAD, PATCH, OPTIONS, GET, DELETE"
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

// cors adds the CORS headers for a request from an allowed origin and reports whether
// the request may go on. A request without Origin (not from a browser page) or from
// the door's own origin needs no CORS; one from an origin not allowed is refused, so
// that no page of another site can drive uploads with a user's credentials.
func (h *Handler) cors(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	hd := w.Header()
	hd.Add("Vary", "Origin")
	allowed := slices.Contains(h.cfg.CORS.AllowedOrigins, "*") || slices.Contains(h.cfg.CORS.AllowedOrigins, origin)
	if !allowed {
		// Browsers send Origin on same-origin POST, PATCH and DELETE too.
		return h.sameOrigin(r, origin)
	}
	hd.Set("Access-Control-Allow-Origin", origin)
	if h.cfg.CORS.AllowCredentials {
		hd.Set("Access-Control-Allow-Credentials", "true")
	}
	if r.Method == http.MethodOptions {
		hd.Set("Access-Control-Allow-Methods", corsAllowMethods)
		hd.Set("Access-Control-Allow-Headers", h.corsAllow)
		hd.Set("Access-Control-Max-Age", strconv.FormatInt(int64(h.cfg.CORS.MaxAge.Seconds()), 10))
	} else {
		hd.Set("Access-Control-Expose-Headers", h.corsExpose)
	}
	return true
}

// sameOrigin reports whether origin is the door's own. The Host header alone cannot
// say so: a page of an attacker's domain that resolves to this server (DNS rebinding)
// sends its own name as both Origin and Host. So the origin must be the configured
// public URL's, or name the server by an IP address or localhost, which no other site's
// page can have, with the scheme and Host the request came with.
func (h *Handler) sameOrigin(r *http.Request, origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") {
		return false
	}
	if h.publicOrigin != "" {
		return strings.EqualFold(origin, h.publicOrigin)
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if !strings.EqualFold(u.Scheme, scheme) || !strings.EqualFold(u.Host, r.Host) {
		return false
	}
	host := u.Hostname()
	return strings.EqualFold(host, "localhost") || net.ParseIP(host) != nil
}
